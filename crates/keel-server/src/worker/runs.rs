//! The runs of this process, one entry per chat, and what reaches them from outside the
//! loop: change notices, lease renewals, shutdown.
//!
//! A chat may have two runs here at once: one an edit superseded, still unwinding, and the
//! one that claimed the chat after it. Everything that reaches a run says which run it is
//! for, so that the old run's last notices and its failing lease renewals never stop or
//! interrupt the new one:
//!
//! | what | reaches |
//! | --- | --- |
//! | a notice of a newer history version (an edit) or of a deletion | the chat's run: it is superseded |
//! | a notice of an older history version | nothing: it was sent before the run's claim (the superseded run's last parts, routed late) |
//! | a notice of the run's history version saying `interrupting`, as new as the run's lease | the chat's run: interrupted |
//! | a notice of the run's history version saying `interrupting`, older than the run's lease | nothing: the interrupt was the previous run's (the queue head started after it) |
//! | a lease renewal that saw `interrupting`, or that lost the lease | the run of the task renewing, if it is still the chat's run and still holds the lease renewed |

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use keel_core::{Cancel, CancelCause};
use keel_store::{ChangeNotice, ChatId, ChatStatus, Lease};
use tokio::sync::watch;

/// Why a run was stopped from outside the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    None,
    /// The process is shutting down: release the chat for another worker.
    Shutdown,
    /// The chat was edited or deleted: its new state wins.
    Superseded,
    /// Another worker took the chat over.
    LostLease,
}

/// Held by the task running a chat for as long as it runs; a later run of the same chat
/// (after an edit superseded this one) waits for it to close before it starts.
pub(crate) type Finished = watch::Sender<()>;

/// Which task runs a run: the receiving end of its [`Finished`].
pub(crate) type Task = watch::Receiver<()>;

/// A run in progress on this process.
struct ActiveRun {
    /// Tells this run apart from a later run of the same chat.
    id: u64,
    cancel: Cancel,
    stop: Arc<Mutex<StopReason>>,
    history_version: i64,
    /// The chat's version when the run's lease was granted (see [`Lease::granted_version`]).
    granted_version: i64,
    /// Closed when the task running the chat ends (see [`Finished`]).
    finished: Task,
}

/// A registered run's identity and controls.
pub(crate) struct RunSlot {
    pub id: u64,
    pub cancel: Cancel,
    pub stop: Arc<Mutex<StopReason>>,
}

/// What a change notice asks of the chat's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routed {
    Supersede,
    Interrupt,
    Nothing,
}

/// The decision of the module's table for a notice and a run at `history_version` whose
/// lease was granted at `granted_version`. A run that ends hands the queue head to the next
/// run on the same history version; an interrupt of the run before it may reach this process
/// only afterwards (another replica's notice comes through `LISTEN`, later than the renewal
/// that already stopped that run), and must not stop the queue head's run.
pub(crate) fn route(notice: &ChangeNotice, history_version: i64, granted_version: i64) -> Routed {
    if notice.deleted || notice.history_version > history_version {
        Routed::Supersede
    } else if notice.history_version == history_version
        && notice.status == ChatStatus::Interrupting
        && notice.version >= granted_version
    {
        Routed::Interrupt
    } else {
        Routed::Nothing
    }
}

/// The runs of this process by chat.
#[derive(Default)]
pub(crate) struct ActiveRuns {
    runs: Mutex<HashMap<ChatId, ActiveRun>>,
    next: AtomicU64,
}

impl ActiveRuns {
    fn lock(&self) -> MutexGuard<'_, HashMap<ChatId, ActiveRun>> {
        // Each critical section is one map operation; a poisoned map is still whole.
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a run of the chat by the task holding `finished`, its cancellation a child
    /// of `parent`. Returns its slot and, when another task still runs the chat
    /// (superseded, unwinding), what closes when that task ends.
    pub(crate) fn register(
        &self,
        lease: &Lease,
        finished: &Finished,
        parent: &Cancel,
    ) -> (RunSlot, Option<Task>) {
        let chat = lease.chat_id;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = parent.child();
        let stop = Arc::new(Mutex::new(StopReason::None));
        let previous = self.lock().insert(
            chat,
            ActiveRun {
                id,
                cancel: cancel.clone(),
                stop: stop.clone(),
                history_version: lease.history_version,
                granted_version: lease.granted_version,
                finished: finished.subscribe(),
            },
        );
        let previous = previous.filter(|run| !run.finished.same_channel(&finished.subscribe()));
        if let Some(run) = &previous {
            // A new claim means the old run lost the chat (an edit released it); stop it
            // even if the notice that says so has not been routed yet.
            stop_with(run, StopReason::Superseded);
        }
        (
            RunSlot { id, cancel, stop },
            previous.map(|run| run.finished),
        )
    }

    /// Interrupts the chat's run if `task` runs it: a renewal of a superseded run's lease
    /// never reaches the run that took its place.
    pub(crate) fn interrupt_of(&self, chat: ChatId, task: &Task) {
        if let Some(run) = self.lock().get(&chat)
            && run.finished.same_channel(task)
        {
            run.cancel.cancel(CancelCause::Interrupted);
        }
    }

    /// Stops the chat's run if `task` runs it.
    pub(crate) fn stop_of(&self, chat: ChatId, task: &Task, reason: StopReason) {
        if let Some(run) = self.lock().get(&chat)
            && run.finished.same_channel(task)
        {
            stop_with(run, reason);
        }
    }

    /// Applies a change notice to the chat's run, if any.
    pub(crate) fn route(&self, notice: &ChangeNotice) {
        if let Some(run) = self.lock().get(&notice.chat_id) {
            match route(notice, run.history_version, run.granted_version) {
                Routed::Supersede => stop_with(run, StopReason::Superseded),
                Routed::Interrupt => run.cancel.cancel(CancelCause::Interrupted),
                Routed::Nothing => {}
            }
        }
    }

    /// Forgets a finished run, unless a later run of the chat already took its place.
    pub(crate) fn forget(&self, chat: ChatId, run: u64) {
        let mut runs = self.lock();
        if runs.get(&chat).is_some_and(|r| r.id == run) {
            runs.remove(&chat);
        }
    }

    /// The process stops: every run not already stopping releases its chat.
    pub(crate) fn shut_down(&self) {
        for run in self.lock().values() {
            let mut stop = run.stop.lock().unwrap_or_else(PoisonError::into_inner);
            if *stop == StopReason::None {
                *stop = StopReason::Shutdown;
            }
        }
    }

    pub(crate) fn chats(&self) -> Vec<ChatId> {
        self.lock().keys().copied().collect()
    }

    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }
}

/// Stops a run from outside the loop: the first reason given stands.
fn stop_with(run: &ActiveRun, reason: StopReason) {
    let mut stop = run.stop.lock().unwrap_or_else(PoisonError::into_inner);
    if *stop == StopReason::None {
        *stop = reason;
    }
    drop(stop);
    run.cancel.cancel(CancelCause::Shutdown);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(chat: ChatId, history_version: i64, status: ChatStatus) -> ChangeNotice {
        ChangeNotice {
            chat_id: chat,
            version: 1,
            status,
            history_version,
            event_seq: 1,
            deleted: false,
            owner: String::new(),
            listing: false,
            unowned: false,
            unnumbered_change: true,
        }
    }

    fn lease(chat: ChatId, history_version: i64, granted_version: i64) -> Lease {
        Lease {
            chat_id: chat,
            worker_id: "w.1".into(),
            history_version,
            expires_at: chrono::Utc::now(),
            status: ChatStatus::Running,
            granted_version,
        }
    }

    fn reason(slot: &RunSlot) -> StopReason {
        *slot.stop.lock().unwrap()
    }

    #[test]
    fn notices_follow_the_table() {
        let chat = uuid::Uuid::new_v4();
        let at = |hv, status| route(&notice(chat, hv, status), 2, 1);
        assert_eq!(at(3, ChatStatus::Running), Routed::Supersede);
        assert_eq!(at(2, ChatStatus::Interrupting), Routed::Interrupt);
        assert_eq!(at(2, ChatStatus::Running), Routed::Nothing);
        // Sent before the run claimed the chat: the superseded run's, interrupt or not.
        assert_eq!(at(1, ChatStatus::Running), Routed::Nothing);
        assert_eq!(at(1, ChatStatus::Interrupting), Routed::Nothing);
        let deleted = ChangeNotice {
            deleted: true,
            ..notice(chat, 0, ChatStatus::Waiting)
        };
        assert_eq!(route(&deleted, 2, 1), Routed::Supersede);
    }

    #[test]
    fn an_interrupt_older_than_the_runs_lease_was_the_previous_runs() {
        let chat = uuid::Uuid::new_v4();
        let interrupt = ChangeNotice {
            version: 6,
            ..notice(chat, 2, ChatStatus::Interrupting)
        };
        // The run the interrupt stopped ended, and the queue head started at version 7 on
        // the same history version: the interrupt's notice, routed late, is not for it.
        assert_eq!(route(&interrupt, 2, 7), Routed::Nothing);
        assert_eq!(route(&interrupt, 2, 6), Routed::Interrupt);
        assert_eq!(route(&interrupt, 2, 5), Routed::Interrupt);

        let runs = ActiveRuns::default();
        let root = Cancel::new();
        let (task, _) = watch::channel(());
        let (first, _) = runs.register(&lease(chat, 2, 5), &task, &root);
        runs.route(&interrupt);
        assert_eq!(first.cancel.cause(), Some(CancelCause::Interrupted));
        let (head, _) = runs.register(&lease(chat, 2, 7), &task, &root);
        runs.route(&interrupt);
        assert!(!head.cancel.is_cancelled(), "the queue head's run goes on");
        runs.route(&ChangeNotice {
            version: 8,
            ..interrupt
        });
        assert_eq!(head.cancel.cause(), Some(CancelCause::Interrupted));
    }

    #[test]
    fn the_superseded_runs_last_notices_and_renewals_leave_the_new_run_alone() {
        let runs = ActiveRuns::default();
        let root = Cancel::new();
        let chat = uuid::Uuid::new_v4();
        let (old_task, _) = watch::channel(());
        let (old, _) = runs.register(&lease(chat, 1, 5), &old_task, &root);
        // An edit released the chat and this process claimed it again.
        let (new_task, _) = watch::channel(());
        let (new, previous) = runs.register(&lease(chat, 2, 7), &new_task, &root);
        assert!(previous.is_some());
        assert_eq!(reason(&old), StopReason::Superseded);
        assert!(old.cancel.is_cancelled());

        // The old run's parts, noticed late, and its renewals (which lost the lease or
        // read an interrupt meant for it) reach nothing.
        runs.route(&notice(chat, 1, ChatStatus::Running));
        runs.route(&notice(chat, 1, ChatStatus::Interrupting));
        runs.stop_of(chat, &old_task.subscribe(), StopReason::LostLease);
        runs.interrupt_of(chat, &old_task.subscribe());
        assert!(!new.cancel.is_cancelled());
        assert_eq!(reason(&new), StopReason::None);

        // What is meant for the new run reaches it.
        runs.interrupt_of(chat, &new_task.subscribe());
        assert_eq!(new.cancel.cause(), Some(CancelCause::Interrupted));
        runs.stop_of(chat, &new_task.subscribe(), StopReason::LostLease);
        assert_eq!(reason(&new), StopReason::LostLease);
    }

    #[test]
    fn a_finished_run_is_forgotten_only_if_no_later_run_took_its_place() {
        let runs = ActiveRuns::default();
        let root = Cancel::new();
        let chat = uuid::Uuid::new_v4();
        let (task, _) = watch::channel(());
        let (first, _) = runs.register(&lease(chat, 1, 5), &task, &root);
        // The queue head runs next in the same task: no previous run to wait for.
        let (second, previous) = runs.register(&lease(chat, 1, 7), &task, &root);
        assert!(previous.is_none());
        assert!(!first.cancel.is_cancelled());
        runs.forget(chat, first.id);
        assert_eq!(runs.count(), 1);
        runs.forget(chat, second.id);
        assert_eq!(runs.count(), 0);
    }
}
