//! Panics and crashes on request, in debug builds only, so that tests of the running daemon
//! can prove that a panic inside a run ends it cleanly (the loop runs in a task of its own,
//! see `run_guarded`) and that a crash at a precise point of a run is recovered from without
//! anything lost or duplicated. Release builds have none of this.
//!
//! With `KEEL_DEBUG_PANIC` set in the daemon's environment every model is wrapped: a call
//! whose last user message contains [`PANIC_NOW`] panics as it starts; one whose last user
//! message contains [`PANIC_ON_INTERRUPT`] streams nothing and panics once the run is
//! cancelled, as an adapter with a bug in its cancellation path would.
//!
//! With `KEEL_DEBUG_ABORT` naming an [`AbortPoint`], the process aborts (no destructor, no
//! flush, no release: to the database the same as `kill -9`) the first time a run reaches
//! that point, so a test need not race a kill against the run.
//!
//! With `KEEL_DEBUG_DROP_NOTICES` set, the workers never hear another replica's change
//! notices (as when every `NOTIFY` is lost), only that notices were missed: what reaches a
//! run then comes through its lease renewals and the resynchronisation after a lost
//! `LISTEN` connection.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use keel_core::{
    CallOptions, Cancel, EventStream, LanguageModel, Message, ModelCall, ProviderError, Role,
    StreamEvent,
};
use keel_store::RemoteNotice;

/// The environment variable that switches the wrapper on.
pub(crate) const SWITCH: &str = "KEEL_DEBUG_PANIC";
/// Panics when the call starts.
pub(crate) const PANIC_NOW: &str = "#panic-now";
/// Panics when the run is interrupted.
pub(crate) const PANIC_ON_INTERRUPT: &str = "#panic-on-interrupt";

/// The environment variable naming the point at which the process aborts.
pub(crate) const ABORT_SWITCH: &str = "KEEL_DEBUG_ABORT";

/// Where a run may be made to crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AbortPoint {
    /// A step was committed and the run not yet ended (`finish_run` and its kin not called).
    StepCommitted,
    /// A compaction summary streamed completely into the live-part log and was not committed.
    SummaryLogged,
    /// A compaction summary was committed and the run not yet ended.
    SummaryCommitted,
}

impl AbortPoint {
    fn name(self) -> &'static str {
        match self {
            Self::StepCommitted => "step_committed",
            Self::SummaryLogged => "summary_logged",
            Self::SummaryCommitted => "summary_committed",
        }
    }
}

/// Aborts the process when `KEEL_DEBUG_ABORT` names `point`.
pub(crate) fn abort_at(point: AbortPoint) {
    if std::env::var(ABORT_SWITCH).is_ok_and(|named| named == point.name()) {
        tracing::warn!(point = point.name(), "aborting on request");
        std::process::abort();
    }
}

/// The environment variable that drops other replicas' notices.
pub(crate) const DROP_NOTICES_SWITCH: &str = "KEEL_DEBUG_DROP_NOTICES";

/// `notices` without its changes when `KEEL_DEBUG_DROP_NOTICES` is set.
pub(crate) fn drop_remote_changes(
    notices: BoxStream<'static, RemoteNotice>,
) -> BoxStream<'static, RemoteNotice> {
    if std::env::var_os(DROP_NOTICES_SWITCH).is_none() {
        return notices;
    }
    notices
        .filter(|notice| std::future::ready(matches!(notice, RemoteNotice::Missed)))
        .boxed()
}

/// `model`, wrapped when the switch is set.
pub(crate) fn wrap(model: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
    if std::env::var_os(SWITCH).is_some() {
        Arc::new(Panicking(model))
    } else {
        model
    }
}

struct Panicking(Arc<dyn LanguageModel>);

fn last_user_text(call: &ModelCall) -> String {
    call.messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(Message::text)
        .unwrap_or_default()
}

#[async_trait]
impl LanguageModel for Panicking {
    fn provider(&self) -> &str {
        self.0.provider()
    }

    fn model(&self) -> &str {
        self.0.model()
    }

    fn supports_prefill(&self, options: &CallOptions) -> bool {
        self.0.supports_prefill(options)
    }

    fn refuse_prefill(&self) -> bool {
        self.0.refuse_prefill()
    }

    fn requires_signed_reasoning(&self, options: &CallOptions) -> bool {
        self.0.requires_signed_reasoning(options)
    }

    fn prepare_prompt(&self, messages: &mut [Message]) {
        self.0.prepare_prompt(messages);
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        let text = last_user_text(&call);
        // The panics are the point: they stand in for a bug in an adapter.
        if text.contains(PANIC_NOW) {
            panic!("injected panic as the call started");
        }
        if text.contains(PANIC_ON_INTERRUPT) {
            return Ok(Box::pin(futures::stream::once(panic_when_cancelled(
                cancel,
            ))));
        }
        self.0.stream(call, cancel).await
    }
}

async fn panic_when_cancelled(cancel: Cancel) -> StreamEvent {
    cancel.cancelled().await;
    panic!("injected panic after the interrupt");
}
