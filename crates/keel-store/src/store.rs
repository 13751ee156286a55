//! The [`Store`] trait: everything the daemon reads and writes.

use std::ops::RangeInclusive;

use crate::types::LastError;
use async_trait::async_trait;
use futures::stream::BoxStream;
use keel_core::{Message, Part, PendingToolCall};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::error::Result;
use crate::types::{
    Busy, CatchUp, ChangeNotice, Chat, ChatExport, ChatId, ChatUpdate, ImportChat, Lease,
    LiveEntry, MessageId, NewChat, NewLiveEntry, NewMessage, NewSummary, Next, QueueId,
    RemoteNotice, RunStart, SendOutcome, StoredMessage, ToolRecord, ToolResultInput, User,
};
use crate::usage::{Budget, Exceeded, UsageGroup, UsageQuery, UsageTotals};

/// The durable state of Keel. Every write is one transaction that locks the chat row;
/// every committed change is announced with a [`ChangeNotice`].
#[async_trait]
pub trait Store: Send + Sync {
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    // ---- API -------------------------------------------------------------------
    /// Creates a chat whose first user message starts a run (status `running`).
    async fn create_chat(&self, req: NewChat) -> Result<Chat>;
    async fn get_chat(&self, id: ChatId) -> Result<Chat>;
    /// Newest first; `before` is the last chat of the previous page.
    async fn list_chats(
        &self,
        owner: Option<&str>,
        before: Option<ChatId>,
        limit: u32,
    ) -> Result<Vec<Chat>>;
    /// Sends a user message. With `owner`, a chat of another owner is not found, exactly as
    /// a chat that does not exist (the check is part of the transition: no read before it).
    async fn send_message(
        &self,
        chat: ChatId,
        owner: Option<&str>,
        parts: Vec<Part>,
        busy: Busy,
        idempotency_key: Option<&str>,
    ) -> Result<SendOutcome>;
    /// Edits a user message: the new content becomes a sibling of it on a new current
    /// branch, and a run starts on it; the old branch stays stored (`edit message`).
    async fn edit_message(
        &self,
        chat: ChatId,
        message: MessageId,
        parts: Vec<Part>,
    ) -> Result<Chat>;
    /// Starts a run that writes a new reply beside a reply (given as the reply or as the
    /// user message before it), on an idle chat (`regenerate`).
    async fn regenerate(&self, chat: ChatId, message: MessageId) -> Result<Chat>;
    /// Makes the branch through a message, to its newest leaf, the current one, on an idle
    /// chat (`switch branch`).
    async fn switch_branch(&self, chat: ChatId, message: MessageId) -> Result<Chat>;
    async fn interrupt(&self, chat: ChatId) -> Result<Chat>;
    async fn submit_tool_results(
        &self,
        chat: ChatId,
        results: Vec<ToolResultInput>,
    ) -> Result<Chat>;
    async fn delete_queued(&self, chat: ChatId, queued: QueueId) -> Result<Chat>;
    async fn promote_queued(&self, chat: ChatId, queued: QueueId) -> Result<Chat>;
    async fn set_archived(&self, chat: ChatId, archived: bool) -> Result<Chat>;
    async fn delete_chat(&self, chat: ChatId) -> Result<()>;
    /// Renames a chat and/or switches its model (`update chat`).
    async fn update_chat(&self, chat: ChatId, update: ChatUpdate) -> Result<Chat>;
    /// Gives an untitled chat the title the daemon generated (`name chat`); `false` when
    /// the chat already has a title (a client named it meanwhile), which is kept.
    async fn name_chat(&self, chat: ChatId, title: &str) -> Result<bool>;
    /// Asks for a compaction of an idle (`waiting` or `error`) chat; a conflict otherwise.
    async fn request_compaction(&self, chat: ChatId) -> Result<Chat>;
    /// Has the model carry on the reply the user stopped (`continue reply`): the chat must
    /// be idle and its last message such a reply ([`crate::stopped_reply`]), else
    /// [`crate::StoreError::NothingToContinue`].
    async fn continue_reply(&self, chat: ChatId) -> Result<Chat>;
    /// Runs the failed turn of a chat in `error` again (`retry run`).
    async fn retry_run(&self, chat: ChatId) -> Result<Chat>;
    /// The chat and its whole message tree, read in one snapshot.
    async fn export_chat(&self, chat: ChatId) -> Result<ChatExport>;
    /// Creates a chat from an exported tree (`import chat`), checked whole first: a broken
    /// tree is [`crate::StoreError::InvalidInput`] naming the message, and nothing is stored.
    async fn import_chat(&self, req: ImportChat) -> Result<Chat>;

    /// The messages of the current branch with an id above `after`, in order, with their
    /// siblings; summaries are not among them.
    async fn list_messages(
        &self,
        chat: ChatId,
        after: Option<MessageId>,
    ) -> Result<Vec<StoredMessage>>;
    /// The messages of the current branch numbered above `after_seq`, in order, with their
    /// siblings.
    async fn messages_after_seq(&self, chat: ChatId, after_seq: i64) -> Result<Vec<StoredMessage>>;
    /// One page of what [`Self::list_messages`] (`by_seq` false: after a message id) or
    /// [`Self::messages_after_seq`] (`by_seq` true: after an event sequence) returns: at most
    /// `limit` messages; the next page starts after the last one, and a shorter page is
    /// the last.
    async fn messages_page(
        &self,
        chat: ChatId,
        after: i64,
        by_seq: bool,
        limit: usize,
    ) -> Result<Vec<StoredMessage>>;
    /// What [`Self::list_messages`] lists, of the branch through `through` (to its newest
    /// leaf) instead of the current one: at most `limit` messages.
    async fn branch_messages(
        &self,
        chat: ChatId,
        through: MessageId,
        after: Option<MessageId>,
        limit: Option<usize>,
    ) -> Result<Vec<StoredMessage>>;
    /// The last `limit` messages [`Self::list_messages`] lists, in order.
    async fn recent_messages(&self, chat: ChatId, limit: usize) -> Result<Vec<StoredMessage>>;
    /// The live parts of the step in progress (numbered after the chat's last message)
    /// after `after_seq`: what a run resumes from.
    async fn live_parts_after(&self, chat: ChatId, after_seq: i64) -> Result<Vec<LiveEntry>>;
    /// [`Self::live_parts_after`] for several chats at once (each `(chat, after)` once), in
    /// one read: what the followers of runs on other replicas are sent. A chat with nothing
    /// after its position, or that is gone, is left out.
    async fn live_parts_of(
        &self,
        positions: &[(ChatId, i64)],
    ) -> Result<Vec<(ChatId, Vec<LiveEntry>)>>;
    /// What a claimed chat's run starts from, in one read: the chat, the step in progress,
    /// the current branch and the tool records.
    async fn start_run(&self, chat: ChatId) -> Result<RunStart>;
    /// What a client at event sequence `after` is owed, in one read: the logged parts after
    /// it (the step in progress, and the last committed step's while they are kept), the first `limit` committed messages after it (as [`Self::messages_page`] by
    /// sequence; later pages through that), and the chat.
    async fn catch_up(&self, chat: ChatId, after: i64, limit: usize) -> Result<CatchUp>;
    /// Stored history from the latest summary on (see [`crate::prompt_messages`]), repaired
    /// with [`crate::repair_orphans`], ready for a prompt.
    async fn load_prompt_history(&self, chat: ChatId) -> Result<Vec<Message>>;

    // ---- worker ----------------------------------------------------------------
    /// Claims up to `limit` runnable chats (running or interrupting, and unowned or with
    /// an expired lease).
    async fn acquire(&self, worker_id: &str, limit: usize) -> Result<Vec<Lease>>;
    /// Extends a lease (and returns the chat's status with it, so the run sees an
    /// interrupt even when its notice was lost). Changes nothing a client sees: no new
    /// snapshot version, no change notice.
    async fn renew_lease(&self, lease: &Lease) -> Result<Lease>;
    /// Extends the leases of several runs in one transaction, each fenced on its own: one
    /// outcome per lease, in order.
    async fn renew_leases(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>>;
    /// Appends live parts; returns the event sequence numbers they got.
    async fn append_live_parts(
        &self,
        lease: &Lease,
        payloads: &[Value],
    ) -> Result<RangeInclusive<i64>>;
    /// Appends live parts the worker already numbered (it publishes them to subscribers
    /// before they are written); the chat's event sequence advances past them. No notice is
    /// published in this process: parts reach its subscribers directly; other replicas are
    /// notified.
    async fn append_live_entries(&self, lease: &Lease, entries: &[NewLiveEntry]) -> Result<()>;
    /// Appends the numbered parts of several runs (of any chats) in one transaction, each
    /// group fenced on its own lease: one outcome per group, in order, so a run that lost
    /// its chat is refused without holding back the others. `Err` means nothing was
    /// written. Other replicas are notified of each chat's new event sequence.
    ///
    /// This, [`Self::commit_step`], [`Self::commit_steps`], [`Self::finish_run`],
    /// [`Self::finish_runs`] and [`Self::live_parts_of`] are the live path (the process's
    /// grouped writer, which also commits and finishes a run alone, and its grouped log
    /// reader): on PostgreSQL
    /// they run on connections of their own, so a burst of requests that takes the whole
    /// pool does not hold back what other replicas' followers see.
    async fn append_live_groups(
        &self,
        groups: &[(Lease, &[NewLiveEntry])],
    ) -> Result<Vec<Result<()>>>;
    /// Commits a step's messages and clears the live-part log. A step with an
    /// `interrupted` message is also accepted while the chat is `interrupting` and released.
    async fn commit_step(&self, lease: &Lease, messages: Vec<NewMessage>)
    -> Result<Vec<MessageId>>;
    /// Commits the steps of several runs (of different chats) in one transaction, each
    /// checked, fenced on its own lease and numbered as [`Self::commit_step`] does: one
    /// outcome per step, in order, so a refused step holds back none of the others. `Err`
    /// means nothing was written.
    async fn commit_steps(
        &self,
        steps: Vec<(Lease, Vec<NewMessage>)>,
    ) -> Result<Vec<Result<Vec<MessageId>>>>;
    /// Commits a compaction boundary (the summary, never listed) and a visible notice that
    /// the conversation was summarised; clears the live-part log and the compaction request.
    async fn commit_summary(&self, lease: &Lease, summary: NewSummary) -> Result<Vec<MessageId>>;
    async fn record_tool(&self, lease: &Lease, record: ToolRecord) -> Result<()>;
    async fn tool_records(&self, chat: ChatId) -> Result<Vec<ToolRecord>>;
    async fn set_retry_state(&self, lease: &Lease, state: Option<Value>) -> Result<()>;
    /// Records the `traceparent` of the run's span ([`crate::trace::RunTrace::run`]),
    /// fenced on the lease.
    async fn record_run_trace(&self, lease: &Lease, run: &str) -> Result<()>;
    async fn finish_interruption(&self, lease: &Lease) -> Result<Next>;
    async fn finish_run(&self, lease: &Lease) -> Result<Next>;
    /// Finishes the runs of several chats in one transaction, each checked, fenced on its
    /// own lease and moved as [`Self::finish_run`] moves it: one outcome per lease, in
    /// order, so a refused run holds back none of the others. `Err` means nothing was
    /// written.
    async fn finish_runs(&self, leases: &[Lease]) -> Result<Vec<Result<Next>>>;
    async fn fail_run(&self, lease: &Lease, error: LastError) -> Result<()>;
    /// Hands the chat to the client for `calls`; with `timeout`, the sweep answers them
    /// with errors once it has passed (timed by the store's clock, like leases).
    async fn enter_requires_action(
        &self,
        lease: &Lease,
        calls: Vec<PendingToolCall>,
        timeout: Option<chrono::Duration>,
    ) -> Result<Next>;
    async fn release_on_shutdown(&self, lease: &Lease) -> Result<()>;
    /// Releases chats whose lease expired; returns them.
    async fn recover_stale(&self) -> Result<Vec<ChatId>>;
    /// The distinct owner tokens starting with `prefix` that hold chats now.
    async fn chat_owners(&self, prefix: &str) -> Result<Vec<String>>;
    /// Releases the chats held by exactly these owners (processes known to be gone) without
    /// waiting for their leases; returns them.
    async fn release_owners(&self, owners: &[String]) -> Result<Vec<ChatId>>;
    /// Answers overdue client-side calls with error results; the queue head runs next
    /// (`running`, unowned), else the chat waits.
    async fn expire_pending_actions(&self) -> Result<Vec<ChatId>>;

    // ---- checkpoints, users, housekeeping ----------------------------------------
    /// Saves the step's checkpoint, fenced on the lease like every other write of a run.
    async fn put_checkpoint(&self, lease: &Lease, data: Value) -> Result<()>;
    /// The checkpoint of the step in progress: `None` when none was saved, or when the
    /// one stored belongs to an older step or history (a write that raced a commit).
    async fn get_checkpoint(&self, chat: ChatId) -> Result<Option<Value>>;
    async fn delete_checkpoint(&self, chat: ChatId) -> Result<()>;
    /// Creates the user or replaces its token, given only the token's SHA-256 (hex), as a
    /// configuration file holds it.
    async fn upsert_user_hash(&self, name: &str, token_sha256: &str) -> Result<()>;
    /// Creates the user or replaces its token.
    async fn upsert_user(&self, name: &str, token: &str) -> Result<()>;
    async fn user_by_token(&self, token: &str) -> Result<Option<User>>;
    async fn has_users(&self) -> Result<bool>;
    /// Deletes the user, so its token stops working at once; `false` when there was none.
    /// Its chats stay stored under its name.
    async fn remove_user(&self, name: &str) -> Result<bool>;
    /// Every user, by name.
    async fn list_users(&self) -> Result<Vec<User>>;
    /// Sets (or with `None` clears) a user's budget; `false` when there is no such user.
    async fn set_budget(&self, name: &str, budget: Option<Budget>) -> Result<bool>;
    /// A user's budget; `None` when they have none (or do not exist).
    async fn user_budget(&self, name: &str) -> Result<Option<Budget>>;
    /// Why a run of `owner`'s may not go on now: their budget is used up.
    async fn budget_refusal(&self, owner: &str) -> Result<Option<Exceeded>>;
    /// One user's usage records summed per group.
    async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>>;
    /// A chat's usage records summed: every step it committed, on every branch.
    async fn chat_usage(&self, chat: ChatId) -> Result<UsageTotals>;
    /// The chat `owner` named `alias` (a client-chosen chat id), if it still exists.
    async fn chat_by_alias(&self, owner: &str, alias: &str) -> Result<Option<ChatId>>;
    /// Names `chat` `alias` for `owner` unless the name is taken; returns the chat the name
    /// stands for afterwards (another one when a concurrent request named it first).
    async fn claim_alias(&self, owner: &str, alias: &str, chat: ChatId) -> Result<ChatId>;
    /// Forgets idempotency keys older than their time to live.
    async fn purge_idempotency_keys(&self) -> Result<u64>;
    /// Forgets records of tool calls that finished longer ago than the idempotency time to
    /// live, in chats that are not running.
    async fn purge_tool_records(&self) -> Result<u64>;
    /// Drops the live-part logs of chats no run holds that have not changed for a lease
    /// period: the parts of a last committed step, kept so that followers on other replicas
    /// could still send them before its message. Returns the batches deleted.
    async fn purge_settled_logs(&self) -> Result<u64>;

    // ---- notices ---------------------------------------------------------------
    /// Notices of changes committed by this process.
    fn subscribe(&self) -> broadcast::Receiver<ChangeNotice>;
    /// Notices of changes committed by any replica (PostgreSQL `LISTEN`); on SQLite, the
    /// same as [`Store::subscribe`].
    async fn subscribe_remote(&self) -> Result<BoxStream<'static, RemoteNotice>>;
}
