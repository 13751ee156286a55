//! The process's one renewer of leases: every lease/3 the leases of *all* runs of this
//! process are renewed in one transaction ([`keel_store::Store::renew_leases`]), each fenced
//! on its own, instead of one transaction per run.
//!
//! What each run's outcome calls for is [`after_renewal`]:
//!
//! | outcome of the renewal | the run |
//! | --- | --- |
//! | renewed, chat `running` | keeps the renewed lease |
//! | renewed, chat `interrupting` | keeps it and is interrupted (an interrupt whose notices were all lost is seen here) |
//! | transient failure (of the run's renewal or the whole transaction) | keeps its lease; the next period tries again |
//! | refused (lease taken over, chat edited or deleted, run over) | is stopped as having lost its lease |
//!
//! What a renewal learns reaches only the runs of the task that holds the lease, never a
//! run of the chat that took its place ([`super::runs`]). A renewal changes nothing a
//! client sees, so it wakes no follower of the chat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use keel_store::{ChatId, ChatStatus, Lease, Store, StoreError};

use crate::worker::Shared;
use crate::worker::runs::{StopReason, Task};

/// The run's lease, renewed in the background and read by every write.
pub(crate) type SharedLease = Arc<Mutex<Lease>>;

pub(crate) fn current(lease: &SharedLease) -> Lease {
    // Each critical section is one clone or assignment, so a poisoned lock is still whole.
    lease.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// What a run's renewal outcome calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Renewal {
    /// The lease holds: keep `lease`; `interrupt` when the chat is being interrupted.
    Renewed { lease: Lease, interrupt: bool },
    /// The database failed for a moment: the lease may well still be ours.
    Retry,
    /// The lease is gone: stop the run.
    Lost,
}

/// The decision for one run (the table in the module doc).
pub(super) fn after_renewal(outcome: Result<Lease, StoreError>) -> Renewal {
    match outcome {
        Ok(lease) => Renewal::Renewed {
            interrupt: lease.status == ChatStatus::Interrupting,
            lease,
        },
        Err(error) if error.is_transient() => Renewal::Retry,
        Err(_) => Renewal::Lost,
    }
}

/// What reaches the run holding a lease when its renewal comes back: nothing when the run
/// ended or moved on to a fresh lease (the queue head starting) while the transaction ran.
/// It gave its chat back itself, so a refused renewal says nothing about it, and a renewal
/// that read `interrupting` read the interrupt of the run that ended, not of the run that
/// took the fresh lease.
pub(super) fn for_run(moved_on: bool, outcome: Result<Lease, StoreError>) -> Option<Renewal> {
    (!moved_on).then(|| after_renewal(outcome))
}

/// The leases of this process's runs, each held while its run is under way.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    runs: Mutex<HashMap<u64, Entry>>,
    next: std::sync::atomic::AtomicU64,
}

/// One held lease.
#[derive(Debug)]
struct Entry {
    lease: SharedLease,
    /// The task whose runs the renewal's outcome reaches.
    task: Task,
    /// The run's end transition is under way ([`Held::ending`]).
    ending: bool,
}

/// Keeps a run's lease renewed until dropped.
pub(crate) struct Held<'a> {
    leases: &'a Leases,
    key: u64,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.leases.lock().remove(&self.key);
    }
}

impl Held<'_> {
    /// The run is about to end (finish, fail, hand calls over). Its end transition gives
    /// the chat up, so a renewal refused from here on was refused because of it, not
    /// because the chat was taken: it stops nothing and the lease stays held, for the
    /// queue head that may start next on it ([`Held::continuing`]).
    pub(crate) fn ending(&self) {
        self.mark_ending(true);
    }

    /// The run goes on with the queue head, on the lease its end transition returned.
    pub(crate) fn continuing(&self) {
        self.mark_ending(false);
    }

    fn mark_ending(&self, ending: bool) {
        if let Some(entry) = self.leases.lock().get_mut(&self.key) {
            entry.ending = ending;
        }
    }
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        // Each critical section is one map operation; a poisoned map is still whole.
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews `lease`, held by the runs of `task`, with every other run's until the
    /// returned guard is dropped.
    pub(crate) fn hold(&self, lease: SharedLease, task: Task) -> Held<'_> {
        let key = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().insert(
            key,
            Entry {
                lease,
                task,
                ending: false,
            },
        );
        Held { leases: self, key }
    }

    /// Renews every held lease in one transaction; returns each run's chat, its task and
    /// what its outcome calls for. A renewed lease is stored for its run unless the run moved on to
    /// another lease meanwhile (the queue head starting on a fresh one) or began to end; a
    /// lost one is no longer renewed.
    pub(super) async fn renew(&self, store: &dyn Store) -> Vec<(ChatId, Task, Renewal)> {
        let held: Vec<(u64, SharedLease, Task, Lease)> = self
            .lock()
            .iter()
            .map(|(key, entry)| {
                let lease = &entry.lease;
                (*key, lease.clone(), entry.task.clone(), current(lease))
            })
            .collect();
        if held.is_empty() {
            return Vec::new();
        }
        let leases: Vec<Lease> = held.iter().map(|(_, _, _, lease)| lease.clone()).collect();
        let outcomes = match store.renew_leases(&leases).await {
            Ok(outcomes) => outcomes,
            Err(error) => {
                tracing::warn!(%error, runs = held.len(), "renewing the leases failed; retrying");
                return held
                    .into_iter()
                    .map(|(_, _, task, lease)| (lease.chat_id, task, Renewal::Retry))
                    .collect();
            }
        };
        let mut decisions = Vec::with_capacity(held.len());
        for ((key, shared, task, sent), outcome) in held.into_iter().zip(outcomes) {
            // Ended, ending, or on to a fresh lease: nothing the renewal says is about the
            // run that holds the entry now.
            let moved_on = self
                .lock()
                .get(&key)
                .is_none_or(|entry| entry.ending || current(&shared) != sent);
            if let (false, Err(error)) = (moved_on, &outcome) {
                tracing::warn!(chat = %sent.chat_id, %error, "renewing the lease failed");
            }
            let Some(decision) = for_run(moved_on, outcome) else {
                continue;
            };
            match &decision {
                Renewal::Renewed { lease, .. } => {
                    let mut slot = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    if slot.worker_id == sent.worker_id
                        && slot.history_version == sent.history_version
                    {
                        *slot = lease.clone();
                    }
                }
                Renewal::Lost => {
                    self.lock().remove(&key);
                }
                Renewal::Retry => {}
            }
            decisions.push((sent.chat_id, task, decision));
        }
        decisions
    }
}

/// Renews the leases of every run of this process each lease/3 until the process stops.
pub(super) async fn renew_all(shared: Arc<Shared>) {
    let period = shared.config.runs.lease() / 3;
    loop {
        tokio::time::sleep(period).await;
        for (chat_id, task, decision) in shared.leases.renew(shared.store.as_ref()).await {
            match decision {
                Renewal::Renewed { interrupt, .. } => {
                    shared.metrics.lease_renewals.inc();
                    if interrupt {
                        // Seen here even when every change notice of the interrupt was lost
                        // (another replica's NOTIFY during a reconnect, a lagging subscriber).
                        shared.runs.interrupt_of(chat_id, &task);
                    }
                }
                Renewal::Retry => {}
                Renewal::Lost => {
                    shared.metrics.lost_leases.inc();
                    shared.runs.stop_of(chat_id, &task, StopReason::LostLease);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::test_support::{claimed, store};

    fn lease(status: ChatStatus) -> Lease {
        Lease {
            chat_id: uuid::Uuid::new_v4(),
            status,
            worker_id: "w.1".into(),
            history_version: 0,
            expires_at: chrono::Utc::now(),
            granted_version: 1,
        }
    }

    #[test]
    fn each_outcome_calls_for_its_row_of_the_table() {
        let running = lease(ChatStatus::Running);
        assert_eq!(
            after_renewal(Ok(running.clone())),
            Renewal::Renewed {
                lease: running,
                interrupt: false
            }
        );
        let interrupting = lease(ChatStatus::Interrupting);
        assert!(matches!(
            after_renewal(Ok(interrupting)),
            Renewal::Renewed {
                interrupt: true,
                ..
            }
        ));
        let chat_id = uuid::Uuid::new_v4();
        let lost = StoreError::LostOwnership {
            chat_id,
            worker_id: "w.1".into(),
        };
        assert_eq!(after_renewal(Err(lost)), Renewal::Lost);
        let fenced = StoreError::Fenced {
            chat_id,
            expected: 0,
            actual: 1,
        };
        assert_eq!(after_renewal(Err(fenced)), Renewal::Lost);
        assert_eq!(
            after_renewal(Err(StoreError::NotFound { what: "chat" })),
            Renewal::Lost
        );
    }

    #[test]
    fn a_renewal_that_returns_after_the_run_moved_on_reaches_nothing() {
        let interrupting = lease(ChatStatus::Interrupting);
        assert!(matches!(
            for_run(false, Ok(interrupting.clone())),
            Some(Renewal::Renewed {
                interrupt: true,
                ..
            })
        ));
        // The interrupt it read stopped the run before; the queue head runs on a fresh lease.
        assert_eq!(for_run(true, Ok(interrupting)), None);
        assert_eq!(
            for_run(true, Err(StoreError::NotFound { what: "chat" })),
            None
        );
    }

    #[tokio::test]
    async fn a_renewal_refused_by_the_runs_own_end_stops_nothing_and_keeps_the_lease_held() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        let lease = claimed(&store).await;
        let leases = Leases::default();
        let (_finished, task) = tokio::sync::watch::channel(());
        let held = leases.hold(lease.clone(), task);
        // The run's end transition commits before the renewal reads the chat.
        held.ending();
        store.finish_run(&current(&lease)).await.unwrap();
        assert!(leases.renew(store.as_ref()).await.is_empty());
        // Still held: the queue head may go on with it.
        held.continuing();
        let after = leases.renew(store.as_ref()).await;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].2, Renewal::Lost, "the chat is no longer running");
    }

    #[tokio::test]
    async fn one_round_renews_every_held_lease_and_drops_a_lost_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir).await;
        let (a, b, gone) = (
            claimed(&store).await,
            claimed(&store).await,
            claimed(&store).await,
        );
        let leases = Leases::default();
        let (_finished, task) = tokio::sync::watch::channel(());
        let (held_a, _held_b, _held_gone) = (
            leases.hold(a.clone(), task.clone()),
            leases.hold(b.clone(), task.clone()),
            leases.hold(gone.clone(), task.clone()),
        );
        let before = current(&a);
        store.delete_chat(current(&gone).chat_id).await.unwrap();
        let decisions: HashMap<ChatId, Renewal> = leases
            .renew(store.as_ref())
            .await
            .into_iter()
            .map(|(chat, _, decision)| (chat, decision))
            .collect();
        assert_eq!(decisions.len(), 3);
        assert!(matches!(
            decisions[&before.chat_id],
            Renewal::Renewed {
                interrupt: false,
                ..
            }
        ));
        assert!(current(&a).expires_at >= before.expires_at);
        assert_eq!(decisions[&current(&gone).chat_id], Renewal::Lost);
        // The lost lease and a finished run's are renewed no more.
        drop(held_a);
        let next: Vec<ChatId> = leases
            .renew(store.as_ref())
            .await
            .into_iter()
            .map(|(chat, _, _)| chat)
            .collect();
        assert_eq!(next, vec![current(&b).chat_id]);
    }
}
