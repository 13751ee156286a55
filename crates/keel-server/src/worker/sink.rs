//! Publishing live parts: to subscribers at once, to the live-part log in batches.
//!
//! [`LiveSink`] numbers every durable event with the chat's event sequence and hands it to
//! the hub (subscribers of this process see it immediately) and to the process's
//! [`GroupLog`], which appends the parts of every chat in one transaction per window. A
//! commit first has the log write the run's parts, so an append can never land after the
//! commit that clears the log, and every committed message is numbered above every part
//! clients were sent.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use keel_agent::{EventSink, LiveEvent};
use keel_store::{
    JsonText, Lease, MessageId, NewLiveEntry, NewMessage, NewSummary, Store, StoreError,
};
use tokio::time::Instant;

use crate::hub::{Frame, Hub};
use crate::live::{LivePayload, payload};
use crate::metrics::Metrics;
use crate::worker::group_log::{GroupLog, RunKey, next_run_key};
use crate::worker::leases::{SharedLease, current};
use crate::worker::runs::StopReason;

/// The loop's event sink for one chat.
pub(super) struct LiveSink {
    chat_id: String,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    /// The last event sequence number handed out.
    last_seq: AtomicI64,
    /// A compaction summary streams: its text goes out as the `system` role's.
    summarising: AtomicBool,
    log: GroupLog,
    /// This run's place in the log writer.
    run: RunKey,
    lease: SharedLease,
    /// The history version the run claimed the chat at (renewals keep it).
    history_version: i64,
    store: Arc<dyn Store>,
    /// Commits of the run, one at a time.
    committing: tokio::sync::Mutex<()>,
    step_started: Mutex<Option<Instant>>,
    /// Why the run was stopped from outside: a superseded run (edited, deleted, taken over)
    /// publishes nothing more, since the chat's channel now belongs to its new state.
    stop: Arc<Mutex<StopReason>>,
}

impl LiveSink {
    /// The sink of one run; `last_seq` is the chat's event sequence when the run started.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        chat_id: String,
        last_seq: i64,
        hub: Arc<Hub>,
        store: Arc<dyn Store>,
        lease: SharedLease,
        metrics: Arc<Metrics>,
        stop: Arc<Mutex<StopReason>>,
        log: GroupLog,
    ) -> Arc<Self> {
        let history_version = current(&lease).history_version;
        Arc::new(Self {
            chat_id,
            hub,
            metrics,
            last_seq: AtomicI64::new(last_seq),
            summarising: AtomicBool::new(false),
            log,
            run: next_run_key(),
            lease,
            history_version,
            store,
            committing: tokio::sync::Mutex::new(()),
            step_started: Mutex::new(Some(Instant::now())),
            stop,
        })
    }

    /// The history version the run works at.
    pub(super) fn history_version(&self) -> i64 {
        self.history_version
    }

    /// Commits a step once the log holds every part published before it.
    pub(super) async fn commit(
        &self,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<MessageId>, StoreError> {
        let _one_at_a_time = self.committing.lock().await;
        let ids = self
            .log
            .commit(self.run, current(&self.lease), messages)
            .await?;
        #[cfg(debug_assertions)]
        super::fault::abort_at(super::fault::AbortPoint::StepCommitted);
        Ok(ids)
    }

    /// Commits a compaction summary like a step.
    pub(super) async fn commit_summary(
        &self,
        summary: NewSummary,
    ) -> Result<Vec<MessageId>, StoreError> {
        let _one_at_a_time = self.committing.lock().await;
        self.log.flush(self.run).await?;
        #[cfg(debug_assertions)]
        super::fault::abort_at(super::fault::AbortPoint::SummaryLogged);
        let ids = self
            .store
            .commit_summary(&current(&self.lease), summary)
            .await?;
        self.summarising.store(false, Ordering::SeqCst);
        #[cfg(debug_assertions)]
        super::fault::abort_at(super::fault::AbortPoint::SummaryCommitted);
        Ok(ids)
    }

    /// The run ended: writes what it published last (before its chat is released, while
    /// its lease still lets the parts in) and leaves the log writer.
    pub(super) async fn finish(&self) {
        if let Err(error) = self.log.flush(self.run).await {
            tracing::warn!(chat = %self.chat_id, %error, "writing the run's last live parts failed");
        }
        self.log.forget(self.run);
    }

    /// Later parts are numbered above `seq` (a committed message's number).
    pub(super) fn advance_to(&self, seq: i64) {
        self.last_seq.fetch_max(seq, Ordering::SeqCst);
        *self
            .step_started
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// The run's lease as renewed so far.
    pub(super) fn lease(&self) -> Lease {
        current(&self.lease)
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
        let Some(logged) = payload.logged else {
            self.hub.publish(
                &self.chat_id,
                Frame::new(
                    u64::try_from(self.last_seq()).unwrap_or_default(),
                    payload.event,
                    &payload.data,
                    false,
                    self.history_version,
                ),
            );
            return;
        };
        if payload.event == "part" {
            self.observe_first_part();
        }
        let seq = self.last_seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.hub.publish(
            &self.chat_id,
            Frame::new(
                u64::try_from(seq).unwrap_or_default(),
                payload.event,
                &payload.data,
                true,
                self.history_version,
            ),
        );
        self.log.append(
            self.run,
            &self.lease,
            NewLiveEntry {
                seq,
                payload: logged,
            },
        );
    }
}

impl LiveSink {
    /// Records in the log (not for clients) that a compaction summary streams from here on,
    /// so that a run resuming after a crash discards it instead of continuing it as a reply.
    pub(super) fn mark_summary(&self) {
        if self.superseded() {
            return;
        }
        self.summarising.store(true, Ordering::SeqCst);
        let seq = self.last_seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.log.append(
            self.run,
            &self.lease,
            NewLiveEntry {
                seq,
                payload: JsonText::of(
                    &serde_json::json!({"event": crate::resume::SUMMARY_MARK, "data": {}}),
                ),
            },
        );
    }
}

impl EventSink for LiveSink {
    fn publish(&self, event: LiveEvent) {
        if self.summarising.load(Ordering::SeqCst) {
            self.publish_payload(crate::live::summary_payload(&event));
        } else {
            self.publish_payload(payload(&event));
        }
    }
}
