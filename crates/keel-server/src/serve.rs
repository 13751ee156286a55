//! Starting and stopping the daemon: store, models, tools, workers and the HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use keel_core::{Cancel, CancelCause};
use keel_store::StoreOptions;
use tokio::task::JoinHandle;

use crate::api::Doors;
use crate::api::state::{AppState, AuthMode};
use crate::config::{Config, LogFormat};
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::models::{ModelRegistry, ModelsError};
use crate::tools::ToolSet;
use crate::worker::WorkerPool;

/// How long runs get to release their chats on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `url` is shown with its password masked.
    #[error("database {url}: {source}")]
    Store {
        url: String,
        source: keel_store::StoreError,
    },
    #[error(transparent)]
    Models(#[from] ModelsError),
    #[error("tools: {0}")]
    Tools(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("config key `listen`: {0}")]
    Exposure(String),
    #[error("serving HTTP failed: {0}")]
    Http(std::io::Error),
}

/// A running daemon.
pub struct Running {
    pub addr: SocketAddr,
    shutdown: Cancel,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Starts a graceful shutdown: runs are cancelled with the shutdown cause and release
    /// their chats (still `running`, unowned) for a restart or another replica.
    pub fn shutdown(&self) {
        self.shutdown.cancel(CancelCause::Shutdown);
    }

    /// Waits until the daemon stopped.
    pub async fn wait(self) -> Result<(), ServeError> {
        match self.task.await {
            Ok(result) => result,
            Err(join) => Err(ServeError::Http(std::io::Error::other(join.to_string()))),
        }
    }
}

fn store_options(config: &Config) -> StoreOptions {
    StoreOptions {
        max_queue: config.runs.queue_max,
        lease_ttl: chrono::Duration::milliseconds(
            i64::try_from(config.runs.lease_ms).unwrap_or(30_000),
        ),
        max_connections: config
            .runs
            .database_connections(!config.database.starts_with("sqlite:")),
        clock: process_clock(),
        // A run's trace context is kept where something shows it: exported spans, or the
        // trace ids of JSON log lines.
        trace_runs: config.telemetry.is_some() || config.log_format == LogFormat::Json,
        ..StoreOptions::default()
    }
}

/// The system clock; in debug builds `KEEL_DEBUG_CLOCK_SKEW_MS` moves it, so that tests
/// can run replicas whose clocks disagree.
fn process_clock() -> std::sync::Arc<dyn keel_core::Clock> {
    let system = std::sync::Arc::new(keel_core::SystemClock);
    #[cfg(debug_assertions)]
    if let Some(skew) = std::env::var("KEEL_DEBUG_CLOCK_SKEW_MS")
        .ok()
        .and_then(|ms| ms.parse::<i64>().ok())
    {
        tracing::warn!(skew_ms = skew, "debug: this process's clock is skewed");
        return std::sync::Arc::new(keel_core::clock::OffsetClock::new(
            system,
            chrono::Duration::milliseconds(skew),
        ));
    }
    system
}

/// Starts the daemon with `config`, serving `doors` beside the API.
pub async fn start(config: Config, doors: Doors) -> Result<Running, ServeError> {
    crate::tools::check_workspace(&config).map_err(ServeError::Tools)?;
    let config = Arc::new(config);
    let store = keel_store::open_with(&config.database, store_options(&config))
        .await
        .map_err(|source| ServeError::Store {
            url: keel_store::redact_url(&config.database),
            source,
        })?;
    for user in &config.users {
        let stored = async {
            store
                .upsert_user_hash(&user.name, &user.token_sha256)
                .await?;
            if let Some(budget) = user.budget {
                store.set_budget(&user.name, Some(budget)).await?;
            }
            Ok(())
        };
        stored.await.map_err(|source| ServeError::Store {
            url: keel_store::redact_url(&config.database),
            source,
        })?;
    }
    let has_users = store
        .has_users()
        .await
        .map_err(|source| ServeError::Store {
            url: keel_store::redact_url(&config.database),
            source,
        })?;
    let listen_is_loopback = config
        .listen
        .parse::<SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    if !has_users && !listen_is_loopback && !config.allow_unauthenticated_public {
        return Err(ServeError::Exposure(format!(
            "{} is not a loopback address and no users exist; add one with `keel users add NAME` \
             or pass --allow-unauthenticated-public",
            config.listen
        )));
    }
    let auth = if has_users {
        AuthMode::Tokens
    } else {
        AuthMode::SingleUser
    };

    let models = ModelRegistry::build(&config).await?;
    let hub = Arc::new(Hub::new());
    let metrics = Arc::new(Metrics::new());
    let tools = Arc::new(
        ToolSet::build(&config, &metrics, has_users)
            .await
            .map_err(ServeError::Tools)?,
    );
    let shutdown = Cancel::new();
    let relay = tokio::spawn(crate::hub::relay_notices(store.clone(), hub.clone()));
    let pool = WorkerPool::new(
        store.clone(),
        hub.clone(),
        metrics.clone(),
        models.clone(),
        tools.clone(),
        config.clone(),
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: config.listen.clone(),
        source,
    })?;
    if config.demo {
        tracing::info!(
            "keel listening on http://{addr} with no provider configured: serving the built-in demo model `demo` (set OPENAI_API_KEY or ANTHROPIC_API_KEY, or write a config file, to use a real one)"
        );
    } else {
        tracing::info!(
            "keel listening on http://{addr}; models: {}",
            models
                .list()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    tracing::info!(database = store.backend(), auth = ?auth, workers = config.runs.workers, "ready");

    let status_of = tools.clone();
    let dependencies: Arc<dyn Fn() -> Vec<serde_json::Value> + Send + Sync> =
        Arc::new(move || status_of.status());
    let mut state = AppState::new(
        store,
        hub,
        metrics.clone(),
        models,
        config.clone(),
        auth,
        addr,
    );
    state.dependencies = dependencies;
    state.shutdown = shutdown.clone();
    let router = crate::api::router(state, doors);
    let workers = tokio::spawn(pool.run(SHUTDOWN_GRACE));
    let maintenance = tokio::spawn(tools.clone().maintain(shutdown.clone()));
    let stop = shutdown.clone();
    let header_read_timeout = config.server.header_read_timeout();
    let task = tokio::spawn(async move {
        let served =
            crate::net::server::serve(listener, router, header_read_timeout, stop, SHUTDOWN_GRACE)
                .await;
        let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), workers).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), maintenance).await;
        relay.abort();
        served.map_err(ServeError::Http)
    });
    Ok(Running {
        addr,
        shutdown,
        task,
    })
}
