//! The trace context of the request being handled, recorded with the run it starts.
//!
//! The HTTP edge runs each request in [`scope`] with the W3C `traceparent` the request
//! carried (or none). A transition that starts a run stores it as the run's parent, a
//! message that is queued keeps its own until it runs, and [`crate::Store::start_run`]
//! hands it, with the span of the run a dead owner left, to whichever worker runs the chat:
//! on this replica or another. Like a request id, it is context, never a decision: the
//! store only keeps what it is given.

use std::future::Future;

use crate::status::{ChatStatus, Transition, Trigger};

tokio::task_local! {
    static TRACE_PARENT: Option<String>;
}

/// Runs `future` as the handling of a request whose trace context is `traceparent`.
pub async fn scope<F: Future>(traceparent: Option<String>, future: F) -> F::Output {
    TRACE_PARENT.scope(traceparent, future).await
}

/// The trace context of the request being handled, if it carried one.
pub(crate) fn current() -> Option<String> {
    TRACE_PARENT.try_with(Clone::clone).ok().flatten()
}

/// The trace context of a chat's run, as [`crate::Store::start_run`] reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunTrace {
    /// The `traceparent` of the request that started the run (or queued its message).
    pub parent: Option<String>,
    /// The `traceparent` of the run's own span, as its worker recorded it
    /// ([`crate::Store::record_run_trace`]): what a worker taking the chat over links to.
    pub run: Option<String>,
}

/// Whether a move starts a new run on behalf of the request making it: an API transition
/// that takes an idle (or waiting-for-the-client) chat to `running`. A message sent to a
/// running chat is queued, and its run starts later with the queued message's context.
pub(crate) fn starts_run(transition: Transition, from: ChatStatus, to: ChatStatus) -> bool {
    transition.trigger() == Trigger::Api && !from.is_runnable() && to.is_runnable()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_api_move_from_rest_to_running_starts_a_run() {
        use ChatStatus::*;
        assert!(starts_run(Transition::SendMessage, Waiting, Running));
        assert!(starts_run(Transition::RetryRun, Error, Running));
        assert!(starts_run(
            Transition::SubmitToolResults,
            RequiresAction,
            Running
        ));
        assert!(
            !starts_run(Transition::SendMessage, Running, Running),
            "queued"
        );
        assert!(!starts_run(Transition::SendMessage, Running, Interrupting));
        assert!(
            !starts_run(Transition::FinishRun, Running, Running),
            "the worker's"
        );
        assert!(!starts_run(Transition::Interrupt, RequiresAction, Waiting));
    }

    #[tokio::test]
    async fn the_context_is_known_inside_its_scope_only() {
        assert_eq!(current(), None);
        let seen = scope(Some("00-ab-cd-01".into()), async { current() }).await;
        assert_eq!(seen.as_deref(), Some("00-ab-cd-01"));
    }
}
