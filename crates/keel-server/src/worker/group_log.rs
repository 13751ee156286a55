//! The process's one writer of the live-part log: a group commit over every run.
//!
//! Runs hand each numbered part to this task as they publish it (a push onto a shared
//! inbox, no database work; only the first part of a window wakes the task, so a part costs
//! no task switch and no timer). Every window ([`batch_window`]) — or sooner when
//! [`BATCH_PARTS`] are waiting, or when a run asks for its parts to be written before it
//! commits — the pending parts of *all* chats go to the store in one transaction
//! ([`keel_store::Store::append_live_groups`]), each chat's entries fenced on its own lease.
//! With a thousand slow streams that is one transaction per window instead of one per chat
//! per part.
//!
//! A group the store refuses (the run lost its lease, the chat was edited or deleted) is
//! dropped and its error kept for that run's next flush, so its commit fails rather than
//! landing while parts its clients saw are missing from the log. A transient failure of the
//! whole transaction keeps everything for the next window.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use keel_store::{Lease, MessageId, NewLiveEntry, NewMessage, Next, Store, StoreError};
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::hub::Hub;
use crate::worker::leases::{SharedLease, current};

/// Parts waiting (over all chats) that start a write at once.
pub(super) const BATCH_PARTS: usize = 4096;
/// Time a part may wait for its batch at most, on a database other replicas share: their
/// followers of a chat that runs here see its parts only through the log, so the window is
/// part of what those clients wait.
pub(super) const SHARED_WINDOW: Duration = Duration::from_millis(50);
/// The same on a database only this process writes (SQLite). Nothing reads the log live
/// there: this process's followers get parts from the hub, which keeps each frame until
/// the log has it, and the log is read only by catch-ups and by recovery after a crash
/// (which replays, with a reset, parts a client saw that the log lacks). A longer window
/// puts more of a chat's parts in one row: at a thousand chats streaming 20 parts a second
/// each, a 50 ms window wrote a row per part.
pub(super) const SOLE_WRITER_WINDOW: Duration = Duration::from_millis(200);

/// The window of the log on a store of this backend ([`Store::backend`]).
pub(super) fn batch_window(backend: &str) -> Duration {
    match backend {
        "sqlite" => SOLE_WRITER_WINDOW,
        _ => SHARED_WINDOW,
    }
}

/// One run's place in the log: its parts are fenced on its own lease, so two runs of the
/// same chat (a superseded one still unwinding) never share a group.
pub(super) type RunKey = u64;

/// A key no other run of this process had.
pub(super) fn next_run_key() -> RunKey {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

enum Command {
    /// Parts wait in the inbox: write them within the window (or now, when there are
    /// [`BATCH_PARTS`] of them).
    Appended,
    /// Write everything pending now; answer with the run's outcome.
    Flush {
        run: RunKey,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Write everything pending, then commit the run's step (with the steps of other
    /// runs that wait meanwhile) unless its parts were refused.
    Commit {
        run: RunKey,
        lease: Lease,
        messages: Vec<NewMessage>,
        reply: oneshot::Sender<Result<Vec<MessageId>, StoreError>>,
    },
    /// The run completed and its parts were flushed: finish it (with the runs of other
    /// chats that finish meanwhile).
    Finish {
        lease: Lease,
        reply: oneshot::Sender<Result<Next, StoreError>>,
    },
    /// The run ended: forget what is kept for it.
    Forget { run: RunKey },
}

/// A handle on the process's log writer.
#[derive(Clone)]
pub(crate) struct GroupLog {
    tx: mpsc::UnboundedSender<Command>,
    inbox: Arc<Mutex<Inbox>>,
}

impl std::fmt::Debug for GroupLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupLog").finish_non_exhaustive()
    }
}

/// Parts the runs published since the writer last looked, in publishing order.
#[derive(Default)]
struct Inbox {
    parts: Vec<(RunKey, SharedLease, NewLiveEntry)>,
}

fn take_inbox(inbox: &Mutex<Inbox>) -> Vec<(RunKey, SharedLease, NewLiveEntry)> {
    // Each critical section is one push or one swap: a poisoned inbox is still whole.
    std::mem::take(&mut inbox.lock().unwrap_or_else(PoisonError::into_inner).parts)
}

impl GroupLog {
    /// Starts the writer task; it ends when every handle is dropped. Each write tells `hub`
    /// how far each chat's log now reaches, so the hub lets go of those frames, and `writes`
    /// how long it took.
    pub(crate) fn start(store: Arc<dyn Store>, hub: Arc<Hub>, writes: Histogram) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let window = batch_window(store.backend());
        tokio::spawn(Writer::new(store, hub, inbox.clone(), writes, window).run(rx));
        Self { tx, inbox }
    }

    /// Queues a numbered part of a run for the next write.
    pub(crate) fn append(&self, run: RunKey, lease: &SharedLease, entry: NewLiveEntry) {
        let waiting = {
            let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            inbox.parts.push((run, lease.clone(), entry));
            inbox.parts.len()
        };
        // The first part since the writer emptied the inbox starts its window; a full batch
        // is written at once. The writer lives as long as any handle; a closed channel only
        // happens while the process is torn down, when losing the tail of the log is harmless.
        if waiting == 1 || waiting == BATCH_PARTS {
            let _ = self.tx.send(Command::Appended);
        }
    }

    /// Writes everything pending (the run's parts among them) and answers whether the run's
    /// parts all reached the log.
    pub(crate) async fn flush(&self, run: RunKey) -> Result<(), StoreError> {
        let stopped = || StoreError::InvalidInput("the live-part log writer stopped".into());
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Flush { run, reply })
            .map_err(|_| stopped())?;
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Writes everything pending, then commits the run's step once all its parts are in
    /// the log — in one transaction with the steps of every other run that commits while
    /// the writer is busy ([`Store::commit_steps`]), each fenced on its own lease.
    pub(crate) async fn commit(
        &self,
        run: RunKey,
        lease: Lease,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<MessageId>, StoreError> {
        let stopped = || StoreError::InvalidInput("the live-part log writer stopped".into());
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Commit {
                run,
                lease,
                messages,
                reply,
            })
            .map_err(|_| stopped())?;
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Finishes a completed run whose parts were flushed — in one transaction with the
    /// runs of other chats that finish while the writer is busy ([`Store::finish_runs`]),
    /// each fenced on its own lease.
    pub(crate) async fn finish_run(&self, lease: Lease) -> Result<Next, StoreError> {
        let stopped = || StoreError::InvalidInput("the live-part log writer stopped".into());
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Finish { lease, reply })
            .map_err(|_| stopped())?;
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// The run ended; nothing more comes from it.
    pub(crate) fn forget(&self, run: RunKey) {
        let _ = self.tx.send(Command::Forget { run });
    }
}

/// What is waiting for one run.
struct Pending {
    lease: SharedLease,
    entries: Vec<NewLiveEntry>,
}

type FlushReply = oneshot::Sender<Result<(), StoreError>>;
type CommitReply = oneshot::Sender<Result<Vec<MessageId>, StoreError>>;
type FinishReply = oneshot::Sender<Result<Next, StoreError>>;

/// The flushes, commits and finishes one write answers.
#[derive(Default)]
struct Settle {
    flushes: Vec<(RunKey, FlushReply)>,
    commits: Vec<(RunKey, Lease, Vec<NewMessage>, CommitReply)>,
    finishes: Vec<(Lease, FinishReply)>,
}

impl Settle {
    fn flush(run: RunKey, reply: FlushReply) -> Self {
        Self {
            flushes: vec![(run, reply)],
            ..Self::default()
        }
    }
}

struct Writer {
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    inbox: Arc<Mutex<Inbox>>,
    writes: Histogram,
    /// How long the first part waiting may wait for the write.
    window: Duration,
    /// Runs with parts waiting, in the order they first had one.
    pending: Vec<(RunKey, Pending)>,
    /// Where each run is in `pending`.
    index: HashMap<RunKey, usize>,
    parts: usize,
    /// A refused run's error, for its next flush.
    refused: HashMap<RunKey, StoreError>,
}

impl Writer {
    fn new(
        store: Arc<dyn Store>,
        hub: Arc<Hub>,
        inbox: Arc<Mutex<Inbox>>,
        writes: Histogram,
        window: Duration,
    ) -> Self {
        Self {
            store,
            hub,
            inbox,
            writes,
            window,
            pending: Vec::new(),
            index: HashMap::new(),
            parts: 0,
            refused: HashMap::new(),
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut deadline: Option<Instant> = None;
        loop {
            let command = match deadline {
                Some(at) => tokio::select! {
                    command = rx.recv() => command,
                    _ = tokio::time::sleep_until(at) => {
                        self.take_inbox();
                        self.write().await;
                        deadline = self.next_deadline();
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            match command {
                None => {
                    self.take_inbox();
                    self.write().await;
                    return;
                }
                Some(Command::Appended) => {
                    // The inbox stays as it is until the window ends, so the parts published
                    // meanwhile wake no one.
                    if self.waiting() >= BATCH_PARTS {
                        self.take_inbox();
                        self.write().await;
                        deadline = self.next_deadline();
                    }
                    deadline = deadline.or_else(|| Some(Instant::now() + self.window));
                }
                Some(Command::Flush { run, reply }) => {
                    self.settle(&mut rx, Settle::flush(run, reply)).await;
                    deadline = self.next_deadline();
                }
                Some(Command::Commit {
                    run,
                    lease,
                    messages,
                    reply,
                }) => {
                    let mut settle = Settle::default();
                    settle.commits.push((run, lease, messages, reply));
                    self.settle(&mut rx, settle).await;
                    deadline = self.next_deadline();
                }
                Some(Command::Finish { lease, reply }) => {
                    let mut settle = Settle::default();
                    settle.finishes.push((lease, reply));
                    self.settle(&mut rx, settle).await;
                    deadline = self.next_deadline();
                }
                Some(Command::Forget { run }) => {
                    // Its parts published before it are written first, as any others.
                    self.take_inbox();
                    self.forget(run);
                    deadline = self.next_deadline();
                }
            }
        }
    }

    /// Writes everything pending and answers the flushes and commits: everything already
    /// queued joins this write, whoever sent it, and the commits waiting go as one group;
    /// forgets queued meanwhile are done after, in order.
    async fn settle(&mut self, rx: &mut mpsc::UnboundedReceiver<Command>, mut settle: Settle) {
        let mut forgotten = Vec::new();
        while let Ok(command) = rx.try_recv() {
            match command {
                Command::Appended => {}
                Command::Flush { run, reply } => settle.flushes.push((run, reply)),
                Command::Commit {
                    run,
                    lease,
                    messages,
                    reply,
                } => settle.commits.push((run, lease, messages, reply)),
                Command::Finish { lease, reply } => settle.finishes.push((lease, reply)),
                Command::Forget { run } => forgotten.push(run),
            }
        }
        self.take_inbox();
        self.write().await;
        for (run, reply) in settle.flushes {
            let outcome = self.outcome(run).await;
            let _ = reply.send(outcome);
        }
        let mut steps = Vec::with_capacity(settle.commits.len());
        let mut replies = Vec::with_capacity(settle.commits.len());
        for (run, lease, messages, reply) in settle.commits {
            // A run whose parts did not all reach the log must not commit past them.
            match self.outcome(run).await {
                Ok(()) => {
                    steps.push((lease, messages));
                    replies.push(reply);
                }
                Err(error) => {
                    let _ = reply.send(Err(error));
                }
            }
        }
        for (reply, outcome) in replies.into_iter().zip(self.commit_steps(steps).await) {
            let _ = reply.send(outcome);
        }
        let (leases, replies): (Vec<_>, Vec<_>) = settle.finishes.into_iter().unzip();
        for (reply, outcome) in replies.into_iter().zip(self.finish_runs(leases).await) {
            let _ = reply.send(outcome);
        }
        for run in forgotten {
            self.forget(run);
        }
    }

    /// Finishes the runs in one transaction; when that fails as a whole, each alone, so
    /// every run gets the store's own answer.
    async fn finish_runs(&self, leases: Vec<Lease>) -> Vec<Result<Next, StoreError>> {
        if leases.len() > 1 {
            match self.store.finish_runs(&leases).await {
                Ok(outcomes) => return outcomes,
                Err(error) => {
                    tracing::warn!(%error, runs = leases.len(), "a grouped finish of runs failed; finishing each alone");
                }
            }
        }
        let mut outcomes = Vec::with_capacity(leases.len());
        for lease in &leases {
            outcomes.push(self.store.finish_run(lease).await);
        }
        outcomes
    }

    /// Commits the steps in one transaction; when that fails as a whole, each alone, so
    /// every run gets the store's own answer for its step.
    async fn commit_steps(
        &self,
        steps: Vec<(Lease, Vec<NewMessage>)>,
    ) -> Vec<Result<Vec<MessageId>, StoreError>> {
        if steps.len() < 2 {
            let mut outcomes = Vec::with_capacity(1);
            for (lease, messages) in steps {
                outcomes.push(self.store.commit_step(&lease, messages).await);
            }
            return outcomes;
        }
        match self.store.commit_steps(steps.clone()).await {
            Ok(outcomes) => outcomes,
            Err(error) => {
                tracing::warn!(%error, steps = steps.len(), "a grouped step commit failed; committing each alone");
                let mut outcomes = Vec::with_capacity(steps.len());
                for (lease, messages) in steps {
                    outcomes.push(self.store.commit_step(&lease, messages).await);
                }
                outcomes
            }
        }
    }

    fn forget(&mut self, run: RunKey) {
        self.refused.remove(&run);
        if self.index.contains_key(&run) {
            self.pending.retain(|(key, _)| *key != run);
            self.reindex();
        }
    }

    /// Rebuilds the index and the count after runs left `pending`.
    fn reindex(&mut self) {
        self.index = self
            .pending
            .iter()
            .enumerate()
            .map(|(at, (key, _))| (*key, at))
            .collect();
        self.parts = self.pending.iter().map(|(_, p)| p.entries.len()).sum();
    }

    /// Parts waiting, here and in the inbox.
    fn waiting(&self) -> usize {
        let inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        self.parts + inbox.parts.len()
    }

    /// Tells the hub that a run's written parts are in the log.
    fn logged(&self, pending: &Pending) {
        if let Some(last) = pending.entries.iter().map(|e| e.seq).max() {
            let chat = current(&pending.lease).chat_id.to_string();
            self.hub
                .logged(&chat, u64::try_from(last).unwrap_or_default());
        }
    }

    /// Moves the parts the runs published meanwhile into `pending`.
    fn take_inbox(&mut self) {
        for (run, lease, entry) in take_inbox(&self.inbox) {
            self.push(run, lease, entry);
        }
    }

    fn push(&mut self, run: RunKey, lease: SharedLease, entry: NewLiveEntry) {
        self.parts += 1;
        match self.index.get(&run) {
            Some(&at) => self.pending[at].1.entries.push(entry),
            None => {
                self.index.insert(run, self.pending.len());
                self.pending.push((
                    run,
                    Pending {
                        lease,
                        entries: vec![entry],
                    },
                ));
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        (!self.pending.is_empty()).then(|| Instant::now() + self.window)
    }

    /// The run's outcome since its last flush: its parts are written unless refused. Parts
    /// still waiting after a failed group write are tried alone, so the run gets the
    /// store's own error (a transient one gives its chat back to resume later).
    async fn outcome(&mut self, run: RunKey) -> Result<(), StoreError> {
        if let Some(error) = self.refused.remove(&run) {
            return Err(error);
        }
        let Some(&index) = self.index.get(&run) else {
            return Ok(());
        };
        let (_, pending) = &self.pending[index];
        let result = self
            .store
            .append_live_entries(&current(&pending.lease), &pending.entries)
            .await;
        if result.is_ok() {
            self.logged(pending);
        }
        // Written, or refused for good: either way nothing is kept for it.
        if result
            .as_ref()
            .map_or_else(|e| !e.is_transient(), |()| true)
        {
            self.pending.remove(index);
            self.reindex();
        }
        result
    }

    /// Writes every pending part in one transaction.
    async fn write(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        #[cfg(debug_assertions)]
        crate::debug_pause::debug_pause("KEEL_DEBUG_LOG_PAUSE_MS").await;
        let pending = std::mem::take(&mut self.pending);
        self.index.clear();
        let groups: Vec<(keel_store::Lease, &[NewLiveEntry])> = pending
            .iter()
            .map(|(_, p)| (current(&p.lease), p.entries.as_slice()))
            .collect();
        let started = Instant::now();
        let written = self.store.append_live_groups(&groups).await;
        self.writes.observe(started.elapsed().as_secs_f64());
        match written {
            Ok(outcomes) => {
                drop(groups);
                for ((run, pending), outcome) in pending.into_iter().zip(outcomes) {
                    if outcome.is_ok() {
                        self.logged(&pending);
                    }
                    if let Err(error) = outcome {
                        tracing::warn!(chat = %current(&pending.lease).chat_id, %error, parts = pending.entries.len(), "appending live parts refused");
                        self.refused.insert(run, error);
                    }
                }
                self.parts = 0;
            }
            Err(error) if error.is_transient() => {
                drop(groups);
                tracing::warn!(%error, runs = pending.len(), "appending live parts failed; retrying with the next batch");
                self.pending = pending;
                self.reindex();
            }
            Err(error) => {
                drop(groups);
                tracing::warn!(%error, runs = pending.len(), "appending live parts failed");
                let message = error.to_string();
                for (run, _) in pending {
                    self.refused
                        .insert(run, StoreError::InvalidInput(message.clone()));
                }
                self.parts = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests;
