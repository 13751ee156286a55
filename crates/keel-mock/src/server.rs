//! The HTTP server: routes, graceful shutdown and an in-process handle.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::extract::State as Extract;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::MockConfig;
use crate::state::State;
use crate::tally::{Reported, Stats};
use crate::{anthropic, gemini, models, openai_chat, responses};

/// Requests larger than this are refused. Far above axum's 2 MiB default, because long
/// agent conversations and context-overflow tests send big prompts.
const MAX_REQUEST_BYTES: usize = 256 * 1024 * 1024;

fn app(state: Arc<State>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(openai_chat::handle))
        .route("/v1/responses", post(responses::handle))
        .route("/v1/messages", post(anthropic::handle))
        .route("/v1/models", get(models::list))
        .route("/stats", get(stats))
        .route(
            "/v1beta/models/{target}",
            post(gemini::handle).get(gemini::model),
        )
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

/// `GET /stats`: what the mock reported so far.
async fn stats(Extract(state): Extract<Arc<State>>) -> Json<Value> {
    let completed = state.reported();
    Json(
        serde_json::to_value(Stats {
            completed: &completed,
        })
        .unwrap_or(Value::Null),
    )
}

/// Serves the mock on `listener` until `shutdown` completes. Streams still running then
/// are ended, so shutdown does not wait for slow or stalled replies.
pub async fn serve(
    listener: TcpListener,
    config: MockConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let state = Arc::new(State::new(config, CancellationToken::new()));
    serve_state(listener, state, shutdown).await
}

async fn serve_state(
    listener: TcpListener,
    state: Arc<State>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let streams = state.shutdown.clone();
    let signal = async move {
        shutdown.await;
        streams.cancel();
    };
    // Each token leaves at once, as a real provider's does: with Nagle's algorithm a token
    // written while the previous one is unacknowledged would wait for the peer's delayed
    // acknowledgement (up to 40 ms on Linux) and show as the daemon's latency.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app(state))
        .with_graceful_shutdown(signal)
        .await
}

/// Starts a mock server on `127.0.0.1` with a free port, in the current runtime.
pub async fn spawn(config: MockConfig) -> io::Result<MockServer> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State::new(config, CancellationToken::new()));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_state(listener, Arc::clone(&state), async move {
        // A dropped sender also means stop.
        let _ = stopped.await;
    }));
    Ok(MockServer {
        addr,
        state,
        stop: Some(stop),
        task: Some(task),
    })
}

/// A running in-process mock server. Dropping it stops the server.
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl MockServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL clients are configured with, ending in `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// How many requests reached step `step` of the script with id `script_id`.
    pub fn attempts(&self, script_id: &str, step: usize) -> u32 {
        self.state.attempts(script_id, step)
    }

    /// Every response delivered whole so far, with the usage it reported (`GET /stats`).
    pub fn reported(&self) -> Vec<Reported> {
        self.state.reported()
    }

    /// The latest requests the server received (path and JSON body), oldest first; a few
    /// dozen are kept.
    pub fn recent_requests(&self) -> Vec<(String, serde_json::Value)> {
        self.state.recent_requests()
    }

    /// Stops the server and waits until it has closed.
    pub async fn shutdown(mut self) -> io::Result<()> {
        self.state.shutdown.cancel();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish()
    }
}
