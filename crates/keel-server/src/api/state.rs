//! What every request handler shares.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use keel_store::Store;

use crate::config::Config;
use crate::hub::Hub;
use crate::log_reads::LogReads;
use crate::metrics::Metrics;
use crate::models::ModelRegistry;
use crate::net::hosts::AllowedHosts;
use crate::net::sse_slots::SseSlots;

/// How callers are identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMode {
    /// No users: every request acts as the single local user.
    SingleUser,
    /// Every request needs a bearer token of a known user.
    Tokens,
}

/// The name every chat gets in single-user mode.
pub const LOCAL_USER: &str = "local";

/// How often a single-user daemon asks the database whether a user was added since.
pub const USERS_RECHECK: Duration = Duration::from_secs(1);

/// The authentication mode as it is now. A daemon that started without users switches to
/// tokens as soon as one is added (`keel users add` on the same database), within
/// [`USERS_RECHECK`] and without a restart; it never switches back while it runs, so
/// removing the last user locks the API rather than opening it.
pub struct LiveAuth {
    tokens: AtomicBool,
    checked: Mutex<Instant>,
}

impl LiveAuth {
    pub fn new(mode: AuthMode) -> Self {
        Self {
            tokens: AtomicBool::new(mode == AuthMode::Tokens),
            checked: Mutex::new(Instant::now()),
        }
    }

    /// Whether callers are told apart by their tokens (as last seen).
    pub fn requires_tokens(&self) -> bool {
        self.tokens.load(Ordering::Acquire)
    }

    /// The mode for the request at hand.
    pub async fn mode(&self, store: &dyn Store) -> Result<AuthMode, keel_store::StoreError> {
        if self.tokens.load(Ordering::Acquire) {
            return Ok(AuthMode::Tokens);
        }
        let due = {
            // An instant cannot be left half-written, so a poisoned lock's value is fine.
            let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
            let due = checked.elapsed() >= USERS_RECHECK;
            if due {
                *checked = Instant::now();
            }
            due
        };
        if due && store.has_users().await? {
            if !self.tokens.swap(true, Ordering::AcqRel) {
                tracing::info!("a user exists now: API requests need a bearer token from here on");
            }
            return Ok(AuthMode::Tokens);
        }
        Ok(AuthMode::SingleUser)
    }
}

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    pub models: ModelRegistry,
    pub config: Arc<Config>,
    pub auth: Arc<LiveAuth>,
    /// Health of optional dependencies (MCP servers) for `/readyz`.
    pub dependencies: Arc<dyn Fn() -> Vec<serde_json::Value> + Send + Sync>,
    /// Cancelled when the process stops: live event streams end so shutdown is not held up.
    pub shutdown: keel_core::Cancel,
    /// The names requests may carry as `Host` and `Origin`.
    pub allowed_hosts: Arc<AllowedHosts>,
    /// Open live event streams, capped per user and in all.
    pub sse_slots: Arc<SseSlots>,
    /// The log reads of followers of runs on other replicas, gathered into one.
    pub log_reads: LogReads,
}

impl AppState {
    /// The state of a daemon listening on `listen` under `config`: no optional dependencies
    /// to report and a shutdown signal of its own until the caller sets others.
    pub fn new(
        store: Arc<dyn Store>,
        hub: Arc<Hub>,
        metrics: Arc<Metrics>,
        models: ModelRegistry,
        config: Arc<Config>,
        auth: AuthMode,
        listen: SocketAddr,
    ) -> Self {
        Self {
            log_reads: LogReads::start(store.clone()),
            store,
            hub,
            models,
            auth: Arc::new(LiveAuth::new(auth)),
            dependencies: Arc::new(Vec::new),
            shutdown: keel_core::Cancel::new(),
            allowed_hosts: Arc::new(AllowedHosts::new(listen, &config.server.allowed_hosts)),
            sse_slots: SseSlots::new(
                config.server.sse_max_per_user,
                config.server.sse_max_total,
                metrics.sse_open.clone(),
            ),
            metrics,
            config,
        }
    }
}
