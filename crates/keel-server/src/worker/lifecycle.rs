//! The run lifecycle in one place: claiming runnable chats and the transition that ends
//! each run — finish, finish an interruption, hand client-side calls over, release, or
//! fail. Their leases are kept alive (and interrupts heard through renewals) by
//! [`super::leases`], for all runs of the process together.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use keel_agent::{PersistError, RunError, RunOutcome};
use keel_core::ErrorKind;
use keel_store::{Chat, LastError, Lease, Next, StoreError};

use crate::metrics::StepLabels;
use crate::worker::Shared;
use crate::worker::run;
use crate::worker::runs::StopReason;

/// Claims as many runnable chats as there are free workers and starts them. The store
/// hands out a bounded batch per claim, and a burst of new messages wakes the claims only
/// once: it claims again until nothing is left or every worker is busy.
pub(super) async fn claim(shared: &Arc<Shared>) {
    loop {
        let free = shared
            .config
            .runs
            .workers
            .saturating_sub(shared.active_count());
        if free == 0 {
            shared.claims_deferred.store(true, Ordering::Relaxed);
            return;
        }
        let leases = match shared.store.acquire(&shared.worker_id, free).await {
            Ok(leases) => leases,
            Err(error) => {
                tracing::warn!(%error, "claiming runnable chats failed");
                return;
            }
        };
        if leases.is_empty() {
            return;
        }
        for lease in leases {
            start(shared, lease);
        }
    }
}

/// Starts the run of a claimed chat in a task of its own.
fn start(shared: &Arc<Shared>, lease: Lease) {
    // A run of this chat that an edit superseded may still be unwinding here: the new run
    // takes the chat's place at once (notices reach it, its lease is renewed) and starts
    // streaming once the old one is gone.
    let (finished, _) = tokio::sync::watch::channel(());
    let (slot, previous) = shared.register(&lease, &finished);
    tokio::spawn(run::run_chat(
        shared.clone(),
        lease,
        slot,
        finished,
        previous,
    ));
}

/// Ends a run with the transition its outcome calls for: finish (the queue head may start
/// next, on the same lease), finish an interruption, hand client-side calls over, release
/// for another worker, or fail. Returns the lease to continue with when the queue head
/// starts next.
pub(super) async fn end(
    shared: &Arc<Shared>,
    chat: &Chat,
    held: &Lease,
    outcome: Result<RunOutcome, RunError>,
    stop: &Arc<Mutex<StopReason>>,
) -> Option<Lease> {
    let chat_id = chat.id;
    let provider = shared
        .models
        .get(&chat.model)
        .map(|m| m.provider.clone())
        .unwrap_or_default();
    let count = |outcome: &str| {
        shared
            .metrics
            .steps
            .get_or_create(&StepLabels {
                provider: provider.clone(),
                model: chat.model.clone(),
                outcome: outcome.to_owned(),
            })
            .inc();
    };
    // A reply of an untitled chat was committed: name the chat, off the reply's path.
    let replied = matches!(
        outcome,
        Ok(RunOutcome::Completed { .. } | RunOutcome::Interrupted)
    );
    if replied && chat.title.is_none() {
        super::titles::spawn(shared, chat_id, &chat.model);
    }
    let next = match outcome {
        Ok(RunOutcome::Completed { .. }) => {
            count("completed");
            // With the runs of other chats that complete meanwhile, in one transaction.
            shared.log.finish_run(held.clone()).await
        }
        Ok(RunOutcome::Interrupted) => {
            count("interrupted");
            shared.store.finish_interruption(held).await
        }
        Ok(RunOutcome::PendingToolCalls(calls)) => {
            count("requires_action");
            let timeout = chrono::Duration::milliseconds(
                i64::try_from(shared.config.runs.pending_action_timeout_ms).unwrap_or(i64::MAX),
            );
            shared
                .store
                .enter_requires_action(held, calls, Some(timeout))
                .await
        }
        Err(RunError::Cancelled) => {
            let mut reason = *stop.lock().unwrap_or_else(PoisonError::into_inner);
            if reason == StopReason::None && shared.shutdown.is_cancelled() {
                reason = StopReason::Shutdown;
            }
            match reason {
                StopReason::Shutdown => {
                    count("released");
                    shared
                        .store
                        .release_on_shutdown(held)
                        .await
                        .map(|()| Next::Idle)
                }
                // The chat was edited, deleted or taken over: its new state wins; write nothing.
                StopReason::Superseded | StopReason::LostLease | StopReason::None => Ok(Next::Idle),
            }
        }
        Err(RunError::Persist(error)) if is_ownership_loss(&error) => Ok(Next::Idle),
        Err(RunError::Persist(error)) if is_transient(&error) => {
            // The database failed for a moment: the chat is not broken. Give it back (still
            // `running`, its live-part log kept) so a claim resumes the step shortly.
            count("released");
            tracing::warn!(chat = %chat_id, %error, "the database failed mid-run; releasing the chat to resume it");
            tokio::time::sleep(TRANSIENT_BACKOFF).await;
            shared
                .store
                .release_on_shutdown(held)
                .await
                .map(|()| Next::Idle)
        }
        Err(error) => {
            count("error");
            let failure = failure_of(&error);
            tracing::warn!(chat = %chat_id, kind = %failure.kind, message = %failure.message,
                provider = ?failure.provider, url = ?failure.url, "run failed");
            shared
                .store
                .fail_run(held, failure)
                .await
                .map(|()| Next::Idle)
        }
    };
    match next {
        Ok(Next::Continue { lease, .. }) if !shared.shutdown.is_cancelled() => Some(lease),
        Ok(_) => None,
        Err(error) => {
            if !matches!(
                error,
                StoreError::LostOwnership { .. }
                    | StoreError::Fenced { .. }
                    | StoreError::NotFound { .. }
            ) {
                tracing::warn!(chat = %chat_id, %error, "ending the run failed");
            }
            None
        }
    }
}

/// How long a run waits before giving its chat back after a transient database failure, so
/// a database that is down is not hammered by immediate re-claims.
const TRANSIENT_BACKOFF: Duration = Duration::from_secs(1);

fn is_transient(error: &PersistError) -> bool {
    match error {
        PersistError::Other(inner) => inner
            .downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_transient),
        PersistError::Interrupted => false,
    }
}

fn is_ownership_loss(error: &PersistError) -> bool {
    match error {
        PersistError::Other(inner) => matches!(
            inner.downcast_ref::<StoreError>(),
            Some(
                StoreError::LostOwnership { .. }
                    | StoreError::Fenced { .. }
                    | StoreError::NotFound { .. }
            )
        ),
        PersistError::Interrupted => false,
    }
}

/// What a failed run stores as the chat's `last_error`: the kind, the message, and for a
/// provider's failure the provider's name and the address of the request.
fn failure_of(error: &RunError) -> LastError {
    let from_provider = |e: &keel_core::ProviderError, message: String| LastError {
        provider: Some(e.provider.clone()).filter(|p| !p.is_empty()),
        url: e.url.clone(),
        ..LastError::new(e.kind, message)
    };
    match error {
        RunError::Provider(e) => from_provider(e, e.message.clone()),
        RunError::StreamInterrupted {
            cause, attempts, ..
        } => from_provider(
            cause,
            format!(
                "stream_interrupted after {attempts} attempts: {}",
                cause.message
            ),
        ),
        RunError::Persist(e) => LastError::new(
            ErrorKind::Unknown,
            format!("persisting the step failed: {e}"),
        ),
        RunError::Cancelled => LastError::new(ErrorKind::Cancelled, "cancelled"),
        RunError::Halted(halt) => LastError::new(halt.kind, halt.message.clone()),
        RunError::ContextStillTooLong { .. } | RunError::Compaction(_) => {
            LastError::new(ErrorKind::ContextOverflow, error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_core::Cancel;

    use super::claim;
    use crate::config::{Config, FileConfig, Overrides, ProcessEnv};
    use crate::hub::Hub;
    use crate::metrics::Metrics;
    use crate::models::ModelRegistry;
    use crate::tools::ToolSet;
    use crate::worker::WorkerPool;
    use crate::worker::test_support::{new_chat, store};

    #[tokio::test]
    async fn one_wake_up_claims_every_runnable_chat_batch_after_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        // More chats than the store hands out in one claim.
        for _ in 0..250 {
            new_chat(&store).await;
        }
        let mut file: FileConfig =
            toml::from_str("[runs]\nworkers = 1000\ntitles = false").unwrap();
        file.tools.workspace = dir.path().join("workspace");
        let config =
            Arc::new(Config::resolve(file, None, &Overrides::default(), &ProcessEnv).unwrap());
        let metrics = Arc::new(Metrics::new());
        let tools = Arc::new(ToolSet::build(&config, &metrics, false).await.unwrap());
        let pool = WorkerPool::new(
            store.clone(),
            Arc::new(Hub::new()),
            metrics,
            ModelRegistry::from_handles(Vec::new(), "m", None),
            tools,
            config,
            Cancel::new(),
        );
        claim(&pool.shared).await;
        // Every chat went to this worker; none is left for another.
        assert!(store.acquire("other", 1000).await.unwrap().is_empty());
    }
}
