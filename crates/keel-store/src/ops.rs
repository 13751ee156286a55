//! The primitive reads and writes a transaction offers, one trait both backends implement.
//!
//! The state machine in [`crate::transitions`] is written once against [`TxOps`]; the
//! backends only supply SQL. Row locks are taken by [`TxOps::lock_chat`] (PostgreSQL
//! `FOR UPDATE`; SQLite holds the database write lock for the whole transaction).

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::Result;
use crate::rows::{ChatCols, FenceCols, MessageCols, QueuedCols, ToolRecordCols, TreeRow};
use crate::types::{ChangeNotice, RemoteNotice};

/// One committed step's usage record, in the column order of `usage_records`.
#[derive(Debug, Clone)]
pub(crate) struct UsageCols {
    pub chat_id: String,
    pub message_id: i64,
    pub user_name: String,
    pub model: String,
    pub recorded_at: i64,
    /// Input, cached input, output and reasoning tokens.
    pub counts: [i64; 4],
    pub cost_nanos: Option<i64>,
}

/// A group of usage records as summed: user, chat, model and day number (each `None` when
/// not grouped by), then input, cached input, output and reasoning tokens and the cost.
pub(crate) type UsageRow = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
);

/// One batch of a chat's live parts as stored: chat id, first and last sequence number,
/// and the payloads as a JSON array.
pub(crate) type LiveRow = (String, i64, i64, String);

/// One batch of a chat's live parts as read for several chats: chat id, first sequence
/// number and the payloads as a JSON array.
pub(crate) type ChatLiveRow = (String, i64, String);

/// Where [`Voided::OlderSteps`] cuts a chat's log: at its last message before the newest
/// batch (`$chat` is the SQL of the chat's id). No message lies between a batch's first and
/// last number, so the last message before either is the same; `last_seq` is the column
/// both backends index the log by, so each `MAX` is one seek.
macro_rules! older_steps_cut {
    ($chat:literal) => {
        concat!(
            "(SELECT MAX(m.event_seq) FROM messages m WHERE m.chat_id = ",
            $chat,
            " AND m.event_seq < (SELECT MAX(p.last_seq) FROM live_parts p WHERE p.chat_id = ",
            $chat,
            "))"
        )
    };
}
pub(crate) use older_steps_cut;

/// Per-chat state a transition empties: a whole table's rows of the chat, or the part of
/// its live-part log a condition picks.
///
/// The log keeps the parts of the newest committed step after its commit, and after the
/// run's end, for as long as [`TxOps::purge_settled_logs`] allows: a follower on another
/// replica may read the log only after the commit, and the parts must still be there for it
/// to send them before the message. What resumes a step reads only the parts numbered after
/// the chat's last message (the step in progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Voided {
    /// The whole live-part log.
    LiveParts,
    /// The log's parts of steps older than the newest step logged: those numbered before
    /// the last message that comes before the newest batch. A step commit drops them.
    OlderSteps,
    /// The log's parts numbered after the chat's last message: a step no message commits.
    /// A run's end drops them; the committed step's parts stay.
    UncommittedParts,
    Checkpoints,
    ToolRecords,
}

impl Voided {
    pub(crate) fn table(self) -> &'static str {
        match self {
            Voided::LiveParts | Voided::OlderSteps | Voided::UncommittedParts => "live_parts",
            Voided::Checkpoints => "checkpoints",
            Voided::ToolRecords => "tool_records",
        }
    }

    /// For the voids that keep part of the log: the number each chat's batches are cut at
    /// (SQL over `v.id`, the chat's id) and the side of it that goes. A statement computes
    /// it once per chat and deletes by a range of the `(chat_id, last_seq)` index; as a
    /// condition on each batch it was computed for every batch of the chat's whole log
    /// (a committed reply of a slow stream is a hundred batches and more).
    /// Batches never straddle a message: a step's parts are all logged before its commit
    /// numbers its messages.
    pub(crate) fn cut(self) -> Option<(&'static str, &'static str)> {
        match self {
            Voided::OlderSteps => Some((older_steps_cut!("v.id"), "<")),
            Voided::UncommittedParts => Some((
                "COALESCE((SELECT MAX(m.event_seq) FROM messages m WHERE m.chat_id = v.id), 0)",
                ">",
            )),
            Voided::LiveParts | Voided::Checkpoints | Voided::ToolRecords => None,
        }
    }
}

/// What a commit ([`TxOps::commit_writes`]) does with the chat's tool records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolRecords {
    /// A step's commit: they served the step in progress, and a later call with the same
    /// id must never be answered from them.
    Clear,
    /// A commit that ends no step (a summary of older messages).
    Keep,
}

/// [`TxOps::commit_writes`] as one statement each.
pub(crate) async fn commit_writes_apart<T: TxOps + ?Sized>(
    ops: &mut T,
    messages: &[MessageCols],
    chat: &ChatCols,
    records: ToolRecords,
) -> Result<()> {
    ops.insert_messages(messages).await?;
    ops.void(&chat.id, Voided::OlderSteps).await?;
    ops.delete_checkpoint(&chat.id).await?;
    if records == ToolRecords::Clear {
        ops.clear_tool_records(&chat.id).await?;
    }
    ops.update_chat(chat).await
}

/// The rows of [`TxOps::catch_up_rows`].
pub(crate) struct CatchUpRows {
    pub chat: (ChatCols, Vec<QueuedCols>),
    pub batches: Vec<(i64, String)>,
    pub messages: Vec<MessageCols>,
}

/// The rows of [`TxOps::run_start_rows`].
pub(crate) struct RunStartRows {
    pub chat: (ChatCols, Vec<QueuedCols>),
    pub batches: Vec<(i64, String)>,
    pub messages: Vec<MessageCols>,
    pub records: Vec<ToolRecordCols>,
}

/// [`TxOps::catch_up_rows`] as one statement each.
pub(crate) async fn catch_up_rows_apart<T: TxOps + ?Sized>(
    ops: &mut T,
    chat: &str,
    after: i64,
    limit: i64,
) -> Result<Option<CatchUpRows>> {
    let Some(chat_and_queue) = ops.read_chat_and_queue(chat).await? else {
        return Ok(None);
    };
    Ok(Some(CatchUpRows {
        chat: chat_and_queue,
        batches: ops.logged_after(chat, after).await?,
        messages: ops.visible_page(chat, after, true, limit).await?,
    }))
}

/// [`TxOps::run_start_rows`] as one statement each.
pub(crate) async fn run_start_rows_apart<T: TxOps + ?Sized>(
    ops: &mut T,
    chat: &str,
) -> Result<Option<RunStartRows>> {
    let Some(chat_and_queue) = ops.read_chat_and_queue(chat).await? else {
        return Ok(None);
    };
    Ok(Some(RunStartRows {
        chat: chat_and_queue,
        batches: ops.live_after(chat, 0).await?,
        messages: ops.messages(chat, 0, false).await?,
        records: ops.tool_records(chat).await?,
    }))
}

#[async_trait]
pub(crate) trait TxOps: Send {
    /// Reads a chat row, locking it until the transaction ends.
    async fn lock_chat(&mut self, id: &str) -> Result<Option<ChatCols>>;
    /// Locks a chat row as [`TxOps::lock_chat`] does and reads its queue with it, in
    /// position order, in one statement.
    async fn lock_chat_and_queue(
        &mut self,
        id: &str,
    ) -> Result<Option<(ChatCols, Vec<QueuedCols>)>>;
    /// Reads a chat row without locking it.
    async fn read_chat(&mut self, id: &str) -> Result<Option<ChatCols>>;
    /// Reads a chat row and its queue, in position order, in one statement.
    async fn read_chat_and_queue(
        &mut self,
        id: &str,
    ) -> Result<Option<(ChatCols, Vec<QueuedCols>)>>;
    async fn insert_chat(&mut self, chat: &ChatCols) -> Result<()>;
    /// Writes every mutable column of the chat.
    async fn update_chat(&mut self, chat: &ChatCols) -> Result<()>;
    async fn delete_chat(&mut self, id: &str) -> Result<()>;
    /// Newest first, optionally of one owner and strictly before a cursor chat.
    async fn list_chats(
        &mut self,
        owner: Option<&str>,
        before: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ChatCols>>;
    /// Ids of running or interrupting chats that are unowned or whose lease expired,
    /// locked and skipping rows other transactions hold.
    async fn claimable_chats(&mut self, now: i64, limit: i64) -> Result<Vec<String>>;
    /// Ids of owned chats whose lease expired, locked like [`TxOps::claimable_chats`].
    async fn stale_chats(&mut self, now: i64, limit: i64) -> Result<Vec<String>>;
    /// Ids and owners of chats whose owner token starts with `prefix`, locked likewise.
    async fn owned_with_prefix(
        &mut self,
        prefix: &str,
        limit: i64,
    ) -> Result<Vec<(String, String)>>;
    /// Ids of `requires_action` chats whose deadline passed, locked likewise.
    async fn expired_actions(&mut self, now: i64, limit: i64) -> Result<Vec<String>>;

    async fn insert_messages(&mut self, messages: &[MessageCols]) -> Result<()>;
    /// Writes a committed step: its messages, the log without the parts of older steps
    /// ([`Voided::OlderSteps`]), the dropped checkpoint (superseded by what is committed),
    /// the tool records when `records` says so, and the chat row. A backend may send these
    /// as one round trip.
    async fn commit_writes(
        &mut self,
        messages: &[MessageCols],
        chat: &ChatCols,
        records: ToolRecords,
    ) -> Result<()> {
        commit_writes_apart(self, messages, chat, records).await
    }
    /// Writes the transitions of several chats: their new messages (in order), the chats'
    /// rows of each of `voided` emptied, and each chat row (every mutable column, as
    /// [`TxOps::update_chat`]; one row per chat) — a few multi-row statements whatever the
    /// number of chats.
    async fn commit_group_writes(
        &mut self,
        messages: &[MessageCols],
        voided: &[Voided],
        chats: &[ChatCols],
    ) -> Result<()>;
    /// Messages of the current branch with an id above `after`, in id order; with their
    /// siblings when `siblings` (for clients; the prompt needs none).
    async fn messages(
        &mut self,
        chat: &str,
        after: i64,
        siblings: bool,
    ) -> Result<Vec<MessageCols>>;
    /// Messages of the current branch numbered above `after`, in sequence order.
    ///
    /// This and the reads below, which clients see, read each message's siblings with it.
    async fn messages_after_seq(&mut self, chat: &str, after: i64) -> Result<Vec<MessageCols>>;
    /// At most `limit` messages clients see (on the current branch, no summaries) after
    /// `after`: by id, or by event sequence when `by_seq`.
    async fn visible_page(
        &mut self,
        chat: &str,
        after: i64,
        by_seq: bool,
        limit: i64,
    ) -> Result<Vec<MessageCols>>;
    /// Every message of the chat's tree, in id order (rows an edit soft-deleted before
    /// branches existed are not part of it).
    async fn tree(&mut self, chat: &str) -> Result<Vec<TreeRow>>;
    /// [`TxOps::tree`] as whole messages (no siblings read): what an export holds.
    async fn tree_messages(&mut self, chat: &str) -> Result<Vec<MessageCols>>;
    /// Makes `path` (`(id, event sequence)`, from the first message on) the current
    /// branch, numbering its messages anew.
    async fn set_branch(&mut self, chat: &str, path: &[(i64, i64)]) -> Result<()>;
    /// The messages with these ids, in id order.
    async fn messages_by_ids(&mut self, chat: &str, ids: &[i64]) -> Result<Vec<MessageCols>>;
    /// The last `limit` messages clients see of the current branch, in id order.
    async fn recent_messages(&mut self, chat: &str, limit: i64) -> Result<Vec<MessageCols>>;

    async fn queue(&mut self, chat: &str) -> Result<Vec<QueuedCols>>;
    /// The queued messages of these chats, by chat and position.
    async fn queues_of(&mut self, chats: &[String]) -> Result<Vec<QueuedCols>>;
    /// Which of these chats have queued messages.
    async fn queued_chats(&mut self, chats: &[String]) -> Result<Vec<String>>;
    async fn insert_queued(&mut self, q: &QueuedCols) -> Result<()>;
    async fn set_queued_position(&mut self, id: &str, position: i64) -> Result<()>;
    async fn delete_queued(&mut self, id: &str) -> Result<()>;
    async fn clear_queue(&mut self, chat: &str) -> Result<()>;

    /// Appends one batch of live parts, numbered `first_seq..=last_seq`, as a JSON array.
    async fn append_live(
        &mut self,
        chat: &str,
        first_seq: i64,
        last_seq: i64,
        payloads: &str,
    ) -> Result<()>;
    /// Appends several batches of live parts, of any chats, in one statement.
    async fn append_live_rows(&mut self, rows: &[LiveRow]) -> Result<()>;
    /// Appends batches as [`TxOps::append_live_rows`] and sends `notices` to other replicas
    /// when the transaction commits; a backend may do both in one statement.
    async fn append_live_rows_notifying(
        &mut self,
        rows: &[LiveRow],
        notices: &[ChangeNotice],
    ) -> Result<()> {
        self.append_live_rows(rows).await?;
        self.notify_all(notices).await
    }
    /// Reads and locks several chat rows, in id order (ids that name no chat are left out).
    async fn lock_chats(&mut self, ids: &[String]) -> Result<Vec<ChatCols>>;
    /// Reads and locks several chat rows like [`TxOps::lock_chats`], only the columns a
    /// lease fence needs.
    async fn lock_fences(&mut self, ids: &[String]) -> Result<Vec<FenceCols>>;
    /// Sets the lease expiry (ms since the epoch) of several chats in one statement.
    async fn set_lease_expiries(&mut self, expiries: &[(String, i64)]) -> Result<()>;
    async fn clear_live(&mut self, chat: &str) -> Result<()> {
        self.void(chat, Voided::LiveParts).await
    }
    /// Deletes the chat's rows that `what` picks.
    async fn void(&mut self, chat: &str, what: Voided) -> Result<()>;
    /// Batches of the step in progress (numbered after the chat's last message) holding
    /// entries after `after`, as `(first_seq, payloads JSON array)`.
    async fn live_after(&mut self, chat: &str, after: i64) -> Result<Vec<(i64, String)>>;
    /// Batches of the steps in progress of several chats holding entries after a position
    /// each (`(chat, after)`, each chat once), as `(chat, first_seq, payloads)`, by chat and
    /// sequence: one statement whatever the number of chats.
    async fn live_after_many(&mut self, positions: &[(String, i64)]) -> Result<Vec<ChatLiveRow>>;
    /// Every logged batch holding entries after `after`, the committed step's kept parts
    /// included, like [`TxOps::live_after`].
    async fn logged_after(&mut self, chat: &str, after: i64) -> Result<Vec<(i64, String)>>;

    /// What a follower's catch-up reads after the position `after`: the chat and its queue,
    /// the logged batches, and the first `limit` visible messages by event number; `None`
    /// when there is no such chat. A backend that can read them in one round trip does.
    async fn catch_up_rows(
        &mut self,
        chat: &str,
        after: i64,
        limit: i64,
    ) -> Result<Option<CatchUpRows>> {
        catch_up_rows_apart(self, chat, after, limit).await
    }

    /// What a run starts from: the chat and its queue, the batches of the step in progress,
    /// the current branch's messages and the tool records; `None` when there is no such
    /// chat. A backend that can read them in one round trip does.
    async fn run_start_rows(&mut self, chat: &str) -> Result<Option<RunStartRows>> {
        run_start_rows_apart(self, chat).await
    }
    /// Deletes the logs of chats no run holds that have not changed since `before` (ms since
    /// the epoch): the parts kept for followers of a committed step ([`Voided`]).
    async fn purge_settled_logs(&mut self, before: i64) -> Result<u64>;

    async fn upsert_tool_record(&mut self, r: &ToolRecordCols) -> Result<()>;
    async fn tool_records(&mut self, chat: &str) -> Result<Vec<ToolRecordCols>>;
    async fn clear_tool_records(&mut self, chat: &str) -> Result<()>;

    async fn put_checkpoint(&mut self, chat: &str, data: &str, now: i64) -> Result<()>;
    async fn get_checkpoint(&mut self, chat: &str) -> Result<Option<String>>;
    async fn delete_checkpoint(&mut self, chat: &str) -> Result<()>;

    async fn insert_user(&mut self, name: &str, token_sha256: &str, now: i64) -> Result<()>;
    async fn user_by_token(&mut self, token_sha256: &str) -> Result<Option<(String, i64)>>;
    async fn count_users(&mut self) -> Result<i64>;
    /// Deletes the user; `false` when there was none of that name.
    async fn delete_user(&mut self, name: &str) -> Result<bool>;
    /// Every user as (name, created at), by name.
    async fn list_users(&mut self) -> Result<Vec<(String, i64)>>;
    /// The user's budget as stored; `None` when there is no such user.
    async fn user_budget(&mut self, name: &str) -> Result<Option<Option<String>>>;
    /// Sets or clears the user's budget; `false` when there is no such user.
    async fn set_user_budget(&mut self, name: &str, budget: Option<&str>) -> Result<bool>;

    async fn insert_usage(&mut self, rows: &[UsageCols]) -> Result<()>;
    /// The user's tokens (input, cached input and output) and cost since `since` (ms).
    async fn usage_spent(&mut self, user: &str, since: i64) -> Result<(i64, Option<i64>)>;
    /// The user's records in `[from, to)` (ms) summed per group; `keys` are the SQL of the
    /// user, chat, model and day columns (`NULL` casts for those not grouped by).
    async fn usage_groups(
        &mut self,
        keys: [&str; 4],
        user: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<UsageRow>>;
    /// A chat's records summed (every branch, every run).
    async fn chat_usage(&mut self, chat: &str) -> Result<UsageRow>;

    /// The chat a client-chosen name of `owner` stands for.
    async fn alias_get(&mut self, owner: &str, alias: &str) -> Result<Option<String>>;
    /// Gives the name to `chat` unless it already names one.
    async fn alias_insert(&mut self, owner: &str, alias: &str, chat: &str, now: i64) -> Result<()>;

    /// Stores the trace context a run (a chat id) or a queued message (its id) starts
    /// from, forgetting the span of the chat's previous run.
    async fn put_trace_parent(&mut self, id: &str, parent: Option<&str>) -> Result<()>;
    /// Removes a queued message's trace context, returning it.
    async fn take_trace_parent(&mut self, id: &str) -> Result<Option<String>>;
    /// Stores the span of a chat's run in progress.
    async fn put_run_trace(&mut self, chat: &str, run: &str) -> Result<()>;
    /// A chat's run's trace context: (parent, run).
    async fn trace_context(&mut self, chat: &str) -> Result<(Option<String>, Option<String>)>;

    /// A remembered response created at or after `since`.
    async fn idem_get(&mut self, user: &str, key: &str, since: i64) -> Result<Option<String>>;
    /// Remembers a response, replacing an expired one. `false` when a live entry exists.
    async fn idem_put(
        &mut self,
        user: &str,
        key: &str,
        response: &str,
        now: i64,
        expired_before: i64,
    ) -> Result<bool>;
    async fn idem_purge(&mut self, before: i64) -> Result<u64>;
    /// Deletes the records of tool calls that finished before `before` in chats that are
    /// not running: no run will resume them.
    async fn purge_tool_records(&mut self, before: i64) -> Result<u64>;

    /// Sends a change notice to other replicas when the transaction commits.
    async fn notify(&mut self, notice: &ChangeNotice) -> Result<()>;
    /// Sends several notices to other replicas; a backend may send them in one round trip.
    async fn notify_all(&mut self, notices: &[ChangeNotice]) -> Result<()> {
        for notice in notices {
            self.notify(notice).await?;
        }
        Ok(())
    }
    async fn commit(self: Box<Self>) -> Result<()>;
    /// Ends the transaction without its writes, releasing its locks now rather than
    /// whenever the connection is next used.
    async fn rollback(self: Box<Self>) -> Result<()>;
}

/// A database the store can run on.
#[async_trait]
pub(crate) trait Backend: Send + Sync {
    /// A transaction that may write; writers are serialised per chat (or globally).
    async fn begin_write(&self) -> Result<Box<dyn TxOps>>;
    /// A write transaction of the process's grouped writer (the live-part log, grouped
    /// commits and finishes). Followers on other replicas see a run's parts only once it
    /// commits, so it must not queue behind request traffic for a connection: where the
    /// backend has a pool, the live path has connections of its own.
    async fn begin_grouped_write(&self) -> Result<Box<dyn TxOps>> {
        self.begin_write().await
    }
    /// [`Self::begin_single_read`] for the process's grouped log reader (the parts its
    /// followers of other replicas' runs are sent), on the live path's connections as
    /// [`Self::begin_grouped_write`].
    async fn begin_grouped_read(&self) -> Result<Box<dyn TxOps>> {
        self.begin_single_read().await
    }
    async fn begin_read(&self) -> Result<Box<dyn TxOps>>;
    /// A pooled connection for a read that is one statement: no transaction of its own,
    /// since a single statement sees one snapshot anyway, and its `BEGIN` and `COMMIT`
    /// would double the round trips (on SQLite, hand-offs to the connection's thread).
    async fn begin_single_read(&self) -> Result<Box<dyn TxOps>>;
    /// Notices from every replica, when the backend has a channel for them.
    async fn subscribe_remote(&self) -> Result<Option<BoxStream<'static, RemoteNotice>>>;
}

/// The JSON payload of a notice sent between replicas.
pub(crate) fn notice_payload(notice: &ChangeNotice) -> Result<String> {
    crate::rows::to_json("change notice", notice)
}

/// Bytes of one payload sent between replicas at most: PostgreSQL refuses a `NOTIFY`
/// payload of 8,000 bytes or more (its default build), and a notice or two of margin is
/// left for the last one appended.
pub(crate) const NOTICE_PAYLOAD_BYTES: usize = 7000;

/// The payloads that carry `notices` to other replicas: a lone notice as its JSON object,
/// several as JSON arrays of as many as fit in [`NOTICE_PAYLOAD_BYTES`] (one that does not
/// fit with any other goes alone, as its object). A grouped write of a thousand chats then
/// sends a few dozen notifications instead of a thousand: each one is queued by the server,
/// read by every replica's listening connection and handed over by its driver on its own.
pub(crate) fn notice_payloads(notices: &[ChangeNotice]) -> Result<Vec<String>> {
    let mut payloads = Vec::new();
    let mut batch: Vec<String> = Vec::new();
    // The array's bytes so far: its `[`, and each notice with the `,` or `]` after it.
    let mut batch_bytes = 1;
    for notice in notices {
        let json = notice_payload(notice)?;
        if !batch.is_empty() && batch_bytes + json.len() + 1 > NOTICE_PAYLOAD_BYTES {
            payloads.push(join_notices(std::mem::take(&mut batch)));
            batch_bytes = 1;
        }
        batch_bytes += json.len() + 1;
        batch.push(json);
    }
    if !batch.is_empty() {
        payloads.push(join_notices(batch));
    }
    Ok(payloads)
}

fn join_notices(mut batch: Vec<String>) -> String {
    if batch.len() == 1 {
        return batch.pop().unwrap_or_default();
    }
    format!("[{}]", batch.join(","))
}

/// The notices of one payload of [`notice_payloads`] (a notice, or an array of them). A
/// payload that is neither carries nothing this process understands: none.
pub(crate) fn parse_notices(payload: &str) -> Vec<ChangeNotice> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Payload {
        One(Box<ChangeNotice>),
        Many(Vec<ChangeNotice>),
    }
    match serde_json::from_str::<Payload>(payload) {
        Ok(Payload::One(notice)) => vec![*notice],
        Ok(Payload::Many(notices)) => notices,
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
