//! The interface through which the loop makes a step durable.

use std::time::Duration;

use async_trait::async_trait;
use keel_core::{Cancel, ErrorKind, FinishReason, Message, PendingToolCall, Usage};

use crate::sink::LiveEvent;

/// Everything one model step produced, ready to be stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistedStep {
    /// 0-based index of the step within the run.
    pub step_index: usize,
    /// The assistant message (when it has content) followed by the tool message (when any
    /// local tool produced a result).
    pub messages: Vec<Message>,
    pub usage: Usage,
    /// The context limit discovered from provider metadata, else the model's fallback.
    pub context_limit: Option<u64>,
    pub runtime: Duration,
    pub finish_reason: FinishReason,
    /// The step was cut short by a user interrupt.
    pub interrupted: bool,
    /// Calls to client-side tools that await results from the client.
    pub pending_tool_calls: Vec<PendingToolCall>,
    /// The provider's id of this response (OpenAI Responses chain mode).
    pub provider_response_id: Option<String>,
}

/// Why a persist failed.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The chat was interrupted while persisting (e.g. its status changed under the write).
    /// The loop retries through the interrupt-safe path.
    #[error("chat was interrupted")]
    Interrupted,
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl PersistError {
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Other(error.into())
    }
}

/// Why a run ends after a committed step although the model would go on (a spending limit
/// reached): the step stays committed and the run fails with this kind and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halt {
    pub kind: ErrorKind,
    pub message: String,
}

/// Makes steps durable. The daemon implements it over the store.
#[async_trait]
pub trait StepPersister: Send + Sync {
    /// Stores one step. `cancel` is the run's cancellation for normal steps and a fresh,
    /// never-cancelled token for an interrupted step, so an interrupt cannot also abort
    /// saving the partial output.
    async fn persist_step(&self, step: PersistedStep, cancel: Cancel) -> Result<(), PersistError>;

    /// The loop published `retry` (a [`LiveEvent::Retry`]) and is about to wait before the
    /// next attempt: records it as the chat's state, for clients that were not there to see
    /// it live. Awaited before the wait, so that it lands ahead of the step the next attempt
    /// commits. A failure is the implementor's to report; the run goes on.
    async fn record_retry(&self, _retry: &LiveEvent) {}

    /// Asked after a committed step when the run would call the model again: a [`Halt`]
    /// ends the run there instead.
    async fn may_go_on(&self) -> Result<(), Halt> {
        Ok(())
    }
}
