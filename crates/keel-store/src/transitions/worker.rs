//! Transitions the worker holding a chat's lease starts: claim, renew, write, end.
//!
//! Longer than most files: every transition of a lease holder, from claim to end, read
//! together because each one's fence is the previous one's postcondition.

use std::collections::HashMap;

use super::*;
use crate::ops::{ToolRecords, UsageCols, Voided};

/// Claims up to `limit` runnable chats: one locking read of their rows and one multi-row
/// write of the claimed ones, each chat checked and leased exactly as a claim of it alone.
pub(crate) async fn acquire(cx: &mut Ctx<'_>, worker_id: &str, limit: usize) -> Result<Vec<Lease>> {
    let limit = i64::try_from(limit).unwrap_or(SWEEP_LIMIT).min(SWEEP_LIMIT);
    let ids = cx.ops.claimable_chats(ms(cx.now), limit).await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut locked: Vec<String> = ids.clone();
    locked.sort();
    let mut chats: HashMap<String, ChatCols> = HashMap::with_capacity(ids.len());
    for cols in cx.ops.lock_chats(&locked).await? {
        chats.insert(cols.id.clone(), cols);
    }
    let mut leases = Vec::with_capacity(ids.len());
    let mut rows = Vec::with_capacity(ids.len());
    // In the order the chats became runnable, as they are claimed.
    for id in ids {
        let Some(cols) = chats.remove(&id) else {
            continue;
        };
        let mut chat = cols.into_chat()?;
        let lease_live = chat.lease_expires_at.is_some_and(|t| t >= cx.now);
        let Some(mv) = may(&chat, Transition::Acquire) else {
            continue;
        };
        if chat.worker_id.is_some() && lease_live {
            continue;
        }
        // Each acquisition gets an owner token of its own: a run of this same worker that
        // lost the lease (say, its renewal came late and the chat was claimed again) is
        // fenced out instead of writing beside the new run.
        if chat.worker_id.is_some() {
            skip_unflushed_numbers(&mut chat);
        }
        let owner = format!("{worker_id}.{}", Uuid::new_v4().simple());
        let mut lease = cx.renewed_lease(&mut chat, &owner);
        // What `Ctx::save` does, with the row written below together with the others'.
        cx.stamp(&mut chat, mv)?;
        // A claim that keeps the status changes nothing a follower reports.
        let status_changed = chat.status != mv.from;
        cx.notice_with(
            &chat,
            Noticed {
                listing: status_changed,
                unnumbered_change: status_changed,
                ..Noticed::default()
            },
        );
        lease.granted_version = chat.version;
        rows.push(ChatCols::from_chat(&chat)?);
        leases.push(lease);
    }
    if !rows.is_empty() {
        cx.ops.commit_group_writes(&[], &[], &rows).await?;
    }
    Ok(leases)
}

/// Renews the leases of several runs in one transaction, each fenced on its own (a
/// refused one gets its error, the others are renewed). A renewal changes nothing a client
/// sees: only the expiry is written, the chat keeps its snapshot version and no notice is
/// sent, so no follower of the chat wakes up for it.
pub(crate) async fn renew_leases(cx: &mut Ctx<'_>, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
    let chats = lock_fences(cx, leases.iter().map(|l| l.chat_id)).await?;
    let mut outcomes = Vec::with_capacity(leases.len());
    let mut expiries = Vec::with_capacity(leases.len());
    for lease in leases {
        let Some(chat) = chats.get(&lease.chat_id) else {
            outcomes.push(Err(StoreError::not_found("chat")));
            continue;
        };
        if let Err(refused) = fence(chat, lease, false)
            .and_then(|()| check_status(chat.status, Transition::RenewLease).map(drop))
        {
            outcomes.push(Err(refused));
            continue;
        }
        let renewed = cx.fresh_lease(
            chat.id,
            chat.status,
            chat.history_version,
            lease.granted_version,
            &lease.worker_id,
        );
        expiries.push((chat.id.to_string(), ms(renewed.expires_at)));
        outcomes.push(Ok(renewed));
    }
    if !expiries.is_empty() {
        cx.ops.set_lease_expiries(&expiries).await?;
    }
    Ok(outcomes)
}

/// The ids of these chats, each once, in the order their rows are locked: every grouped
/// transaction locks in this one order, so that two of them never wait on each other.
fn lock_order(chats: impl Iterator<Item = ChatId>) -> Vec<String> {
    let mut ids: Vec<String> = chats.map(|id| id.to_string()).collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Locks the rows of these chats, read only as far as their fences, in one statement.
async fn lock_fences(
    cx: &mut Ctx<'_>,
    chats: impl Iterator<Item = ChatId>,
) -> Result<HashMap<ChatId, ChatFence>> {
    let ids = lock_order(chats);
    let mut fences = HashMap::with_capacity(ids.len());
    for cols in cx.ops.lock_fences(&ids).await? {
        let fence = cols.into_fence()?;
        fences.insert(fence.id, fence);
    }
    Ok(fences)
}

/// Appends to the live-part log. Not a snapshot change: the version stays, only the
/// event sequence advances (one number per entry), read from the log itself: the chat's
/// row is not written.
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
    cx.numbered_notice(&chat);
    Ok(first..=last)
}

/// Appends live parts the worker numbered itself, for several chats in one transaction
/// (each chat's entries fenced on their own lease). Each run of consecutive numbers is one
/// batch row; each chat's event sequence advances past its highest number (the log is where
/// a read finds it: no chat row is rewritten however many chats stream). Returns one
/// outcome per group, in order: a fenced or finished chat's entries are refused, the
/// others written. Notices tell other replicas how far each chat's log now reaches (not
/// published in this process: its subscribers got the parts directly), sent with the
/// insert.
pub(crate) async fn append_live_groups(
    cx: &mut Ctx<'_>,
    groups: &[(Lease, &[crate::types::NewLiveEntry])],
) -> Result<Vec<Result<()>>> {
    let mut chats = lock_fences(cx, groups.iter().map(|(l, _)| l.chat_id)).await?;
    let mut outcomes = Vec::with_capacity(groups.len());
    let mut rows = Vec::new();
    let mut advanced: Vec<ChatId> = Vec::new();
    for (lease, entries) in groups {
        let Some(chat) = chats.get_mut(&lease.chat_id) else {
            outcomes.push(Err(StoreError::not_found("chat")));
            continue;
        };
        if let Err(refused) = fence(chat, lease, false)
            .and_then(|()| check_status(chat.status, Transition::AppendLiveParts))
        {
            outcomes.push(Err(refused));
            continue;
        }
        let id = chat.id.to_string();
        for run in consecutive_runs(entries) {
            let json = json_array(run.iter().map(|e| e.payload.as_str()));
            rows.push((id.clone(), run[0].seq, run[run.len() - 1].seq, json));
        }
        // The fence's number is the row's, a lower bound (see `ChatFence::event_seq`);
        // entries are numbered past the log, so any entry advances the chat, and the
        // highest is where its sequence now reaches.
        let last = entries
            .iter()
            .map(|e| e.seq)
            .max()
            .unwrap_or(chat.event_seq);
        if last > chat.event_seq {
            chat.event_seq = last;
            if !advanced.contains(&chat.id) {
                advanced.push(chat.id);
            }
        }
        outcomes.push(Ok(()));
    }
    let mut notices = Vec::with_capacity(advanced.len());
    for id in advanced {
        if let Some(chat) = chats.get(&id) {
            notices.push(ChangeNotice {
                chat_id: chat.id,
                version: chat.version,
                status: chat.status,
                history_version: chat.history_version,
                event_seq: chat.event_seq,
                deleted: false,
                owner: chat.owner.clone(),
                // Live parts leave the chat list as it is.
                listing: false,
                unowned: chat.worker_id.is_none(),
                unnumbered_change: false,
            });
        }
    }
    if !rows.is_empty() {
        cx.ops.append_live_rows_notifying(&rows, &notices).await?;
    }
    Ok(outcomes)
}

/// Splits entries into runs of consecutive sequence numbers (one stored batch each).
fn consecutive_runs(
    entries: &[crate::types::NewLiveEntry],
) -> impl Iterator<Item = &[crate::types::NewLiveEntry]> {
    entries.chunk_by(|a, b| b.seq == a.seq + 1)
}

/// The JSON array of documents already serialised, as `serde_json` writes an array of them.
fn json_array<'a>(documents: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (at, document) in documents.enumerate() {
        if at > 0 {
            out.push(',');
        }
        out.push_str(document);
    }
    out.push(']');
    out
}

/// Commits a step's messages and drops the logged parts of older steps, in one transaction.
pub(crate) async fn commit_step(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    messages: Vec<NewMessage>,
) -> Result<Vec<MessageId>> {
    let mut chat = cx.load(lease.chat_id).await?;
    let (ids, rows, usage) = admit_step(cx, &mut chat, lease, messages)?;
    // Tool records only serve to resume the step in progress; once its results are
    // committed, a record could only be mistaken for a later call's.
    cx.ops
        .commit_writes(&rows, &ChatCols::from_chat(&chat)?, ToolRecords::Clear)
        .await?;
    cx.ops.insert_usage(&usage).await?;
    cx.numbered_notice(&chat);
    Ok(ids)
}

/// Commits the steps of several runs in one transaction, each chat locked, fenced and
/// numbered exactly as [`commit_step`] does it on its own. A step that is refused (fence,
/// status, invalid message) is left out with its error and the others commit; the writes
/// of all admitted steps go as a few multi-row statements. `Err` means nothing was written.
pub(crate) async fn commit_steps(
    cx: &mut Ctx<'_>,
    steps: Vec<(Lease, Vec<NewMessage>)>,
) -> Result<Vec<Result<Vec<MessageId>>>> {
    let ids = lock_order(steps.iter().map(|(l, _)| l.chat_id));
    let mut chats = lock_chats(cx, &ids).await?;
    let mut outcomes = Vec::with_capacity(steps.len());
    let mut rows = Vec::new();
    let mut usage = Vec::new();
    // Chats with an admitted step, in the order of their first one.
    let mut committed: Vec<ChatId> = Vec::new();
    for (lease, messages) in steps {
        let Some(chat) = chats.get_mut(&lease.chat_id) else {
            outcomes.push(Err(StoreError::not_found("chat")));
            continue;
        };
        // Worked on a copy: a step refused halfway leaves the chat as the next step finds it.
        let mut next = chat.clone();
        match admit_step(cx, &mut next, &lease, messages) {
            Ok((message_ids, message_rows, records)) => {
                *chat = next;
                rows.extend(message_rows);
                usage.extend(records);
                cx.numbered_notice(chat);
                if !committed.contains(&chat.id) {
                    committed.push(chat.id);
                }
                outcomes.push(Ok(message_ids));
            }
            Err(refused) => outcomes.push(Err(refused)),
        }
    }
    if committed.is_empty() {
        return Ok(outcomes);
    }
    let chat_rows = chat_rows(&chats, &committed)?;
    let voided = [Voided::OlderSteps, Voided::Checkpoints, Voided::ToolRecords];
    cx.ops
        .commit_group_writes(&rows, &voided, &chat_rows)
        .await?;
    cx.ops.insert_usage(&usage).await?;
    Ok(outcomes)
}

/// Locks the rows of these chats (ids in [`lock_order`]), read whole, in one statement.
async fn lock_chats(cx: &mut Ctx<'_>, ids: &[String]) -> Result<HashMap<ChatId, Chat>> {
    let mut chats = HashMap::with_capacity(ids.len());
    for cols in cx.ops.lock_chats(ids).await? {
        let chat = cols.into_chat()?;
        chats.insert(chat.id, chat);
    }
    Ok(chats)
}

/// The rows a grouped transaction writes back: those of the chats `changed`, in that order.
fn chat_rows(chats: &HashMap<ChatId, Chat>, changed: &[ChatId]) -> Result<Vec<ChatCols>> {
    changed
        .iter()
        .filter_map(|id| chats.get(id))
        .map(ChatCols::from_chat)
        .collect()
}

/// The checks and numbering of a step commit, before anything is written: the step's
/// message ids and rows, with `chat` moved on past them.
fn admit_step(
    cx: &Ctx<'_>,
    chat: &mut Chat,
    lease: &Lease,
    messages: Vec<NewMessage>,
) -> Result<(Vec<MessageId>, Vec<MessageCols>, Vec<UsageCols>)> {
    let interrupted = messages.iter().any(|m| m.interrupted);
    fence(chat, lease, interrupted)?;
    let mv = check(chat, Transition::CommitStep)?;
    if messages.iter().any(|m| m.role.is_none()) {
        return Err(StoreError::invalid("a committed message needs a role"));
    }
    let numbered = number_charged(cx, chat, messages)?;
    // A retry is the state of the step it retried: the committed step ends it.
    chat.retry_state = None;
    cx.stamp(chat, mv)?;
    Ok(numbered)
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
    let mv = check(&chat, Transition::CommitSummary)?;
    if summary.text.trim().is_empty() {
        return Err(StoreError::invalid("a summary needs text"));
    }
    let messages = [
        NewMessage {
            usage: Some(summary.usage),
            charge: summary.charge,
            context_limit: summary.context_limit,
            kind: MessageKind::Summary,
            ..NewMessage::new(Role::Assistant, vec![Part::text(summary.text)])
        },
        NewMessage {
            kind: MessageKind::CompactionNotice,
            ..NewMessage::new(Role::System, vec![Part::text(COMPACTION_NOTICE)])
        },
    ];
    let (ids, rows, usage) = number_charged(cx, &mut chat, messages.into())?;
    chat.compact_requested = false;
    cx.stamp(&mut chat, mv)?;
    cx.ops
        .commit_writes(&rows, &ChatCols::from_chat(&chat)?, ToolRecords::Keep)
        .await?;
    cx.ops.insert_usage(&usage).await?;
    // The summary's text is never a reply: no follower is sent its parts.
    cx.ops.clear_live(&chat.id.to_string()).await?;
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
    let mv = check(&chat, Transition::SetRetryState)?;
    chat.retry_state = state;
    cx.save(&mut chat, mv).await
}

/// Records the span of the run in progress, for a worker that may take the chat over.
/// The chat row is not written: no new version, no notice.
pub(crate) async fn record_run_trace(cx: &mut Ctx<'_>, lease: &Lease, run: &str) -> Result<()> {
    let chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::RecordRunTrace)?;
    cx.ops.put_run_trace(&chat.id.to_string(), run).await
}

/// Ends a run: the queue head starts next (same worker, chat stays `running`), or the
/// chat goes `waiting` and is released.
async fn end_run(cx: &mut Ctx<'_>, lease: &Lease, transition: Transition) -> Result<Next> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    let mv = check(&chat, transition)?;
    end_loaded_run(cx, &mut chat, mv, lease).await
}

/// Ends the runs of several chats in one transaction, each chat locked, fenced and moved
/// exactly as [`finish_run`] does it alone: the queue head starts next on the same lease,
/// or the chat waits, released. A refused run (fence, status) is left out with its error
/// and the others end; a chat that waits (the common end) is written with the others in a
/// few multi-row statements, one whose queue head starts is written as alone. `Err` means
/// nothing was written.
pub(crate) async fn finish_runs(cx: &mut Ctx<'_>, leases: &[Lease]) -> Result<Vec<Result<Next>>> {
    let ids = lock_order(leases.iter().map(|l| l.chat_id));
    let mut chats = lock_chats(cx, &ids).await?;
    let mut queued: Vec<ChatId> = Vec::new();
    for id in cx.ops.queued_chats(&ids).await? {
        queued.push(crate::rows::uuid("queued_messages.chat_id", &id)?);
    }
    let mut outcomes = Vec::with_capacity(leases.len());
    // Chats that now wait, in the order they ended; their rows are written together.
    let mut idle: Vec<ChatId> = Vec::new();
    for lease in leases {
        let Some(chat) = chats.get_mut(&lease.chat_id) else {
            outcomes.push(Err(StoreError::not_found("chat")));
            continue;
        };
        let mv = match fence(chat, lease, false).and_then(|()| check(chat, Transition::FinishRun)) {
            Ok(mv) => mv,
            Err(refused) => {
                outcomes.push(Err(refused));
                continue;
            }
        };
        if queued.contains(&chat.id) {
            // Rare at scale: the queue head moves into history and runs next.
            outcomes.push(Ok(end_loaded_run(cx, chat, mv, lease).await?));
            queued.retain(|id| *id != chat.id);
            continue;
        }
        chat.retry_state = None;
        chat.compact_requested = false;
        chat.status = ChatStatus::Waiting;
        chat.worker_id = None;
        chat.lease_expires_at = None;
        cx.stamp(chat, mv)?;
        cx.notice_with(
            chat,
            Noticed {
                listing: chat.status != mv.from,
                ..Noticed::default()
            },
        );
        if !idle.contains(&chat.id) {
            idle.push(chat.id);
        }
        outcomes.push(Ok(Next::Idle));
    }
    let rows = chat_rows(&chats, &idle)?;
    if !rows.is_empty() {
        cx.ops
            .commit_group_writes(&[], &[Voided::UncommittedParts, Voided::Checkpoints], &rows)
            .await?;
    }
    Ok(outcomes)
}

/// Ends the run of a loaded, fenced chat: the live-part log and checkpoint are void, and the
/// queue head starts the next run, or the chat waits.
async fn end_loaded_run(
    cx: &mut Ctx<'_>,
    chat: &mut Chat,
    mv: Move,
    lease: &Lease,
) -> Result<Next> {
    let id = chat.id.to_string();
    // The committed step's parts stay for followers on other replicas ([`Voided`]).
    cx.ops.void(&id, Voided::UncommittedParts).await?;
    cx.ops.delete_checkpoint(&id).await?;
    chat.retry_state = None;
    chat.compact_requested = false;
    let mut next = match cx.start_queue_head(chat).await? {
        Some(message_id) => {
            chat.status = ChatStatus::Running;
            Next::Continue {
                lease: cx.renewed_lease(chat, &lease.worker_id),
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
    cx.save(chat, mv).await?;
    if let Next::Continue { lease, .. } = &mut next {
        lease.granted_version = chat.version;
    }
    Ok(next)
}

pub(crate) async fn finish_interruption(cx: &mut Ctx<'_>, lease: &Lease) -> Result<Next> {
    end_run(cx, lease, Transition::FinishInterruption).await
}

pub(crate) async fn finish_run(cx: &mut Ctx<'_>, lease: &Lease) -> Result<Next> {
    end_run(cx, lease, Transition::FinishRun).await
}

pub(crate) async fn fail_run(cx: &mut Ctx<'_>, lease: &Lease, error: LastError) -> Result<()> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    let mv = check(&chat, Transition::FailRun)?;
    cx.ops.clear_live(&chat.id.to_string()).await?;
    chat.status = ChatStatus::Error;
    chat.compact_requested = false;
    chat.last_error = Some(error);
    chat.worker_id = None;
    chat.lease_expires_at = None;
    chat.retry_state = None;
    cx.save(&mut chat, mv).await
}

/// The step ended with client-side tool calls. Normally the chat waits for their results;
/// when the user interrupted meanwhile, the calls are answered as interrupted at once (as an
/// interrupt of a `requires_action` chat would) and the run ends like any interrupted one.
pub(crate) async fn enter_requires_action(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    calls: Vec<PendingToolCall>,
    timeout: Option<chrono::Duration>,
) -> Result<Next> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    let mv = check(&chat, Transition::EnterRequiresAction)?;
    if calls.is_empty() {
        return Err(StoreError::invalid(
            "requires_action needs pending tool calls",
        ));
    }
    if chat.status == ChatStatus::Interrupting {
        chat.pending_tool_calls = calls;
        cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
            .await?;
        return end_loaded_run(cx, &mut chat, mv, lease).await;
    }
    chat.status = ChatStatus::RequiresAction;
    chat.pending_tool_calls = calls;
    chat.pending_deadline = timeout.map(|timeout| cx.now + timeout);
    chat.worker_id = None;
    chat.lease_expires_at = None;
    chat.retry_state = None;
    cx.save(&mut chat, mv).await?;
    Ok(Next::Idle)
}

/// The worker stops without finishing: the chat stays runnable and unowned, so another
/// worker (or this one after a restart) picks it up at once.
pub(crate) async fn release_on_shutdown(cx: &mut Ctx<'_>, lease: &Lease) -> Result<()> {
    let mut chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    let mv = check(&chat, Transition::ReleaseOnShutdown)?;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    // A run released after a database failure may have sent parts its log never got.
    skip_unflushed_numbers(&mut chat);
    cx.save(&mut chat, mv).await
}

/// A checkpoint as stored: the loop's data plus the step it belongs to, so that one written
/// late (after its step was committed) is never taken for the next step's.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StoredCheckpoint {
    /// The chat's last message when it was written: the step it belongs to starts after it.
    after_message: MessageId,
    history_version: i64,
    data: Value,
}

impl StoredCheckpoint {
    /// The data, if it belongs to the chat's step in progress.
    pub(crate) fn current_for(self, chat: &Chat) -> Option<Value> {
        (self.after_message == chat.last_message_id && self.history_version == chat.history_version)
            .then_some(self.data)
    }
}

pub(crate) async fn put_checkpoint(cx: &mut Ctx<'_>, lease: &Lease, data: Value) -> Result<()> {
    let chat = cx.load(lease.chat_id).await?;
    fence(&chat, lease, false)?;
    check(&chat, Transition::PutCheckpoint)?;
    let stored = StoredCheckpoint {
        after_message: chat.last_message_id,
        history_version: chat.history_version,
        data,
    };
    let json = to_json("checkpoints.data", &stored)?;
    cx.ops
        .put_checkpoint(&chat.id.to_string(), &json, ms(cx.now))
        .await
}

/// Gives an untitled chat its generated title; a title set meanwhile is kept.
pub(crate) async fn name_chat(cx: &mut Ctx<'_>, chat_id: ChatId, title: &str) -> Result<bool> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::NameChat)?;
    if chat.title.is_some() {
        return Ok(false);
    }
    chat.title = Some(title.to_owned());
    cx.save(&mut chat, mv).await?;
    Ok(true)
}

#[cfg(test)]
mod tests;
