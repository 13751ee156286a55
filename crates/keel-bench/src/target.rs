//! What the soak's chats talk to: one daemon, or several replicas sharing one PostgreSQL
//! database, each restarted on its own address after a kill. Every request goes to a
//! replica chosen at random and is retried while that replica is down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use rand::RngExt;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::processes::Process;
use keel_client::Api;

/// One daemon of the soak.
pub struct Replica {
    pub api: Api,
    pub url: String,
    /// The process; the kill task replaces it with each restart.
    pub daemon: Mutex<Process>,
}

/// Everything the chat tasks share.
pub struct Target {
    pub replicas: Vec<Replica>,
    pub server_errors: AtomicUsize,
    /// Chats whose user asked for a compaction that has not finished yet; read at each
    /// kill, to count kills that land during a summary.
    pub compacting: AtomicUsize,
    /// Chats whose open event stream fell silent before delivering their last messages,
    /// which a reconnect then delivered: a stall, not a loss.
    pub stalls: AtomicUsize,
    /// `stream_reset` events the clients were sent: a daemon took a client's position for
    /// one the chat never reached, and replayed the step from its start.
    pub resets: AtomicUsize,
    pub deadline: Instant,
    /// Restarts under way and when the last one ended: a check's patience counts only
    /// time in which every replica served (see [`Target::patient`]).
    pub restarts: Restarts,
}

/// Restarts of the soak's daemons, as the checks' patience needs to know them.
#[derive(Debug)]
pub struct Restarts {
    under_way: AtomicUsize,
    /// Kills so far.
    kills: AtomicUsize,
    last_ready: Mutex<Instant>,
}

impl Default for Restarts {
    fn default() -> Self {
        Self {
            under_way: AtomicUsize::new(0),
            kills: AtomicUsize::new(0),
            last_ready: Mutex::new(Instant::now()),
        }
    }
}

impl Restarts {
    /// A replica is about to be killed; it restarts.
    pub fn begin(&self) {
        self.kills.fetch_add(1, Ordering::SeqCst);
        self.under_way.fetch_add(1, Ordering::Relaxed);
    }

    /// Kills so far (counted as each begins).
    pub fn kills(&self) -> usize {
        self.kills.load(Ordering::SeqCst)
    }

    /// The restarted replica is ready.
    pub fn end(&self) {
        *self
            .last_ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.under_way.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request's answer.
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
    /// An earlier attempt lost its answer (the daemon died), so it may have taken effect.
    pub retried: bool,
}

impl Target {
    /// A replica chosen at random.
    pub fn any(&self) -> &Replica {
        self.pick().1
    }

    /// A replica chosen at random, with its index.
    pub fn pick(&self) -> (usize, &Replica) {
        let index = rand::rng().random_range(0..self.replicas.len());
        (index, &self.replicas[index])
    }

    pub fn lock(replica: &Replica) -> std::sync::MutexGuard<'_, Process> {
        replica
            .daemon
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a check that started waiting at `since` may wait on: `patience` counts
    /// from the later of `since` and the end of the latest restart, and not while one is
    /// under way, so a stream that is silent because its daemon was down (a restart takes
    /// seconds under load) is told apart from one that misses what was committed. The
    /// soak's deadline bounds it all.
    pub fn patient(&self, since: Instant, patience: Duration) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        if self.restarts.under_way.load(Ordering::Relaxed) > 0 {
            return true;
        }
        let ready = *self
            .restarts
            .last_ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        since.max(ready).elapsed() < patience
    }

    /// One API call to a random replica, retried across connection failures; a 5xx is
    /// counted and is an error, any other answer is returned.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let mut retried = false;
        loop {
            ensure!(
                Instant::now() < self.deadline,
                "out of time calling {method} {path}"
            );
            let url = format!("{}/api/v1{path}", self.any().url);
            let mut request = reqwest::Client::new()
                .request(method.clone(), url)
                .timeout(Duration::from_secs(30));
            if let Some(body) = body {
                request = request.json(body);
            }
            if let Some(key) = idempotency_key {
                request = request.header("idempotency-key", key);
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(_) => {
                    retried = true;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let status = response.status();
            let Ok(text) = response.text().await else {
                retried = true;
                continue;
            };
            if status.is_server_error() {
                self.server_errors.fetch_add(1, Ordering::Relaxed);
                bail!("{method} {path} answered {status}: {text}");
            }
            let body = serde_json::from_str(&text).unwrap_or(Value::Null);
            return Ok(Answer {
                status,
                body,
                retried,
            });
        }
    }

    /// [`Self::request`] that must succeed.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Value> {
        let answer = self
            .request(method.clone(), path, body, idempotency_key)
            .await?;
        ensure!(
            answer.status.is_success(),
            "{method} {path} answered {}: {}",
            answer.status,
            answer.body
        );
        Ok(answer.body)
    }
}
