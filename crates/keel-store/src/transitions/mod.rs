//! The chat state machine: what every transition checks and writes.
//!
//! Each function runs inside one write transaction (opened and committed by
//! the engine): it locks the chat row, checks the move against
//! [`crate::status::allowed`], writes, bumps the snapshot version and records the change
//! notice to publish after commit. Worker transitions are additionally fenced on the
//! lease: the worker must own the chat at the history version it claimed.
//!
//! Longer than most files: the context every transition shares (loading, checking, saving,
//! numbering, notices), which the files beside it only call.

use std::collections::HashSet;
use std::ops::RangeInclusive;

use chrono::{DateTime, Utc};
use keel_core::{Part, PendingToolCall, Role};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{Result, StoreError};
use crate::ops::TxOps;
use crate::rows::{
    ChatCols, ChatFence, MessageCols, QueuedCols, ToolRecordCols, from_json, ms, to_json,
};
use crate::status::{ChatStatus, Transition, permits, target};
use crate::types::{
    Busy, ChangeNotice, Chat, ChatId, ChatUpdate, ImportChat, LastError, Lease, MessageId,
    MessageKind, NewChat, NewMessage, NewSummary, Next, QueueId, QueuedMessage, SendOutcome,
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
    /// The trace context of the request making this change ([`crate::trace`]).
    trace: Option<String>,
}

/// What a change's notice says of it beyond the chat's new state ([`ChangeNotice`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Noticed {
    /// The chat was deleted.
    pub deleted: bool,
    /// The change shows in the chat list (a status, a title, archiving).
    pub listing: bool,
    /// The change may touch what a follower reports without an event number (a retry, an
    /// error): [`ChangeNotice::unnumbered_change`].
    pub unnumbered_change: bool,
}

impl Default for Noticed {
    /// An ordinary change: not a deletion, out of the list, and (unless a transition knows
    /// better) possibly of what a follower reports without a number.
    fn default() -> Self {
        Self {
            deleted: false,
            listing: false,
            unnumbered_change: true,
        }
    }
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(ops: &'a mut dyn TxOps, opts: &'a StoreOptions) -> Self {
        Self {
            ops,
            opts,
            now: opts.clock.now(),
            notices: Vec::new(),
            // With tracing off, a request's context is never stored: it costs no write.
            trace: crate::trace::current().filter(|_| opts.trace_runs),
        }
    }

    pub(crate) fn into_notices(self) -> Vec<ChangeNotice> {
        self.notices
    }

    /// Drops the trace contexts of a deleted chat or queued message (by their ids).
    async fn forget_traces(&mut self, ids: &[String]) -> Result<()> {
        if self.opts.trace_runs {
            for id in ids {
                self.ops.take_trace_parent(id).await?;
            }
        }
        Ok(())
    }

    async fn load(&mut self, id: ChatId) -> Result<Chat> {
        self.ops
            .lock_chat(&id.to_string())
            .await?
            .ok_or(StoreError::not_found("chat"))?
            .into_chat()
    }

    /// [`Ctx::load`] with the chat's queue, in one statement.
    async fn load_with_queue(&mut self, id: ChatId) -> Result<Chat> {
        let read = self
            .ops
            .lock_chat_and_queue(&id.to_string())
            .await?
            .ok_or(StoreError::not_found("chat"))?;
        crate::rows::chat_with_queue(read)
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

    /// Writes the chat with a new snapshot version. A status or queue change is state, not
    /// history: it takes no event number (see [`Ctx::stamp`]).
    async fn save(&mut self, chat: &mut Chat, mv: Move) -> Result<()> {
        self.stamp(chat, mv)?;
        self.ops.update_chat(&ChatCols::from_chat(chat)?).await?;
        if self.opts.trace_runs && crate::trace::starts_run(mv.transition, mv.from, chat.status) {
            self.ops
                .put_trace_parent(&chat.id.to_string(), self.trace.as_deref())
                .await?;
        }
        let listing = chat.status != mv.from
            || matches!(
                mv.transition,
                Transition::Archive
                    | Transition::Unarchive
                    | Transition::UpdateChat
                    | Transition::NameChat
                    | Transition::SwitchBranch
            );
        self.notice_with(
            chat,
            Noticed {
                listing,
                ..Noticed::default()
            },
        );
        Ok(())
    }

    /// Checks the move's target against the state machine, then takes a new snapshot
    /// version. Event numbers belong to history alone (messages, live parts, a branch
    /// switch): while a run streams, its owner hands out numbers that are not in the store
    /// yet, so a status or queue change numbered from the stored row would collide with one
    /// of its parts, and a follower that sent the change would skip the part. Followers learn
    /// of state changes from the notice's `unnumbered_change` instead, and send them with
    /// their current position as the id.
    fn stamp(&self, chat: &mut Chat, mv: Move) -> Result<()> {
        if !permits(mv.transition, mv.from, chat.status) {
            return Err(StoreError::IllegalMove {
                transition: mv.transition,
                from: mv.from,
                to: chat.status,
            });
        }
        chat.version += 1;
        chat.updated_at = self.now;
        Ok(())
    }

    /// A notice that leaves the chat list as it was (unless the chat is deleted).
    fn notice(&mut self, chat: &Chat, deleted: bool) {
        self.notice_with(
            chat,
            Noticed {
                deleted,
                listing: deleted,
                ..Noticed::default()
            },
        );
    }

    /// The notice of a change every event of which is numbered (a step's commit, a live-part
    /// append): the chat list stays as it was, and so does what a follower reports without
    /// a number ([`ChangeNotice::unnumbered_change`]).
    fn numbered_notice(&mut self, chat: &Chat) {
        self.notice_with(
            chat,
            Noticed {
                unnumbered_change: false,
                ..Noticed::default()
            },
        );
    }

    fn notice_with(&mut self, chat: &Chat, noticed: Noticed) {
        self.notices.push(ChangeNotice {
            chat_id: chat.id,
            version: chat.version,
            status: chat.status,
            history_version: chat.history_version,
            event_seq: chat.event_seq,
            deleted: noticed.deleted,
            owner: chat.owner.clone(),
            listing: noticed.listing,
            unowned: chat.worker_id.is_none(),
            unnumbered_change: noticed.unnumbered_change,
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

    /// Numbers `messages` in order as the chat's next ones: their ids and the rows to write.
    fn number_messages(
        &self,
        chat: &mut Chat,
        messages: impl IntoIterator<Item = NewMessage>,
    ) -> Result<(Vec<MessageId>, Vec<MessageCols>)> {
        let mut ids = Vec::new();
        let mut rows = Vec::new();
        for message in messages {
            let stored = self.next_message(chat, message)?;
            ids.push(stored.id);
            rows.push(MessageCols::from_message(&stored)?);
        }
        Ok((ids, rows))
    }

    fn next_message(&self, chat: &mut Chat, msg: NewMessage) -> Result<StoredMessage> {
        let role = msg
            .role
            .ok_or_else(|| StoreError::invalid("a committed message needs a role"))?;
        chat.last_message_id += 1;
        chat.event_seq += 1;
        // Every new message continues the current branch.
        let parent_id = (chat.leaf_id > 0).then_some(chat.leaf_id);
        chat.leaf_id = chat.last_message_id;
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
            finish_reason: msg.finish_reason,
            parent_id,
            siblings: Vec::new(),
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
        if self.opts.trace_runs {
            // The queued message's run starts from the request that sent it.
            let parent = self.ops.take_trace_parent(&head.id.to_string()).await?;
            self.ops
                .put_trace_parent(&chat.id.to_string(), parent.as_deref())
                .await?;
        }
        Ok(Some(self.insert_user(chat, head.parts).await?))
    }

    /// After the pending calls of a `requires_action` chat were answered: the queue head
    /// runs next (`running`, unowned, for any worker to claim), else the chat waits.
    async fn next_or_idle(&mut self, chat: &mut Chat) -> Result<()> {
        if self.start_queue_head(chat).await?.is_some() {
            chat.status = ChatStatus::Running;
            chat.last_error = None;
            chat.worker_id = None;
            chat.lease_expires_at = None;
        } else {
            chat.status = ChatStatus::Waiting;
        }
        Ok(())
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
        if let Some(parent) = &self.trace {
            self.ops
                .put_trace_parent(&queued.id.to_string(), Some(parent))
                .await?;
        }
        let id = queued.id;
        if at_head {
            chat.queued.insert(0, queued);
        } else {
            chat.queued.push(queued);
        }
        Ok(id)
    }

    fn renewed_lease(&self, chat: &mut Chat, worker_id: &str) -> Lease {
        // The granting transition sets `granted_version` again once its write has taken the
        // new version.
        let lease = self.fresh_lease(
            chat.id,
            chat.status,
            chat.history_version,
            chat.version,
            worker_id,
        );
        chat.worker_id = Some(worker_id.to_owned());
        chat.lease_expires_at = Some(lease.expires_at);
        lease
    }

    /// A lease of `worker_id` on the chat running from now for the lease period.
    fn fresh_lease(
        &self,
        chat_id: ChatId,
        status: ChatStatus,
        history_version: i64,
        granted_version: i64,
        worker_id: &str,
    ) -> Lease {
        Lease {
            chat_id,
            status,
            worker_id: worker_id.to_owned(),
            history_version,
            expires_at: self.now + self.opts.lease_ttl,
            granted_version,
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

/// A transition under way from a status the state machine allows; [`Ctx::save`] checks
/// its target before anything is written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Move {
    transition: Transition,
    from: ChatStatus,
}

/// Starts `transition` on a loaded chat, or a typed conflict when its status forbids it.
fn check(chat: &Chat, transition: Transition) -> Result<Move> {
    check_status(chat.status, transition)
}

/// [`check`] on a status alone (a chat read only as far as its fence).
fn check_status(status: ChatStatus, transition: Transition) -> Result<Move> {
    target(transition, status)
        .map(|_| Move {
            transition,
            from: status,
        })
        .ok_or(StoreError::Conflict { status, transition })
}

/// Starts `transition` if the chat's status allows it (sweeps skip the chats it does not
/// apply to).
fn may(chat: &Chat, transition: Transition) -> Option<Move> {
    target(transition, chat.status).map(|_| Move {
        transition,
        from: chat.status,
    })
}

/// The worker must own the chat at the history version it claimed. `interrupted_persist`
/// also lets the partial output of an interrupted step in while the chat is
/// `interrupting` and was released: the user asked to stop, not to lose what was said.
/// Takes a whole chat or the narrow read of one ([`TxOps::lock_fences`]): the same
/// decision from the same columns.
fn fence<'a, C>(chat: &'a C, lease: &Lease, interrupted_persist: bool) -> Result<()>
where
    HeldBy<'a>: From<&'a C>,
{
    HeldBy::from(chat).admits(lease, interrupted_persist)
}

/// What a fence decides on, however much of the chat was read.
struct HeldBy<'a> {
    chat_id: ChatId,
    status: ChatStatus,
    worker_id: Option<&'a str>,
    history_version: i64,
}

impl<'a> From<&'a Chat> for HeldBy<'a> {
    fn from(chat: &'a Chat) -> Self {
        Self {
            chat_id: chat.id,
            status: chat.status,
            worker_id: chat.worker_id.as_deref(),
            history_version: chat.history_version,
        }
    }
}

impl<'a> From<&'a ChatFence> for HeldBy<'a> {
    fn from(chat: &'a ChatFence) -> Self {
        Self {
            chat_id: chat.id,
            status: chat.status,
            worker_id: chat.worker_id.as_deref(),
            history_version: chat.history_version,
        }
    }
}

impl HeldBy<'_> {
    fn admits(&self, lease: &Lease, interrupted_persist: bool) -> Result<()> {
        if self.history_version != lease.history_version {
            return Err(StoreError::Fenced {
                chat_id: self.chat_id,
                expected: lease.history_version,
                actual: self.history_version,
            });
        }
        match self.worker_id {
            Some(owner) if owner == lease.worker_id => Ok(()),
            None if interrupted_persist && self.status == ChatStatus::Interrupting => Ok(()),
            _ => Err(StoreError::LostOwnership {
                chat_id: self.chat_id,
                worker_id: lease.worker_id.clone(),
            }),
        }
    }
}

/// Rejects a new chat's history that Keel would not have written itself: messages other
/// than user, assistant and tool ones, empty or oversize ones, and a chat with nothing for
/// its first run to answer (no new user message, and no tool results at the end).
pub(crate) fn check_history(
    opts: &StoreOptions,
    history: &[NewMessage],
    parts: &[Part],
) -> Result<()> {
    for message in history {
        if !matches!(
            message.role,
            Some(Role::User | Role::Assistant | Role::Tool)
        ) {
            return Err(StoreError::invalid(
                "a chat's history holds only user, assistant and tool messages",
            ));
        }
        check_content(opts, &message.parts)?;
    }
    if parts.is_empty() && history.last().and_then(|m| m.role) == Some(Role::Tool) {
        return Ok(());
    }
    check_content(opts, parts)
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

/// How far the event sequence jumps when a chat is taken from an owner that died, lost its
/// lease or gave it back (shutdown, database failure). That owner may have sent clients numbered parts its log never received (they
/// wait up to one batch window); the next owner numbers above all of them, so a client
/// resuming from such a number misses nothing. No step streams a million parts between two
/// flushes of its log.
pub const RECOVERY_SEQ_GAP: i64 = 1_000_000;

fn skip_unflushed_numbers(chat: &mut Chat) {
    chat.event_seq = chat.event_seq.saturating_add(RECOVERY_SEQ_GAP);
}

// ---- writes outside the state machine

pub(crate) async fn delete_checkpoint(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<()> {
    cx.ops.delete_checkpoint(&chat_id.to_string()).await
}

pub(crate) async fn upsert_user(cx: &mut Ctx<'_>, name: &str, token_sha256: &str) -> Result<()> {
    if name.is_empty() {
        return Err(StoreError::invalid("a user needs a name"));
    }
    cx.ops.insert_user(name, token_sha256, ms(cx.now)).await
}

pub(crate) async fn remove_user(cx: &mut Ctx<'_>, name: &str) -> Result<bool> {
    cx.ops.delete_user(name).await
}

/// Names `chat` for `owner` unless the name is taken (it is never moved to another chat);
/// the chat the name stands for afterwards.
pub(crate) async fn claim_alias(
    cx: &mut Ctx<'_>,
    owner: &str,
    alias: &str,
    chat: ChatId,
) -> Result<ChatId> {
    if alias.is_empty() {
        return Err(StoreError::invalid("a chat alias must not be empty"));
    }
    cx.ops
        .alias_insert(owner, alias, &chat.to_string(), ms(cx.now))
        .await?;
    let named = cx
        .ops
        .alias_get(owner, alias)
        .await?
        .ok_or(StoreError::not_found("chat alias"))?;
    crate::rows::uuid("chat_aliases.chat_id", &named)
}

mod api;
mod branch;
mod import;
mod sweep;
mod usage;
mod worker;

pub(crate) use api::*;
pub(crate) use branch::*;
pub(crate) use import::*;
pub(crate) use sweep::*;
pub(crate) use usage::*;
pub(crate) use worker::*;
