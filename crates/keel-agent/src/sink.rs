//! Where the loop publishes what happens while a step is in progress.
//!
//! The loop calls [`EventSink::publish`] for every delta the moment it arrives; the daemon
//! turns these into live `part` events and appends them to the durable live-part log. The
//! sink must not block: it is called from the streaming hot path.

use std::time::Duration;

use keel_core::{ErrorKind, Part};

/// A live event of the step in progress.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveEvent {
    TextDelta {
        delta: String,
    },
    ReasoningDelta {
        delta: String,
    },
    /// New text of the model's refusal.
    RefusalDelta {
        delta: String,
    },
    ToolCallDelta {
        tool_call_id: String,
        tool_name: String,
        args_delta: String,
    },
    /// A tool call whose arguments are complete.
    ToolCall {
        tool_call_id: String,
        tool_name: String,
        args: String,
        provider_executed: bool,
    },
    /// A whole tool result (local or provider-executed), with its completion time.
    ToolResult {
        part: Part,
    },
    Source {
        url: String,
        title: Option<String>,
    },
    /// A provider attempt failed and will be retried after `delay`.
    Retry {
        attempt: u32,
        delay: Duration,
        kind: ErrorKind,
        message: String,
        /// The configured name of the provider whose attempt failed, when known.
        provider: Option<String>,
        /// The address the failed request went to, as [`keel_core::public_url`] shows it.
        url: Option<String>,
    },
    /// Every live part since the last committed step is void: the step restarts from scratch.
    StreamReset,
    /// A streamed tool call that will not run.
    ToolCallCancel {
        tool_call_id: String,
        tool_name: String,
        reason: String,
    },
}

/// Receives live events. Implementations must be cheap and non-blocking.
pub trait EventSink: Send + Sync {
    fn publish(&self, event: LiveEvent);
}

/// A sink that drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn publish(&self, _event: LiveEvent) {}
}
