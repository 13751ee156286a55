//! The chat state machine: what every transition checks and writes.
//!
//! Each function runs inside one write transaction (opened and committed by
//! the engine): it locks the chat row, checks the move against
//! [`crate::status::allowed`], writes, bumps the snapshot version and records the change
//! notice to publish after commit. Worker transitions are additionally fenced on the
//! lease: the worker must own the chat at the history version it claimed.

use std::collections::HashSet;
use std::ops::RangeInclusive;

use chrono::{DateTime, Utc};
use keel_core::{ErrorKind, Part, Role};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::error::{Result, StoreError};
use crate::ops::TxOps;
use crate::rows::{ChatCols, MessageCols, QueuedCols, ToolRecordCols, from_json, ms, to_json};
use crate::status::{ChatStatus, Transition, allowed};
use crate::types::{
    Busy, ChangeNotice, Chat, ChatId, LastError, Lease, MessageId, MessageKind, NewChat,
    NewMessage, NewSummary, Next, PendingToolCall, QueueId, QueuedMessage, SendOutcome,
    StoreOptions, StoredMessage, ToolRecord, ToolResultInput,
};

/// The result given to pending client-side calls when the user interrupts.
pub const INTERRUPTED_BY_USER: &str = "tool call was interrupted by the user";
/// The result given to pending client-side calls whose deadline passed.
pub const DEADLINE_PASSED: &str = "no tool result arrived before the deadline";
/// The text of the visible record that a conversation was summarised.
pub const COMPACTION_NOTICE: &str =
    "The conversation so far was summarised to free space in the model's context.";

/// Most chats one sweep (acquire, stale recovery, expiry) handles.
const SWEEP_LIMIT: i64 = 100;

/// One write transaction in progress.
pub(crate) struct Ctx<'a> {
    ops: &'a mut dyn TxOps,
    opts: &'a StoreOptions,
    now: DateTime<Utc>,
    notices: Vec<ChangeNotice>,
}

impl<'a> Ctx<'a> {
    pub fn new(ops: &'a mut dyn TxOps, opts: &'a StoreOptions) -> Self {
        Self {
            ops,
            opts,
            now: opts.clock.now(),
            notices: Vec::new(),
        }
    }

    pub fn into_notices(self) -> Vec<ChangeNotice> {
        self.notices
    }

    async fn load(&mut self, id: ChatId) -> Result<Chat> {
        self.ops
            .lock_chat(&id.to_string())
            .await?
            .ok_or(StoreError::not_found("chat"))?
            .into_chat()
    }

    async fn load_queue(&mut self, chat: &mut Chat) -> Result<()> {
        chat.queued = self
            .ops
            .queue(&chat.id.to_string())
            .await?
            .into_iter()
            .map(QueuedCols::into_queued)
            .collect::<Result<_>>()?;
        Ok(())
    }

    /// Writes the chat with a new snapshot version. A status or queue change is a chat
    /// event and takes the next event sequence number.
    async fn save(
        &mut self,
        chat: &mut Chat,
        before: ChatStatus,
        queue_changed: bool,
    ) -> Result<()> {
        self.stamp(chat, before, queue_changed);
        self.ops.update_chat(&ChatCols::from_chat(chat)?).await?;
        self.notice(chat, false);
        Ok(())
    }

    fn stamp(&self, chat: &mut Chat, before: ChatStatus, queue_changed: bool) {
        chat.version += 1;
        chat.updated_at = self.now;
        if chat.status != before || queue_changed {
            chat.event_seq += 1;
        }
    }

    fn notice(&mut self, chat: &Chat, deleted: bool) {
        self.notices.push(ChangeNotice {
            chat_id: chat.id,
            version: chat.version,
            status: chat.status,
            history_version: chat.history_version,
            event_seq: chat.event_seq,
            deleted,
        });
    }

    /// Appends a message to history with the next message id and event sequence number.
    async fn insert_message(&mut self, chat: &mut Chat, msg: NewMessage) -> Result<StoredMessage> {
        let stored = self.next_message(chat, msg)?;
        self.ops
            .insert_messages(&[MessageCols::from_message(&stored)?])
            .await?;
        Ok(stored)
    }

    /// Numbers a new message (next message id, next event sequence) without writing it.
    fn next_message(&self, chat: &mut Chat, msg: NewMessage) -> Result<StoredMessage> {
        let role = msg
            .role
            .ok_or_else(|| StoreError::invalid("a committed message needs a role"))?;
        chat.last_message_id += 1;
        chat.event_seq += 1;
        let stored = StoredMessage {
            id: chat.last_message_id,
            chat_id: chat.id,
            role,
            parts: msg.parts,
            content_version: 1,
            usage: msg.usage,
            context_limit: msg.context_limit,
            runtime_ms: msg.runtime_ms,
            interrupted: msg.interrupted,
            provider_response_id: msg.provider_response_id,
            event_seq: chat.event_seq,
            created_at: self.now,
            kind: msg.kind,
        };
        Ok(stored)
    }

    async fn insert_user(&mut self, chat: &mut Chat, parts: Vec<Part>) -> Result<MessageId> {
        Ok(self
            .insert_message(chat, NewMessage::new(Role::User, parts))
            .await?
            .id)
    }

    /// Answers every pending client-side call with an error result and leaves nothing
    /// pending.
    async fn answer_pending_with_errors(&mut self, chat: &mut Chat, reason: &str) -> Result<()> {
        let pending = std::mem::take(&mut chat.pending_tool_calls);
        chat.pending_deadline = None;
        if pending.is_empty() {
            return Ok(());
        }
        let now = self.now;
        let parts = pending
            .iter()
            .map(|c| {
                Part::tool_result(
                    &c.tool_call_id,
                    &c.tool_name,
                    Value::String(reason.to_owned()),
                    true,
                    false,
                )
                .at(now)
            })
            .collect();
        self.insert_message(chat, NewMessage::new(Role::Tool, parts))
            .await?;
        Ok(())
    }

    /// Moves the queue head into history as the next user message.
    async fn start_queue_head(&mut self, chat: &mut Chat) -> Result<Option<MessageId>> {
        self.load_queue(chat).await?;
        if chat.queued.is_empty() {
            return Ok(None);
        }
        let head = chat.queued.remove(0);
        self.ops.delete_queued(&head.id.to_string()).await?;
        Ok(Some(self.insert_user(chat, head.parts).await?))
    }

    async fn enqueue(
        &mut self,
        chat: &mut Chat,
        parts: Vec<Part>,
        at_head: bool,
    ) -> Result<QueueId> {
        self.load_queue(chat).await?;
        if chat.queued.len() >= self.opts.max_queue {
            return Err(StoreError::QueueFull {
                limit: self.opts.max_queue,
            });
        }
        let position = if at_head {
            chat.queued.first().map_or(0, |q| q.position - 1)
        } else {
            chat.queued.last().map_or(0, |q| q.position + 1)
        };
        let queued = QueuedMessage {
            id: Uuid::new_v4(),
            chat_id: chat.id,
            position,
            parts,
            created_at: self.now,
        };
        self.ops
            .insert_queued(&QueuedCols::from_queued(&queued)?)
            .await?;
        let id = queued.id;
        if at_head {
            chat.queued.insert(0, queued);
        } else {
            chat.queued.push(queued);
        }
        Ok(id)
    }

    fn renewed_lease(&self, chat: &mut Chat, worker_id: &str) -> Lease {
        let expires_at = self.now + self.opts.lease_ttl;
        chat.worker_id = Some(worker_id.to_owned());
        chat.lease_expires_at = Some(expires_at);
        Lease {
            chat_id: chat.id,
            worker_id: worker_id.to_owned(),
            history_version: chat.history_version,
            expires_at,
        }
    }

    async fn idem_lookup<T: DeserializeOwned>(
        &mut self,
        user: &str,
        key: &str,
    ) -> Result<Option<T>> {
        let since = ms(self.now - self.opts.idempotency_ttl);
        match self.ops.idem_get(user, key, since).await? {
            Some(resp) => Ok(Some(from_json("idempotency_keys.response", &resp)?)),
            None => Ok(None),
        }
    }

    async fn idem_remember<T: Serialize>(
        &mut self,
        user: &str,
        key: &str,
        value: &T,
    ) -> Result<()> {
        let resp = to_json("idempotency_keys.response", value)?;
        let expired_before = ms(self.now - self.opts.idempotency_ttl);
        if self
            .ops
            .idem_put(user, key, &resp, ms(self.now), expired_before)
            .await?
        {
            Ok(())
        } else {
            Err(StoreError::IdempotencyInProgress)
        }
    }
}

fn check(chat: &Chat, transition: Transition) -> Result<()> {
    if allowed(Some(chat.status), transition) {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            status: chat.status,
            transition,
        })
    }
}

/// The worker must own the chat at the history version it claimed. `interrupted_persist`
/// also lets the partial output of an interrupted step in while the chat is
/// `interrupting` and was released: the user asked to stop, not to lose what was said.
fn fence(chat: &Chat, lease: &Lease, interrupted_persist: bool) -> Result<()> {
    if chat.history_version != lease.history_version {
        return Err(StoreError::Fenced {
            chat_id: chat.id,
            expected: lease.history_version,
            actual: chat.history_version,
        });
    }
    match &chat.worker_id {
        Some(owner) if *owner == lease.worker_id => Ok(()),
        None if interrupted_persist && chat.status == ChatStatus::Interrupting => Ok(()),
        _ => Err(StoreError::LostOwnership {
            chat_id: chat.id,
            worker_id: lease.worker_id.clone(),
        }),
    }
}

/// Rejects empty or oversize user content.
pub(crate) fn check_content(opts: &StoreOptions, parts: &[Part]) -> Result<()> {
    if parts.is_empty() {
        return Err(StoreError::invalid("a message needs at least one part"));
    }
    check_size(opts, parts)
}

fn check_size<T: Serialize + ?Sized>(opts: &StoreOptions, value: &T) -> Result<()> {
    let size = to_json("content", value)?.len();
    if size > opts.max_content_bytes {
        return Err(StoreError::invalid(format!(
            "content is {size} bytes, more than the limit of {}",
            opts.max_content_bytes
        )));
    }
    Ok(())
}

fn create_key(key: &str) -> String {
    format!("create:{key}")
}

fn send_key(chat: ChatId, key: &str) -> String {
    format!("send:{chat}:{key}")
}

// ---- API transitions ---------------------------------------------------------------

pub(crate) async fn create_chat(cx: &mut Ctx<'_>, req: NewChat) -> Result<Chat> {
    check_content(cx.opts, &req.parts)?;
    check_size(cx.opts, &req.tools)?;
    if let Some(key) = &req.idempotency_key
        && let Some(first) = cx.idem_lookup::<Chat>(&req.owner, &create_key(key)).await?
    {
        return Ok(first);
    }
    let mut chat = Chat {
        id: Uuid::new_v4(),
        owner: req.owner,
        title: req.title,
        model: req.model,
        status: ChatStatus::Running,
        archived: false,
        max_steps: req.max_steps,
        system: req.system,
        tools: req.tools,
        worker_id: None,
        lease_expires_at: None,
        version: 1,
        history_version: 1,
        event_seq: 0,
        last_message_id: 0,
        last_error: None,
        retry_state: None,
        pending_tool_calls: Vec::new(),
        pending_deadline: None,
        created_at: cx.now,
        updated_at: cx.now,
        compact_requested: false,
        queued: Vec::new(),
    };
    cx.ops.insert_chat(&ChatCols::from_chat(&chat)?).await?;
    cx.insert_user(&mut chat, req.parts).await?;
    cx.ops.update_chat(&ChatCols::from_chat(&chat)?).await?;
    cx.notice(&chat, false);
    if let Some(key) = &req.idempotency_key {
        let owner = chat.owner.clone();
        cx.idem_remember(&owner, &create_key(key), &chat).await?;
    }
    Ok(chat)
}

pub(crate) async fn send_message(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    parts: Vec<Part>,
    busy: Busy,
    idempotency_key: Option<&str>,
) -> Result<SendOutcome> {
    check_content(cx.opts, &parts)?;
    let mut chat = cx.load(chat_id).await?;
    check(&chat, Transition::SendMessage)?;
    let owner = chat.owner.clone();
    if let Some(key) = idempotency_key
        && let Some(first) = cx.idem_lookup(&owner, &send_key(chat_id, key)).await?
    {
        return Ok(first);
    }
    let before = chat.status;
    let mut queue_changed = false;
    let outcome = match (chat.status, busy) {
        (ChatStatus::Waiting | ChatStatus::Error, _) => {
            chat.last_error = None;
            chat.retry_state = None;
            chat.status = ChatStatus::Running;
            SendOutcome::Started {
                message_id: cx.insert_user(&mut chat, parts).await?,
            }
        }
        (ChatStatus::RequiresAction, Busy::Interrupt) => {
            cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
                .await?;
            chat.status = ChatStatus::Running;
            SendOutcome::Started {
                message_id: cx.insert_user(&mut chat, parts).await?,
            }
        }
        (ChatStatus::Running | ChatStatus::Interrupting, Busy::Interrupt) => {
            queue_changed = true;
            let queue_id = cx.enqueue(&mut chat, parts, true).await?;
            chat.status = ChatStatus::Interrupting;
            SendOutcome::Queued { queue_id }
        }
        (
            ChatStatus::Running | ChatStatus::Interrupting | ChatStatus::RequiresAction,
            Busy::Queue,
        ) => {
            queue_changed = true;
            SendOutcome::Queued {
                queue_id: cx.enqueue(&mut chat, parts, false).await?,
            }
        }
    };
    cx.save(&mut chat, before, queue_changed).await?;
    if let Some(key) = idempotency_key {
        cx.idem_remember(&owner, &send_key(chat_id, key), &outcome)
            .await?;
    }
    Ok(outcome)
}

pub(crate) async fn edit_message(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    message_id: MessageId,
    parts: Vec<Part>,
) -> Result<Chat> {
    check_content(cx.opts, &parts)?;
    let mut chat = cx.load(chat_id).await?;
    check(&chat, Transition::EditMessage)?;
    let id = chat.id.to_string();
    let mut message = cx
        .ops
        .get_message(&id, message_id)
        .await?
        .ok_or(StoreError::not_found("message"))?
        .into_message()?;
    if message.role != Role::User {
        return Err(StoreError::invalid("only user messages can be edited"));
    }
    let before = chat.status;
    cx.ops.soft_delete_after(&id, message_id).await?;
    cx.ops.clear_queue(&id).await?;
    cx.ops.clear_live(&id).await?;
    cx.ops.delete_checkpoint(&id).await?;
    cx.ops.clear_tool_records(&id).await?;
    chat.event_seq += 1;
    message.parts = parts;
    message.content_version += 1;
    message.event_seq = chat.event_seq;
    cx.ops
        .replace_message(&MessageCols::from_message(&message)?)
        .await?;
    // A new history version fences the worker that generated from the old history; the
    // chat is released so that any worker claims it afresh.
    chat.history_version += 1;
    chat.status = ChatStatus::Running;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    chat.pending_tool_calls.clear();
    chat.pending_deadline = None;
    chat.last_error = None;
    chat.retry_state = None;
    chat.queued.clear();
    cx.save(&mut chat, before, true).await?;
    Ok(chat)
}

pub(crate) async fn interrupt(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    check(&chat, Transition::Interrupt)?;
    let before = chat.status;
    match chat.status {
        ChatStatus::Running => {
            chat.status = ChatStatus::Interrupting;
            cx.save(&mut chat, before, false).await?;
        }
        ChatStatus::RequiresAction => {
            cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
                .await?;
            chat.status = ChatStatus::Waiting;
            cx.save(&mut chat, before, false).await?;
        }
        // Idle or already stopping: nothing changes, so the call is idempotent.
        ChatStatus::Waiting | ChatStatus::Error | ChatStatus::Interrupting => {}
    }
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

pub(crate) async fn submit_tool_results(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    results: Vec<ToolResultInput>,
) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    check(&chat, Transition::SubmitToolResults)?;
    check_size(cx.opts, &results)?;
    let pending: HashSet<&str> = chat
        .pending_tool_calls
        .iter()
        .map(|c| c.tool_call_id.as_str())
        .collect();
    let given: HashSet<&str> = results.iter().map(|r| r.tool_call_id.as_str()).collect();
    if given.len() != results.len() || given != pending {
        let mut want: Vec<&str> = pending.into_iter().collect();
        want.sort_unstable();
        return Err(StoreError::invalid(format!(
            "tool results must answer exactly the pending calls: {}",
            want.join(", ")
        )));
    }
    let now = cx.now;
    // Results in the order the model made the calls.
    let parts = chat
        .pending_tool_calls
        .iter()
        .filter_map(|call| {
            results
                .iter()
                .find(|r| r.tool_call_id == call.tool_call_id)
                .map(|r| {
                    Part::tool_result(
                        &call.tool_call_id,
                        &call.tool_name,
                        r.result.clone(),
                        r.is_error,
                        false,
                    )
                    .at(now)
                })
        })
        .collect();
    let before = chat.status;
    cx.insert_message(&mut chat, NewMessage::new(Role::Tool, parts))
        .await?;
    chat.pending_tool_calls.clear();
    chat.pending_deadline = None;
    chat.status = ChatStatus::Running;
    cx.save(&mut chat, before, false).await?;
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

/// Loads a chat with its queue for a queue transition, and finds the queued message.
async fn load_queued(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    queue_id: QueueId,
    transition: Transition,
) -> Result<(Chat, usize)> {
    let mut chat = cx.load(chat_id).await?;
    check(&chat, transition)?;
    cx.load_queue(&mut chat).await?;
    let index = chat
        .queued
        .iter()
        .position(|q| q.id == queue_id)
        .ok_or(StoreError::not_found("queued message"))?;
    Ok((chat, index))
}

pub(crate) async fn delete_queued(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    queue_id: QueueId,
) -> Result<Chat> {
    let (mut chat, index) = load_queued(cx, chat_id, queue_id, Transition::DeleteQueued).await?;
    cx.ops.delete_queued(&queue_id.to_string()).await?;
    chat.queued.remove(index);
    let before = chat.status;
    cx.save(&mut chat, before, true).await?;
    Ok(chat)
}

pub(crate) async fn promote_queued(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    queue_id: QueueId,
) -> Result<Chat> {
    let (mut chat, index) = load_queued(cx, chat_id, queue_id, Transition::PromoteQueued).await?;
    let mut item = chat.queued.remove(index);
    item.position = chat
        .queued
        .first()
        .map_or(item.position, |q| q.position.min(item.position) - 1);
    cx.ops
        .set_queued_position(&queue_id.to_string(), item.position)
        .await?;
    chat.queued.insert(0, item);
    let before = chat.status;
    match chat.status {
        ChatStatus::Running => chat.status = ChatStatus::Interrupting,
        ChatStatus::Interrupting => {}
        // Nothing is running: the promoted message starts now.
        ChatStatus::Waiting | ChatStatus::Error | ChatStatus::RequiresAction => {
            cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
                .await?;
            cx.start_queue_head(&mut chat).await?;
            chat.last_error = None;
            chat.status = ChatStatus::Running;
        }
    }
    cx.save(&mut chat, before, true).await?;
    Ok(chat)
}

pub(crate) async fn set_archived(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    archived: bool,
) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let t = if archived {
        Transition::Archive
    } else {
        Transition::Unarchive
    };
    check(&chat, t)?;
    if chat.archived != archived {
        chat.archived = archived;
        let before = chat.status;
        cx.save(&mut chat, before, false).await?;
    }
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

pub(crate) async fn delete_chat(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<()> {
    let mut chat = cx.load(chat_id).await?;
    check(&chat, Transition::Delete)?;
    cx.ops.delete_chat(&chat.id.to_string()).await?;
    chat.version += 1;
    cx.notice(&chat, true);
    Ok(())
}

// ---- worker transitions ------------------------------------------------------------

pub(crate) async fn acquire(cx: &mut Ctx<'_>, worker_id: &str, limit: usize) -> Result<Vec<Lease>> {
    let limit = i64::try_from(limit).unwrap_or(SWEEP_LIMIT).min(SWEEP_LIMIT);
    let ids = cx.ops.claimable_chats(ms(cx.now), limit).await?;
    let mut leases = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(cols) = cx.ops.lock_chat(&id).await? else {
            continue;
        };
        let mut chat = cols.into_chat()?;
        let lease_live = chat.lease_expires_at.is_some_and(|t| t >= cx.now);
        if !allowed(Some(chat.status), Transition::Acquire)
            || (chat.worker_id.is_some() && lease_live)
        {
            continue;
        }
        // Each acquisition gets an owner token of its own: a run of this same worker that
        // lost the lease (say, its renewal came late and the chat was claimed again) is
        // fenced out instead of writing beside the new run.
        if chat.worker_id.is_some() {
            skip_unflushed_numbers(&mut chat);
        }
        let owner = format!("{worker_id}.{}", Uuid::new_v4().simple());
        let lease = cx.renewed_lease(&mut chat, &owner);
        let before = chat.status;
        cx.save(&mut chat, before, false).await?;
        leases.push(lease);
    }
    Ok(leases)
}

/// How far the event sequence jumps when a chat is taken from an owner that died, lost its
/// lease or gave it back (shutdown, database failure). That owner may have sent clients numbered parts its log never received (they
/// wait up to one batch window); the next owner numbers above all of them, so a client
/// resuming from such a number misses nothing. No step streams a million parts between two
/// flushes of its log.
pub const RECOVERY_SEQ_GAP: i64 = 1_000_000;

fn skip_unflushed_numbers(chat: &mut Chat) {
    chat.event_seq = chat.event_seq.saturating_add(RECOVERY_SEQ_GAP);
}

pub(crate) async fn renew_lease(cx: &mut Ctx<'_>, lease: &Lease) -> Result<Lease> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::RenewLease)?;
    let renewed = cx.renewed_lease(&mut chat, &lease.worker_id);
    let before = chat.status;
    cx.save(&mut chat, before, false).await?;
    Ok(renewed)
}

/// Appends to the live-part log. Not a snapshot change: the version stays, only the
/// event sequence advances (one number per entry).
pub(crate) async fn append_live_parts(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    payloads: &[Value],
) -> Result<RangeInclusive<i64>> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::AppendLiveParts)?;
    let first = chat.event_seq + 1;
    let count = i64::try_from(payloads.len())
        .map_err(|_| StoreError::invalid("too many live parts in one batch"))?;
    let last = first + count - 1;
    if payloads.is_empty() {
        return Ok(first..=last);
    }
    // One row per batch: a single JSON array is far cheaper to write than a row per part.
    let json = to_json("live_parts.payloads", payloads)?;
    let id = chat.id.to_string();
    cx.ops.append_live(&id, first, last, &json).await?;
    chat.event_seq = last;
    cx.ops.set_event_seq(&id, last).await?;
    cx.notice(&chat, false);
    Ok(first..=last)
}

/// Appends live parts the worker numbered itself. Each run of consecutive numbers is one
/// batch row; the event sequence advances past the highest number.
pub(crate) async fn append_live_entries(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    entries: &[crate::types::LiveEntry],
) -> Result<()> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::AppendLiveParts)?;
    let id = chat.id.to_string();
    let mut start = 0;
    while start < entries.len() {
        let mut end = start + 1;
        while end < entries.len() && entries[end].seq == entries[end - 1].seq + 1 {
            end += 1;
        }
        let run = &entries[start..end];
        let payloads: Vec<&Value> = run.iter().map(|e| &e.payload).collect();
        let json = to_json("live_parts.payloads", &payloads)?;
        cx.ops
            .append_live(&id, run[0].seq, run[run.len() - 1].seq, &json)
            .await?;
        start = end;
    }
    let last = entries
        .iter()
        .map(|e| e.seq)
        .max()
        .unwrap_or(chat.event_seq);
    if last > chat.event_seq {
        chat.event_seq = last;
        cx.ops.set_event_seq(&id, last).await?;
    }
    Ok(())
}

/// Commits a step's messages and voids the live-part log in the same transaction.
pub(crate) async fn commit_step(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    messages: Vec<NewMessage>,
) -> Result<Vec<MessageId>> {
    let mut chat = cx.load(lease.chat_id).await?;
    let interrupted = messages.iter().any(|m| m.interrupted);
    fence(&chat, lease, interrupted)?;
    check(&chat, Transition::CommitStep)?;
    if messages.iter().any(|m| m.role.is_none()) {
        return Err(StoreError::invalid("a committed message needs a role"));
    }
    let mut ids = Vec::with_capacity(messages.len());
    let mut rows = Vec::with_capacity(messages.len());
    for m in messages {
        let stored = cx.next_message(&mut chat, m)?;
        ids.push(stored.id);
        rows.push(MessageCols::from_message(&stored)?);
    }
    let before = chat.status;
    cx.stamp(&mut chat, before, false);
    cx.ops
        .commit_writes(&rows, &ChatCols::from_chat(&chat)?)
        .await?;
    // Tool records only serve to resume the step in progress; once its results are
    // committed, a record could only be mistaken for a later call's.
    cx.ops.clear_tool_records(&chat.id.to_string()).await?;
    cx.notice(&chat, false);
    Ok(ids)
}

/// Asks for a compaction of an idle chat: it becomes runnable with the request flag set,
/// and the worker that claims it only summarises the history.
pub(crate) async fn request_compaction(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    check(&chat, Transition::RequestCompaction)?;
    let before = chat.status;
    chat.status = ChatStatus::Running;
    chat.compact_requested = true;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    cx.save(&mut chat, before, false).await?;
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

/// Commits a summary boundary and the visible notice that the conversation was
/// summarised, clearing the live-part log the summary streamed into.
pub(crate) async fn commit_summary(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    summary: NewSummary,
) -> Result<Vec<MessageId>> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::CommitSummary)?;
    if summary.text.trim().is_empty() {
        return Err(StoreError::invalid("a summary needs text"));
    }
    let messages = [
        NewMessage {
            usage: Some(summary.usage),
            context_limit: summary.context_limit,
            kind: MessageKind::Summary,
            ..NewMessage::new(Role::Assistant, vec![Part::text(summary.text)])
        },
        NewMessage {
            kind: MessageKind::CompactionNotice,
            ..NewMessage::new(Role::System, vec![Part::text(COMPACTION_NOTICE)])
        },
    ];
    let mut ids = Vec::with_capacity(messages.len());
    let mut rows = Vec::with_capacity(messages.len());
    for m in messages {
        let stored = cx.next_message(&mut chat, m)?;
        ids.push(stored.id);
        rows.push(MessageCols::from_message(&stored)?);
    }
    chat.compact_requested = false;
    let before = chat.status;
    cx.stamp(&mut chat, before, false);
    cx.ops
        .commit_writes(&rows, &ChatCols::from_chat(&chat)?)
        .await?;
    cx.notice(&chat, false);
    Ok(ids)
}

pub(crate) async fn record_tool(cx: &mut Ctx<'_>, lease: &Lease, record: ToolRecord) -> Result<()> {
    let chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::RecordTool)?;
    if record.chat_id != chat.id {
        return Err(StoreError::invalid("tool record of another chat"));
    }
    cx.ops
        .upsert_tool_record(&ToolRecordCols::from_record(&record)?)
        .await
}

pub(crate) async fn set_retry_state(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    state: Option<Value>,
) -> Result<()> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::SetRetryState)?;
    chat.retry_state = state;
    let before = chat.status;
    cx.save(&mut chat, before, false).await
}

/// Ends a run: the queue head starts next (same worker, chat stays `running`), or the
/// chat goes `waiting` and is released.
async fn end_run(cx: &mut Ctx<'_>, lease: &Lease, transition: Transition) -> Result<Next> {
    let chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, transition)?;
    end_loaded_run(cx, chat, lease).await
}

/// Ends the run of a loaded, fenced chat: the live-part log and checkpoint are void, and the
/// queue head starts the next run, or the chat waits.
async fn end_loaded_run(cx: &mut Ctx<'_>, mut chat: Chat, lease: &Lease) -> Result<Next> {
    let before = chat.status;
    let id = chat.id.to_string();
    cx.ops.clear_live(&id).await?;
    cx.ops.delete_checkpoint(&id).await?;
    chat.retry_state = None;
    chat.compact_requested = false;
    let next = match cx.start_queue_head(&mut chat).await? {
        Some(message_id) => {
            chat.status = ChatStatus::Running;
            Next::Continue {
                lease: cx.renewed_lease(&mut chat, &lease.worker_id),
                message_id,
            }
        }
        None => {
            chat.status = ChatStatus::Waiting;
            chat.worker_id = None;
            chat.lease_expires_at = None;
            Next::Idle
        }
    };
    let queue_changed = matches!(next, Next::Continue { .. });
    cx.save(&mut chat, before, queue_changed).await?;
    Ok(next)
}

pub(crate) async fn finish_interruption(cx: &mut Ctx<'_>, lease: &Lease) -> Result<Next> {
    end_run(cx, lease, Transition::FinishInterruption).await
}

pub(crate) async fn finish_run(cx: &mut Ctx<'_>, lease: &Lease) -> Result<Next> {
    end_run(cx, lease, Transition::FinishRun).await
}

pub(crate) async fn fail_run(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    kind: ErrorKind,
    message: String,
) -> Result<()> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::FailRun)?;
    let before = chat.status;
    cx.ops.clear_live(&chat.id.to_string()).await?;
    chat.status = ChatStatus::Error;
    chat.compact_requested = false;
    chat.last_error = Some(LastError { kind, message });
    chat.worker_id = None;
    chat.lease_expires_at = None;
    chat.retry_state = None;
    cx.save(&mut chat, before, false).await
}

/// The step ended with client-side tool calls. Normally the chat waits for their results;
/// when the user interrupted meanwhile, the calls are answered as interrupted at once (as an
/// interrupt of a `requires_action` chat would) and the run ends like any interrupted one.
pub(crate) async fn enter_requires_action(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    calls: Vec<PendingToolCall>,
    deadline: Option<DateTime<Utc>>,
) -> Result<Next> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::EnterRequiresAction)?;
    if calls.is_empty() {
        return Err(StoreError::invalid(
            "requires_action needs pending tool calls",
        ));
    }
    if chat.status == ChatStatus::Interrupting {
        chat.pending_tool_calls = calls;
        cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
            .await?;
        return end_loaded_run(cx, chat, lease).await;
    }
    let before = chat.status;
    chat.status = ChatStatus::RequiresAction;
    chat.pending_tool_calls = calls;
    chat.pending_deadline = deadline;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    chat.retry_state = None;
    cx.save(&mut chat, before, false).await?;
    Ok(Next::Idle)
}

/// The worker stops without finishing: the chat stays runnable and unowned, so another
/// worker (or this one after a restart) picks it up at once.
pub(crate) async fn release_on_shutdown(cx: &mut Ctx<'_>, lease: &Lease) -> Result<()> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::ReleaseOnShutdown)?;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    // A run released after a database failure may have sent parts its log never got.
    skip_unflushed_numbers(&mut chat);
    let before = chat.status;
    cx.save(&mut chat, before, false).await
}

pub(crate) async fn recover_stale(cx: &mut Ctx<'_>) -> Result<Vec<ChatId>> {
    let ids = cx.ops.stale_chats(ms(cx.now), SWEEP_LIMIT).await?;
    let mut done = Vec::new();
    for id in ids {
        let Some(cols) = cx.ops.lock_chat(&id).await? else {
            continue;
        };
        let mut chat = cols.into_chat()?;
        let expired = chat.lease_expires_at.is_some_and(|t| t < cx.now);
        if chat.worker_id.is_none() || !expired {
            continue;
        }
        chat.worker_id = None;
        chat.lease_expires_at = None;
        skip_unflushed_numbers(&mut chat);
        let before = chat.status;
        cx.save(&mut chat, before, false).await?;
        done.push(chat.id);
    }
    Ok(done)
}

/// The distinct owners of chats whose token starts with `prefix` (a write transaction: the
/// listing locks rows as the other sweeps do).
pub(crate) async fn chat_owners(cx: &mut Ctx<'_>, prefix: &str) -> Result<Vec<String>> {
    let owned = cx.ops.owned_with_prefix(prefix, SWEEP_LIMIT).await?;
    let mut owners: Vec<String> = owned.into_iter().map(|(_, owner)| owner).collect();
    owners.sort_unstable();
    owners.dedup();
    Ok(owners)
}

/// Releases the chats held by exactly these owner tokens (processes known to be gone),
/// without waiting for their leases to expire.
pub(crate) async fn release_owners(cx: &mut Ctx<'_>, owners: &[String]) -> Result<Vec<ChatId>> {
    let mut done = Vec::new();
    for owner in owners {
        for (id, held_by) in cx.ops.owned_with_prefix(owner, SWEEP_LIMIT).await? {
            if held_by != *owner {
                continue;
            }
            let Some(cols) = cx.ops.lock_chat(&id).await? else {
                continue;
            };
            let mut chat = cols.into_chat()?;
            if chat.worker_id.as_deref() != Some(owner.as_str())
                || !allowed(Some(chat.status), Transition::RecoverStale)
            {
                continue;
            }
            chat.worker_id = None;
            chat.lease_expires_at = None;
            skip_unflushed_numbers(&mut chat);
            let before = chat.status;
            cx.save(&mut chat, before, false).await?;
            done.push(chat.id);
        }
    }
    Ok(done)
}

pub(crate) async fn expire_pending_actions(cx: &mut Ctx<'_>) -> Result<Vec<ChatId>> {
    let ids = cx.ops.expired_actions(ms(cx.now), SWEEP_LIMIT).await?;
    let mut done = Vec::new();
    for id in ids {
        let Some(cols) = cx.ops.lock_chat(&id).await? else {
            continue;
        };
        let mut chat = cols.into_chat()?;
        let due = chat.pending_deadline.is_some_and(|t| t < cx.now);
        if !allowed(Some(chat.status), Transition::ExpirePendingAction) || !due {
            continue;
        }
        let before = chat.status;
        cx.answer_pending_with_errors(&mut chat, DEADLINE_PASSED)
            .await?;
        chat.status = ChatStatus::Waiting;
        cx.save(&mut chat, before, false).await?;
        done.push(chat.id);
    }
    Ok(done)
}

// ---- writes outside the state machine ---------------------------------------------

pub(crate) async fn put_checkpoint(cx: &mut Ctx<'_>, chat_id: ChatId, data: &Value) -> Result<()> {
    let chat = cx.load(chat_id).await?;
    let json = to_json("checkpoints.data", data)?;
    cx.ops
        .put_checkpoint(&chat.id.to_string(), &json, ms(cx.now))
        .await
}

pub(crate) async fn delete_checkpoint(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<()> {
    cx.ops.delete_checkpoint(&chat_id.to_string()).await
}

pub(crate) async fn upsert_user(cx: &mut Ctx<'_>, name: &str, token_sha256: &str) -> Result<()> {
    if name.is_empty() {
        return Err(StoreError::invalid("a user needs a name"));
    }
    cx.ops.insert_user(name, token_sha256, ms(cx.now)).await
}

pub(crate) async fn purge_idempotency_keys(cx: &mut Ctx<'_>) -> Result<u64> {
    let before = ms(cx.now - cx.opts.idempotency_ttl);
    cx.ops.idem_purge(before).await
}
