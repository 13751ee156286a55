//! Workers: claim runnable chats, run them, and react to what happens to them meanwhile.
//!
//! A [`WorkerPool`] runs up to `workers` chats at once. It claims chats when a change notice
//! says one became runnable and on a 1 s poll; it routes notices to running chats (an
//! interrupt cancels the run with the interrupt cause within one notice's latency; an edit or
//! a delete supersedes it); and every lease period it sweeps chats whose owner died and
//! client-side calls whose deadline passed.

mod checkpoints;
mod compaction;
#[cfg(debug_assertions)]
mod fault;
mod group_log;
mod identity;
mod leases;
mod lifecycle;
mod persist;
mod run;
mod runs;
mod sink;
#[cfg(test)]
mod test_support;
mod titles;
mod tools;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use keel_core::Cancel;
use keel_store::{ChangeNotice, ChatId, ChatStatus, Lease, RemoteNotice, Store};
use tokio::sync::Notify;

use crate::config::Config;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::models::ModelRegistry;
use crate::tools::ToolSet;
use crate::worker::group_log::GroupLog;
use crate::worker::identity::Identity;
use crate::worker::runs::{ActiveRuns, Finished, RunSlot, Task};

/// What every run of this process shares.
pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub hub: Arc<Hub>,
    /// The process's writer of the live-part log.
    pub log: GroupLog,
    /// The leases of this process's runs, renewed together.
    pub leases: leases::Leases,
    pub metrics: Arc<Metrics>,
    pub models: ModelRegistry,
    pub tools: Arc<ToolSet>,
    pub config: Arc<Config>,
    pub worker_id: String,
    /// This process as an owner, to recognise chats left by a dead process of this machine.
    pub identity: Identity,
    /// Cancelled (with the shutdown cause) when the process stops.
    pub shutdown: Cancel,
    runs: ActiveRuns,
    wake: Notify,
    /// A claim found every worker busy, or filled the last ones: chats may be waiting that
    /// only a freed worker will take, so the next run to end looks for them.
    claims_deferred: AtomicBool,
}

impl Shared {
    /// Registers a run of the chat by the task holding `finished` (see
    /// [`ActiveRuns::register`]).
    fn register(&self, lease: &Lease, finished: &Finished) -> (RunSlot, Option<Task>) {
        self.runs.register(lease, finished, &self.shutdown)
    }

    /// Forgets a finished run, unless a later run of the chat already took its place.
    fn forget(&self, chat: ChatId, run: u64) {
        self.runs.forget(chat, run);
        // A freed worker is news only to a claim that was turned away, or to a shutdown
        // waiting for the runs to end; any other runnable chat's notice woke the claims.
        if self.claims_deferred.swap(false, Ordering::Relaxed) || self.shutdown.is_cancelled() {
            self.wake.notify_one();
        }
    }

    /// Runs of this process right now.
    pub(crate) fn active_count(&self) -> usize {
        self.runs.count()
    }
}

/// The workers of this process.
pub(crate) struct WorkerPool {
    shared: Arc<Shared>,
}

impl WorkerPool {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        store: Arc<dyn Store>,
        hub: Arc<Hub>,
        metrics: Arc<Metrics>,
        models: ModelRegistry,
        tools: Arc<ToolSet>,
        config: Arc<Config>,
        shutdown: Cancel,
    ) -> Self {
        let identity = Identity::current();
        let worker_id = identity.worker_id();
        Self {
            shared: Arc::new(Shared {
                log: GroupLog::start(store.clone(), hub.clone(), metrics.live_log_writes.clone()),
                leases: leases::Leases::default(),
                store,
                hub,
                metrics,
                models,
                tools,
                config,
                worker_id,
                identity,
                shutdown,
                runs: ActiveRuns::default(),
                wake: Notify::new(),
                claims_deferred: AtomicBool::new(false),
            }),
        }
    }

    /// Runs until shutdown, then waits (at most `grace`) for every run to release its chat.
    pub(crate) async fn run(self, grace: Duration) {
        let shared = self.shared.clone();
        let router = tokio::spawn(route_notices(shared.clone()));
        let sweeper = tokio::spawn(sweep(shared.clone()));
        let renewer = tokio::spawn(leases::renew_all(shared.clone()));
        let mut poll = tokio::time::interval(Duration::from_secs(1));
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shared.shutdown.cancelled() => break,
                _ = shared.wake.notified() => {}
                _ = poll.tick() => {}
            }
            lifecycle::claim(&shared).await;
        }
        shared.runs.shut_down();
        let deadline = tokio::time::Instant::now() + grace;
        while shared.active_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        router.abort();
        sweeper.abort();
        renewer.abort();
    }
}

/// Routes change notices (of this process and, on PostgreSQL, of every replica).
async fn route_notices(shared: Arc<Shared>) {
    let mut local = shared.store.subscribe();
    let mut remote = match shared.store.subscribe_remote().await {
        #[cfg(debug_assertions)]
        Ok(stream) => Some(fault::drop_remote_changes(stream)),
        #[cfg(not(debug_assertions))]
        Ok(stream) => Some(stream),
        Err(error) => {
            tracing::warn!(%error, "listening for other replicas' changes failed");
            None
        }
    };
    loop {
        let notice = tokio::select! {
            received = local.recv() => match received {
                Ok(notice) => notice,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    resync(&shared).await;
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            Some(notice) = async {
                match remote.as_mut() {
                    Some(stream) => stream.next().await,
                    None => std::future::pending().await,
                }
            } => match notice {
                RemoteNotice::Changed(notice) => notice,
                RemoteNotice::Missed => {
                    resync(&shared).await;
                    continue;
                }
            },
        };
        shared.runs.route(&notice);
        if notice.status.is_runnable() && notice.unowned {
            shared.wake.notify_one();
        }
    }
}

/// Notices were lost (a LISTEN reconnect, a subscriber that fell behind): reads the state of
/// every chat running here and routes it as if its notice had arrived, then looks for
/// runnable chats. An interrupt posted meanwhile reaches its run now, not at the next
/// lease renewal.
async fn resync(shared: &Shared) {
    for chat_id in shared.runs.chats() {
        let notice = match shared.store.get_chat(chat_id).await {
            Ok(chat) => ChangeNotice {
                chat_id,
                version: chat.version,
                status: chat.status,
                history_version: chat.history_version,
                event_seq: chat.event_seq,
                deleted: false,
                unowned: chat.worker_id.is_none(),
                owner: chat.owner,
                listing: false,
                unnumbered_change: true,
            },
            Err(keel_store::StoreError::NotFound { .. }) => ChangeNotice {
                chat_id,
                version: 0,
                status: ChatStatus::Waiting,
                history_version: 0,
                event_seq: 0,
                deleted: true,
                owner: String::new(),
                listing: false,
                unowned: false,
                unnumbered_change: true,
            },
            Err(error) => {
                tracing::warn!(chat = %chat_id, %error, "reading a running chat to resync failed");
                continue;
            }
        };
        shared.runs.route(&notice);
    }
    shared.wake.notify_one();
}

/// Releases at once the chats held by a process of this machine that no longer runs (a
/// daemon killed and restarted here), rather than after their leases expire.
async fn release_dead_local_owners(shared: &Shared) {
    let Some(prefix) = shared.identity.node_prefix() else {
        return;
    };
    let owners = match shared.store.chat_owners(&prefix).await {
        Ok(owners) => owners,
        Err(error) => {
            tracing::warn!(%error, "listing chat owners failed");
            return;
        }
    };
    let dead: Vec<String> = owners
        .into_iter()
        .filter(|owner| shared.identity.owner_is_dead(owner))
        .collect();
    if dead.is_empty() {
        return;
    }
    match shared.store.release_owners(&dead).await {
        Ok(chats) => {
            tracing::info!(
                count = chats.len(),
                "released chats of a dead process of this machine"
            );
            shared.wake.notify_one();
        }
        Err(error) => tracing::warn!(%error, "releasing chats of dead processes failed"),
    }
}

/// How often the sweeper forgets old idempotency keys and finished tool records.
const PURGE_EVERY: Duration = Duration::from_secs(600);

/// Forgets idempotency keys past their time to live and the records of tool calls that
/// finished that long ago in chats that are not running; both only grow otherwise.
async fn purge(shared: &Shared) {
    match shared.store.purge_idempotency_keys().await {
        Ok(0) => {}
        Ok(count) => tracing::info!(count, "purged old idempotency keys"),
        Err(error) => tracing::warn!(%error, "purging idempotency keys failed"),
    }
    match shared.store.purge_tool_records().await {
        Ok(0) => {}
        Ok(count) => tracing::info!(count, "purged finished tool records"),
        Err(error) => tracing::warn!(%error, "purging tool records failed"),
    }
}

/// Every lease period: release chats whose owner died; expire overdue client-side calls;
/// drop the logs of chats that settled a lease period ago; every [`PURGE_EVERY`] (and at start): purge what only grows.
async fn sweep(shared: Arc<Shared>) {
    let period = shared.config.runs.lease();
    let mut last_purge: Option<tokio::time::Instant> = None;
    loop {
        if last_purge.is_none_or(|at| at.elapsed() >= PURGE_EVERY) {
            purge(&shared).await;
            last_purge = Some(tokio::time::Instant::now());
        }
        release_dead_local_owners(&shared).await;
        match shared.store.recover_stale().await {
            Ok(chats) if !chats.is_empty() => {
                tracing::info!(count = chats.len(), "released chats of a dead owner");
                shared.wake.notify_one();
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "sweeping stale chats failed"),
        }
        if let Err(error) = shared.store.expire_pending_actions().await {
            tracing::warn!(%error, "expiring overdue client-side calls failed");
        }
        if let Err(error) = shared.store.purge_settled_logs().await {
            tracing::warn!(%error, "dropping the logs of settled chats failed");
        }
        tokio::time::sleep(period).await;
    }
}
