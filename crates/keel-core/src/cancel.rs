//! Cancellation that remembers why it happened.
//!
//! A run can be stopped for two reasons that must be handled differently: the user
//! interrupted it (keep the partial step, mark it interrupted, land in `waiting`) or the
//! server is shutting down (hand the chat to another worker). [`Cancel`] is a cloneable token
//! whose first cancellation fixes the cause; later cancellations keep the first cause.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use crate::on_wake::on_wake;

/// Why a run was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelCause {
    /// The user asked the run to stop.
    Interrupted,
    /// The process is shutting down, or lost ownership of the chat.
    Shutdown,
}

/// A cancellation token carrying a [`CancelCause`].
#[derive(Debug, Clone)]
pub struct Cancel {
    token: CancellationToken,
    /// This token's cause cell first, then its ancestors' (nearest first).
    causes: Vec<Arc<OnceLock<CancelCause>>>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    pub fn new() -> Self {
        Self {
            token: CancellationToken::new(),
            causes: vec![Arc::new(OnceLock::new())],
        }
    }

    /// A child that is cancelled when this one is, and can also be cancelled on its own (one
    /// streaming attempt, one tool call) without cancelling the parent. A child cancelled
    /// through an ancestor reports that ancestor's cause.
    pub fn child(&self) -> Self {
        let mut causes = Vec::with_capacity(self.causes.len() + 1);
        causes.push(Arc::new(OnceLock::new()));
        causes.extend(self.causes.iter().cloned());
        Self {
            token: self.token.child_token(),
            causes,
        }
    }

    /// Cancels with `cause`. The first cause set wins.
    pub fn cancel(&self, cause: CancelCause) {
        if let Some(own) = self.causes.first() {
            let _ = own.set(cause);
        }
        self.token.cancel();
    }

    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The cause, once cancelled.
    pub fn cause(&self) -> Option<CancelCause> {
        if !self.token.is_cancelled() {
            return None;
        }
        // An ancestor's cause wins over the child's own: a child cancelled as collateral of
        // a user interrupt is part of that interrupt. Without any recorded cause the token
        // counts as shut down: only an explicit user interrupt may mark a step interrupted.
        self.causes
            .iter()
            .rev()
            .find_map(|cell| cell.get().copied())
            .or(Some(CancelCause::Shutdown))
    }

    pub fn is_interrupted(&self) -> bool {
        self.cause() == Some(CancelCause::Interrupted)
    }

    /// Completes when cancelled.
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }

    /// Completes when cancelled, owning what it waits on: a loop pins it once and polls it
    /// on every turn, where a fresh [`Self::cancelled`] each turn would register and drop a
    /// waiter every time. A turn that was not woken by the cancellation costs an atomic
    /// load, not a look at the token's state under its lock ([`on_wake`]).
    pub fn cancelled_owned(&self) -> impl Future<Output = ()> + Send + 'static {
        on_wake(self.token.clone().cancelled_owned())
    }

    /// The underlying token, for libraries that take one.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_owned_wait_completes_when_an_ancestor_is_cancelled() {
        let parent = Cancel::new();
        let child = parent.child();
        let mut wait = std::pin::pin!(child.cancelled_owned());
        assert!(futures::poll!(wait.as_mut()).is_pending());
        parent.cancel(CancelCause::Interrupted);
        wait.await;
        assert_eq!(child.cause(), Some(CancelCause::Interrupted));
    }

    #[test]
    fn first_cause_wins() {
        let c = Cancel::new();
        assert_eq!(c.cause(), None);
        c.cancel(CancelCause::Interrupted);
        c.cancel(CancelCause::Shutdown);
        assert_eq!(c.cause(), Some(CancelCause::Interrupted));
    }

    #[test]
    fn child_reports_parent_cause_and_parent_survives_child() {
        let parent = Cancel::new();
        let attempt = parent.child();
        attempt.cancel(CancelCause::Shutdown);
        assert!(!parent.is_cancelled());

        let attempt = parent.child();
        parent.cancel(CancelCause::Interrupted);
        assert!(attempt.is_cancelled());
        assert!(attempt.is_interrupted());
    }

    #[test]
    fn ancestor_cause_wins_over_childs_own() {
        let parent = Cancel::new();
        let child = parent.child();
        child.cancel(CancelCause::Shutdown);
        parent.cancel(CancelCause::Interrupted);
        assert!(child.is_interrupted());
    }
}
