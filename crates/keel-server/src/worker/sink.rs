//! Publishing live parts: to subscribers at once, to the live-part log in batches.
//!
//! [`LiveSink`] numbers every durable event with the chat's event sequence and hands it to
//! the hub (subscribers of this process see it immediately) and to the [`LogWriter`] task,
//! which appends batches to the store at most every 50 ms or 64 parts. Commits go through the
//! same task, after a final flush, so an append can never land after the commit that clears
//! the log, and every committed message is numbered above every part clients were sent.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use keel_agent::{EventSink, LiveEvent};
use keel_store::{Lease, LiveEntry, MessageId, NewMessage, NewSummary, Store, StoreError};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::hub::{Frame, Hub};
use crate::live::{LivePayload, logged, payload};
use crate::metrics::Metrics;
use crate::worker::StopReason;

/// Parts per batch at most.
pub(super) const BATCH_PARTS: usize = 64;
/// Time a part may wait for its batch at most.
pub(super) const BATCH_WINDOW: Duration = Duration::from_millis(50);

/// The run's lease, renewed in the background and read by every write.
pub(super) type SharedLease = Arc<Mutex<Lease>>;

pub(super) fn current(lease: &SharedLease) -> Lease {
    // Each critical section is one clone or assignment, so a poisoned lock is still whole.
    lease.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

enum LogCommand {
    Append(LiveEntry),
    Commit {
        messages: Vec<NewMessage>,
        reply: oneshot::Sender<Result<Vec<MessageId>, StoreError>>,
    },
    CommitSummary {
        summary: NewSummary,
        reply: oneshot::Sender<Result<Vec<MessageId>, StoreError>>,
    },
}

/// The loop's event sink for one chat.
pub(super) struct LiveSink {
    chat_id: String,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    /// The last event sequence number handed out.
    last_seq: AtomicI64,
    log: mpsc::UnboundedSender<LogCommand>,
    step_started: Mutex<Option<Instant>>,
    /// Why the run was stopped from outside: a superseded run (edited, deleted, taken over)
    /// publishes nothing more, since the chat's channel now belongs to its new state.
    stop: Arc<Mutex<StopReason>>,
}

impl LiveSink {
    /// Starts the log writer and returns the sink feeding it. `last_seq` is the chat's
    /// event sequence when the run started.
    pub(super) fn start(
        chat_id: String,
        last_seq: i64,
        hub: Arc<Hub>,
        store: Arc<dyn Store>,
        lease: SharedLease,
        metrics: Arc<Metrics>,
        stop: Arc<Mutex<StopReason>>,
    ) -> (Arc<Self>, LogWriter) {
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = LogWriter { store, lease, rx };
        let sink = Arc::new(Self {
            chat_id,
            hub,
            metrics,
            last_seq: AtomicI64::new(last_seq),
            log: tx,
            step_started: Mutex::new(Some(Instant::now())),
            stop,
        });
        (sink, writer)
    }

    /// Commits a step through the log writer (after flushing its pending parts).
    pub(super) async fn commit(
        &self,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<MessageId>, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send_commit(LogCommand::Commit { messages, reply }, answer)
            .await
    }

    /// Commits a compaction summary through the log writer, like a step.
    pub(super) async fn commit_summary(
        &self,
        summary: NewSummary,
    ) -> Result<Vec<MessageId>, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send_commit(LogCommand::CommitSummary { summary, reply }, answer)
            .await
    }

    async fn send_commit(
        &self,
        command: LogCommand,
        answer: oneshot::Receiver<Result<Vec<MessageId>, StoreError>>,
    ) -> Result<Vec<MessageId>, StoreError> {
        if self.log.send(command).is_err() {
            return Err(StoreError::InvalidInput(
                "the live-part log writer stopped".into(),
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::InvalidInput(
                "the live-part log writer stopped".into(),
            ))
        })
    }

    /// Later parts are numbered above `seq` (a committed message's number).
    pub(super) fn advance_to(&self, seq: i64) {
        self.last_seq.fetch_max(seq, Ordering::SeqCst);
        *self
            .step_started
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    pub(super) fn last_seq(&self) -> i64 {
        self.last_seq.load(Ordering::SeqCst)
    }

    fn observe_first_part(&self) {
        let started = self
            .step_started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(started) = started {
            self.metrics
                .time_to_first_part
                .observe(started.elapsed().as_secs_f64());
        }
    }
}

impl LiveSink {
    fn superseded(&self) -> bool {
        matches!(
            *self.stop.lock().unwrap_or_else(PoisonError::into_inner),
            StopReason::Superseded | StopReason::LostLease
        )
    }

    fn publish_payload(&self, payload: LivePayload) {
        if self.superseded() {
            return;
        }
        if !payload.durable {
            self.hub.publish(
                &self.chat_id,
                Frame {
                    seq: u64::try_from(self.last_seq()).unwrap_or_default(),
                    event: payload.event,
                    data: payload.data.to_string(),
                    durable: false,
                },
            );
            return;
        }
        if payload.event == "part" {
            self.observe_first_part();
        }
        let seq = self.last_seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.hub.publish(
            &self.chat_id,
            Frame {
                seq: u64::try_from(seq).unwrap_or_default(),
                event: payload.event,
                data: payload.data.to_string(),
                durable: true,
            },
        );
        // The writer outlives every run that publishes; a closed channel only means the run
        // is being torn down, when losing the tail of the log is harmless.
        let _ = self.log.send(LogCommand::Append(LiveEntry {
            seq,
            payload: logged(&payload),
        }));
    }
}

impl LiveSink {
    /// Records in the log (not for clients) that a compaction summary streams from here on,
    /// so that a run resuming after a crash discards it instead of continuing it as a reply.
    pub(super) fn mark_summary(&self) {
        if self.superseded() {
            return;
        }
        let seq = self.last_seq.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = self.log.send(LogCommand::Append(LiveEntry {
            seq,
            payload: serde_json::json!({"event": crate::resume::SUMMARY_MARK, "data": {}}),
        }));
    }
}

impl EventSink for LiveSink {
    fn publish(&self, event: LiveEvent) {
        self.publish_payload(payload(&event));
    }
}

/// The task that appends live parts to the store and performs commits in order.
pub(super) struct LogWriter {
    store: Arc<dyn Store>,
    lease: SharedLease,
    rx: mpsc::UnboundedReceiver<LogCommand>,
}

impl LogWriter {
    pub(super) async fn run(mut self) {
        let mut pending: Vec<LiveEntry> = Vec::new();
        let mut deadline: Option<Instant> = None;
        loop {
            let command = match deadline {
                Some(at) => tokio::select! {
                    command = self.rx.recv() => command,
                    _ = tokio::time::sleep_until(at) => {
                        // A failure is logged; what is kept is retried with the next batch.
                        let _ = self.flush(&mut pending).await;
                        deadline = None;
                        continue;
                    }
                },
                None => self.rx.recv().await,
            };
            match command {
                None => {
                    let _ = self.flush(&mut pending).await;
                    return;
                }
                Some(LogCommand::Append(entry)) => {
                    pending.push(entry);
                    if pending.len() >= BATCH_PARTS {
                        let _ = self.flush(&mut pending).await;
                        deadline = None;
                    } else if deadline.is_none() {
                        deadline = Some(Instant::now() + BATCH_WINDOW);
                    }
                }
                Some(LogCommand::Commit { messages, reply }) => {
                    deadline = None;
                    let result = match self.flush(&mut pending).await {
                        Ok(()) => {
                            let lease = current(&self.lease);
                            self.store.commit_step(&lease, messages).await
                        }
                        Err(error) => Err(error),
                    };
                    let _ = reply.send(result);
                }
                Some(LogCommand::CommitSummary { summary, reply }) => {
                    deadline = None;
                    let result = match self.flush(&mut pending).await {
                        Ok(()) => {
                            let lease = current(&self.lease);
                            self.store.commit_summary(&lease, summary).await
                        }
                        Err(error) => Err(error),
                    };
                    let _ = reply.send(result);
                }
            }
        }
    }

    /// Appends the pending parts. A transient failure keeps them for the next try; any
    /// other drops them (the run lost its chat, and its commit fails too). The error is
    /// returned so that a commit never lands while parts clients were sent are missing from
    /// the log: the message would be numbered below them and those clients would skip it.
    async fn flush(&self, pending: &mut Vec<LiveEntry>) -> Result<(), StoreError> {
        if pending.is_empty() {
            return Ok(());
        }
        let lease = current(&self.lease);
        match self.store.append_live_entries(&lease, pending).await {
            Ok(()) => {
                pending.clear();
                Ok(())
            }
            Err(error) => {
                tracing::warn!(chat = %lease.chat_id, %error, parts = pending.len(), "appending live parts failed");
                if !error.is_transient() {
                    pending.clear();
                }
                Err(error)
            }
        }
    }
}
