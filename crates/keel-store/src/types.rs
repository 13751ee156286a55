//! The records the store reads and writes, and the requests its transitions take.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use keel_core::{Clock, SystemClock};
use keel_core::{ErrorKind, FinishReason, Message, Part, PendingToolCall, Role, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::status::ChatStatus;

pub type ChatId = Uuid;
pub type QueueId = Uuid;
/// Message ids grow with insertion order within a chat and are never reused.
pub type MessageId = i64;

/// The last error of a chat in `error` status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastError {
    pub kind: ErrorKind,
    pub message: String,
    /// The configured name of the provider whose request failed, when one did.
    #[serde(default)]
    pub provider: Option<String>,
    /// The address that request went to, without its query or credentials.
    #[serde(default)]
    pub url: Option<String>,
}

impl LastError {
    /// An error with no provider request behind it.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            provider: None,
            url: None,
        }
    }
}

/// One chat row plus its queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chat {
    pub id: ChatId,
    pub owner: String,
    pub title: Option<String>,
    pub model: String,
    pub status: ChatStatus,
    pub archived: bool,
    pub max_steps: Option<i64>,
    pub system: Option<String>,
    /// Client-side tool definitions as given at creation (a JSON array).
    pub tools: Value,
    pub worker_id: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Grows with every transition.
    pub version: i64,
    /// Grows when the current branch changes (an edit, a regenerate, a switch); worker
    /// writes are fenced on it.
    pub history_version: i64,
    /// The last event sequence number used; every chat event gets the next one.
    pub event_seq: i64,
    /// The last message id handed out.
    pub last_message_id: MessageId,
    /// The newest message of the current branch (0 before the first): the next message
    /// is its child.
    pub leaf_id: MessageId,
    /// The event sequence number of the last change of the current branch (0: never
    /// changed); every message of the current branch is numbered above it.
    pub branch_seq: i64,
    pub last_error: Option<LastError>,
    /// The worker's retry bookkeeping, opaque to the store.
    pub retry_state: Option<Value>,
    pub pending_tool_calls: Vec<PendingToolCall>,
    pub pending_deadline: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// A compaction was requested; the next run only summarises the history.
    pub compact_requested: bool,
    /// Queued messages in the order they will run. Filled by reads and API transitions.
    pub queued: Vec<QueuedMessage>,
}

/// What a prompt is built from: the prompt history, and the stored response a chained
/// prompt continues from (OpenAI Responses `previous_response_id`).
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub messages: Vec<Message>,
    pub chain_from: Option<String>,
}

/// A committed message as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub id: MessageId,
    pub chat_id: ChatId,
    pub role: Role,
    pub parts: Vec<Part>,
    /// Always 1: an edit adds a sibling instead of replacing the content (kept for the
    /// rows written before branches).
    pub content_version: i64,
    pub usage: Option<Usage>,
    pub context_limit: Option<i64>,
    pub runtime_ms: Option<i64>,
    pub interrupted: bool,
    pub provider_response_id: Option<String>,
    /// The event sequence number the message was last numbered at: when it was committed,
    /// or when a change of the current branch brought it back (see `Chat::branch_seq`).
    pub event_seq: i64,
    pub created_at: DateTime<Utc>,
    pub kind: MessageKind,
    /// Why the model stopped at the step this assistant message holds; `None` on other
    /// messages and on those stored before it was recorded.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// The message before this one on its branch; `None` for a chat's first message.
    #[serde(default)]
    pub parent_id: Option<MessageId>,
    /// The listed messages with the same parent (this one included), in creation order.
    /// Filled by the reads that list messages for clients; empty elsewhere.
    #[serde(default)]
    pub siblings: Vec<MessageId>,
}

/// What a stored message is to the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// Part of the conversation, shown to clients and sent to the model.
    #[default]
    Normal,
    /// A compaction boundary: the summary the model starts from. Never shown to clients.
    Summary,
    /// Tells clients the conversation was summarised. Never sent to the model.
    CompactionNotice,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        keel_core::names::serde_name(&self)
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            MessageKind::Normal,
            MessageKind::Summary,
            MessageKind::CompactionNotice,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

impl StoredMessage {
    pub fn to_message(&self) -> keel_core::Message {
        keel_core::Message::new(self.role, self.parts.clone())
    }
}

/// A message waiting behind the active run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedMessage {
    pub id: QueueId,
    pub chat_id: ChatId,
    /// Ordering key; smaller runs first. Not contiguous.
    pub position: i64,
    pub parts: Vec<Part>,
    pub created_at: DateTime<Utc>,
}

/// A message a worker commits as part of a step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewMessage {
    pub role: Option<Role>,
    pub parts: Vec<Part>,
    pub usage: Option<Usage>,
    pub context_limit: Option<i64>,
    pub runtime_ms: Option<i64>,
    /// Set on the partial output of an interrupted step.
    pub interrupted: bool,
    pub provider_response_id: Option<String>,
    pub kind: MessageKind,
    /// Why the model stopped at the step (assistant messages only).
    pub finish_reason: Option<FinishReason>,
    /// The model and cost the step's `usage` is recorded with; without it, the chat's
    /// model and no cost.
    pub charge: Option<Charge>,
}

impl NewMessage {
    pub fn new(role: Role, parts: Vec<Part>) -> Self {
        Self {
            role: Some(role),
            parts,
            ..Self::default()
        }
    }
}

/// A conversation summary to commit as a compaction boundary.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewSummary {
    pub text: String,
    /// What the summarising call consumed and produced.
    pub usage: Usage,
    pub context_limit: Option<i64>,
    /// As [`NewMessage::charge`].
    pub charge: Option<Charge>,
}

/// How a new message treats a chat that is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Busy {
    /// Queue behind the active run.
    #[default]
    Queue,
    /// Queue at the head and interrupt the active run.
    Interrupt,
}

/// What happened to a sent message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendOutcome {
    /// Inserted into history; a run starts now.
    Started { message_id: MessageId },
    /// Waiting in the queue.
    Queued { queue_id: QueueId },
}

/// The request to create a chat; the first user message starts a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewChat {
    pub owner: String,
    pub title: Option<String>,
    pub model: String,
    pub system: Option<String>,
    /// Client-side tool definitions (a JSON array); `Null` means none.
    pub tools: Value,
    pub max_steps: Option<i64>,
    /// Earlier turns a client brings along (a stateless client sends the whole
    /// conversation each time), stored before `parts` in the same transaction. Each is a
    /// user, assistant or tool message.
    pub history: Vec<NewMessage>,
    /// The new user message; empty when `history` ends with tool results, which the run
    /// then answers.
    pub parts: Vec<Part>,
    pub idempotency_key: Option<String>,
}

/// A whole chat as it leaves an installation ([`crate::Store::export_chat`]): the chat and
/// every message of its tree, summaries included, in id order (siblings not listed).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatExport {
    pub chat: Chat,
    pub messages: Vec<StoredMessage>,
}

/// A chat brought from an export, created whole ([`crate::Store::import_chat`]): its
/// settings, its message tree with the ids and timestamps it had, and the end of its current
/// branch. The new chat waits for its owner's next message.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportChat {
    pub owner: String,
    pub title: Option<String>,
    pub model: String,
    pub system: Option<String>,
    /// Client-side tool definitions (a JSON array); `Null` means none.
    pub tools: Value,
    pub max_steps: Option<i64>,
    pub archived: bool,
    pub created_at: DateTime<Utc>,
    /// The last message of the current branch.
    pub leaf_id: MessageId,
    /// Every message, in id order. Their `chat_id`, `event_seq`, `content_version` and
    /// `siblings` are ignored: the store gives them the new chat's values.
    pub messages: Vec<StoredMessage>,
}

/// A client's answer to one pending tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolResultInput {
    pub tool_call_id: String,
    pub result: Value,
    #[serde(default)]
    pub is_error: bool,
}

/// A worker's claim on a chat: every worker write presents it and is fenced on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub chat_id: ChatId,
    pub worker_id: String,
    /// The chat's history version when claimed; an edit makes the lease stale.
    pub history_version: i64,
    pub expires_at: DateTime<Utc>,
    /// The chat's status when the lease was taken or last renewed: a renewal tells the run
    /// of an interrupt even when every change notice was lost.
    pub status: ChatStatus,
    /// The chat's snapshot version written by the transaction that granted the lease (a
    /// claim, or the queue head handed over as the previous run ended). A change notice of
    /// an older version speaks of an earlier run: an interrupt it carries is not this
    /// run's. Renewals keep it.
    pub granted_version: i64,
}

/// What a worker does after a run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The chat is `waiting` and released.
    Idle,
    /// The queue head became the next user message; the chat stays `running` and owned.
    Continue { lease: Lease, message_id: MessageId },
}

/// One entry of the live-part log of the step in progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveEntry {
    /// The chat's event sequence number; the SSE event id.
    pub seq: i64,
    pub payload: Value,
}

/// What a run reads when it starts, in one snapshot ([`crate::Store::start_run`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunStart {
    pub chat: Chat,
    /// The live parts of the step in progress, as [`crate::Store::live_parts_after`] `0`.
    pub log: Vec<LiveEntry>,
    /// The current branch, first message first, summaries included (no siblings listed).
    pub history: Vec<StoredMessage>,
    /// The records of the tool calls of the step in progress.
    pub tool_records: Vec<ToolRecord>,
    /// Where the run's trace starts, and the span of a run a dead owner left.
    pub trace: crate::trace::RunTrace,
}

impl RunStart {
    /// The last `n` messages clients see (no summaries), oldest first: the end of the
    /// history [`crate::Store::recent_messages`] lists.
    pub fn recent(&self, n: usize) -> Vec<&StoredMessage> {
        self.last_where(n, |m| m.kind != MessageKind::Summary)
    }

    /// The last `n` messages of the conversation itself, oldest first: no summaries and no
    /// compaction notices, so that a run taking over after a compaction sees the step the
    /// summary followed.
    pub fn conversation_end(&self, n: usize) -> Vec<&StoredMessage> {
        self.last_where(n, |m| m.kind == MessageKind::Normal)
    }

    /// Whether this run takes the chat over from an owner that stopped without ending its
    /// run (it died, lost its lease, or gave the chat back): taking it skipped the numbers
    /// that owner may have sent clients without logging ([`crate::RECOVERY_SEQ_GAP`]), and
    /// nothing but transitions was numbered since. Such clients hold parts no store has, so
    /// the new run's first event voids them. A run started afresh, or on the queue head by
    /// the same owner, numbers right after what is stored.
    pub fn taken_over(&self) -> bool {
        let last_stored = self
            .log
            .iter()
            .map(|e| e.seq)
            .chain(self.history.iter().map(|m| m.event_seq))
            .max()
            .unwrap_or(0);
        self.chat.event_seq.saturating_sub(last_stored) >= crate::RECOVERY_SEQ_GAP
    }

    fn last_where(&self, n: usize, keep: impl Fn(&StoredMessage) -> bool) -> Vec<&StoredMessage> {
        let mut last: Vec<&StoredMessage> = self
            .history
            .iter()
            .rev()
            .filter(|m| keep(m))
            .take(n)
            .collect();
        last.reverse();
        last
    }

    /// The prompt the history makes: from the latest summary on, orphans repaired, and the
    /// response a chained provider continues from.
    pub fn prompt(&self) -> Prompt {
        Prompt {
            chain_from: crate::chain_anchor(&self.history),
            messages: crate::repair_orphans(crate::prompt_messages(&self.history)),
        }
    }
}

/// What a client resuming after a position is owed, read in one snapshot
/// ([`crate::Store::catch_up`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CatchUp {
    /// The logged parts after the position: the step in progress, and the parts of the
    /// last committed step while they are kept (numbered before its message; a follower
    /// sends them in sequence order with the messages, as a live client got them).
    pub parts: Vec<LiveEntry>,
    /// The first page of committed messages after the position, by event sequence.
    pub messages: Vec<StoredMessage>,
    /// The chat as it stands, queue included.
    pub chat: Chat,
}

/// An entry for the live-part log, its payload already serialised: the worker shapes each
/// part once, and the log stores that text as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLiveEntry {
    /// The chat's event sequence number; the SSE event id.
    pub seq: i64,
    pub payload: JsonText,
}

/// A JSON document as text, made only by serialising a value, so it is always valid JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(String);

impl JsonText {
    /// Serialises `value`. A value that does not serialise (a map with non-string keys, a
    /// failing `Serialize` impl) becomes `null`: the shapes logged are plain JSON objects.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Self {
        Self(serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether a tool call has produced its result yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolState {
    Started,
    Finished,
}

/// The intent (and later the result) of one tool execution, so a restarted worker knows
/// which tools already ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRecord {
    pub chat_id: ChatId,
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
    pub state: ToolState,
    pub result: Option<Value>,
    pub is_error: bool,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A configured user. The token itself is never stored, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// A chat changed. Sent in-process after every commit and, on PostgreSQL, to every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeNotice {
    pub chat_id: ChatId,
    pub version: i64,
    pub status: ChatStatus,
    pub history_version: i64,
    /// The chat's latest event sequence number: readers fetch what lies after their own.
    pub event_seq: i64,
    #[serde(default)]
    pub deleted: bool,
    /// The user who owns the chat.
    #[serde(default)]
    pub owner: String,
    /// Something a list of chats shows changed: the chat was created or deleted, or its
    /// status, title, model or archived flag changed. Live-part appends and commits that
    /// leave those alone do not set it, so the list's followers skip them without a read.
    #[serde(default)]
    pub listing: bool,
    /// The chat waits for a worker to claim it (runnable, no owner): the notice wakes the
    /// claim loops. The notices of a run in progress (its claim, its commits, its live
    /// parts) do not. A notice without the field (from an older replica) is taken as one.
    #[serde(default = "true_unless_said")]
    pub unowned: bool,
    /// Something a chat's event stream reports without an event number of its own may have
    /// changed: its retry state or its last error (a change of status or queue, a message,
    /// a live part or a branch takes a number). A step's commit, a run's claim and live-part
    /// appends leave those alone, so a follower that has sent every event numbered so far
    /// skips their notices without reading the chat. A notice without the field (from an
    /// older replica) is taken as one.
    #[serde(default = "true_unless_said")]
    pub unnumbered_change: bool,
}

/// The default of a notice's flags an older replica does not send: the cautious reading.
fn true_unless_said() -> bool {
    true
}

/// What `update_chat` changes; a field left `None` stays as it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChatUpdate {
    pub title: Option<String>,
    pub model: Option<String>,
    /// The system prompt of the chat's next runs.
    pub system: Option<String>,
}

/// What a subscriber to every replica's changes hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteNotice {
    Changed(ChangeNotice),
    /// Notices may have been lost (the `LISTEN` connection was re-established, or this
    /// subscriber fell behind): whatever the subscriber follows must be read again.
    Missed,
}

/// Tunables of a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Most queued messages per chat.
    pub max_queue: usize,
    /// Largest serialised content (parts JSON, tool results) an API call may store.
    pub max_content_bytes: usize,
    /// How long an acquired or renewed lease lasts.
    pub lease_ttl: Duration,
    /// How long an idempotency key is remembered.
    pub idempotency_ttl: Duration,
    /// Connections of the pool (PostgreSQL) or of the reader pool (SQLite).
    pub max_connections: u32,
    pub clock: Arc<dyn Clock>,
    /// On PostgreSQL, `clock` is moved to the database server's (see `postgres/clock.rs`),
    /// so that replicas time leases alike. Off for a clock a test moves by hand.
    pub follow_database_clock: bool,
    /// Keep each run's trace context ([`crate::trace`]): on when the daemon exports traces
    /// or logs trace ids. Off, no transition reads or writes one.
    pub trace_runs: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_queue: 20,
            max_content_bytes: 1 << 20,
            lease_ttl: Duration::seconds(30),
            idempotency_ttl: Duration::hours(24),
            max_connections: 8,
            clock: Arc::new(SystemClock),
            follow_database_clock: true,
            trace_runs: false,
        }
    }
}

/// What a committed step is charged to, beside its usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The model that produced the step, as configured (`[[models]] id`).
    pub model: String,
    /// The step's cost in nano-dollars; `None` when the model has no price.
    pub cost_nanos: Option<i64>,
}
