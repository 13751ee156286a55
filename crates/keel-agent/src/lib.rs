//! Keel's agent loop, as a library with no HTTP and no SQL in it.
//!
//! [`run`] drives a [`LanguageModel`](keel_core::LanguageModel): it streams one reply,
//! publishes every delta to an [`EventSink`], runs the local [`Tool`]s the model asked for,
//! makes the step durable through a [`StepPersister`], and goes round again while the model
//! keeps calling tools. Cancellation carries a cause ([`keel_core::CancelCause`]): a user
//! interrupt persists the partial step and returns [`RunOutcome::Interrupted`]; a shutdown
//! returns [`RunError::Cancelled`].
//!
//! Module map:
//! * [`run`](mod@run) — the loop and its options and outcomes;
//! * [`accumulate`] — stream events into step content;
//! * [`response`] — step content into assistant and tool messages;
//! * [`execute`] — concurrent tool execution;
//! * [`next_step`] — whether a run goes on after a committed step (the loop and a takeover);
//! * [`context_limit`] — context limit discovery from provider metadata;
//! * [`compaction`] — when to summarise the history, and the hook that stores a summary;
//!   `summarize` — streaming and committing the summary;
//! * `attempt` — one step through failures: retries, watchdogs, recovery, chain healing;
//! * [`snapshot`] — what a failed stream left usable, captured and rebuilt;
//! * [`recovery`], [`retry`], [`timeouts`], [`checkpoint`] — the pure decisions and the
//!   checkpoint interface behind it; [`seam`] — where a continued reply meets its prefix;
//! * [`trace`] — the run's spans, after OpenTelemetry's GenAI conventions;
//! * [`tool`], [`persist`], [`sink`] — the interfaces the daemon implements (the clock is
//!   `keel_core::Clock`).

#![warn(unreachable_pub)]

pub mod accumulate;
mod attempt;
pub mod checkpoint;
pub mod compaction;
pub mod context_limit;
pub mod execute;
pub mod next_step;
pub mod persist;
pub mod recovery;
pub mod response;
pub mod retry;
pub mod run;
pub mod seam;
pub mod sink;
pub mod snapshot;
mod summarize;
pub mod timeouts;
pub mod tool;
pub mod trace;

pub use checkpoint::{CheckpointStore, MemoryCheckpoints, StreamCheckpoint};
pub use compaction::{Compaction, CompactionHooks, SummaryRecord};
pub use next_step::{NextStep, next_step};
pub use persist::{Halt, PersistError, PersistedStep, StepPersister};
pub use recovery::{RecoveryPlan, choose_plan};
pub use retry::RetryPolicy;
pub use run::{
    ChainHooks, Checkpointing, ReloadHistory, RetryNotice, RunError, RunOptions, RunOutcome, run,
};
pub use sink::{EventSink, LiveEvent, NullSink};
pub use snapshot::StreamSnapshot;
pub use timeouts::StreamTimeouts;
pub use tool::{ProviderTool, Tool, ToolCallRequest, ToolError, ToolOutput};
