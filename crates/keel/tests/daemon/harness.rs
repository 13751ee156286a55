//! Starting `keel serve` as a process, and talking to it like any client would.
//!
//! Longer than most files: the one client every daemon test shares.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

pub const WAIT: Duration = Duration::from_secs(30);

/// How long a wait sleeps between two looks.
const POLL: Duration = Duration::from_millis(20);

/// Looks with `probe` until it answers `Ok`, for at most [`WAIT`]; then fails the test with
/// its last `Err`, which says what never came and what was seen instead.
pub async fn eventually<T>(mut probe: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match probe().await {
            Ok(found) => return found,
            Err(seen) => assert!(tokio::time::Instant::now() < deadline, "{seen}"),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a condition alone: waits until `holds` answers true, or fails the
/// test with `what`.
pub async fn wait_until(what: &str, mut holds: impl AsyncFnMut() -> bool) {
    eventually(async || {
        if holds().await {
            Ok(())
        } else {
            Err(what.to_owned())
        }
    })
    .await
}

/// A `keel serve` process.
pub struct Daemon {
    child: Option<Child>,
    pub url: String,
    /// Every line the daemon logged so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts a daemon with the demo model on a free port. `config` is extra TOML.
    pub fn start(dir: &Path, database: &str, config: &str) -> Daemon {
        Self::start_with_env(dir, database, config, &[])
    }

    /// The process id of `keel serve`.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The `keel serve` command line of [`Daemon::start`].
    fn command(
        dir: &Path,
        database: &str,
        config: &str,
        env: &[(&str, &str)],
        uid: Option<u32>,
    ) -> Command {
        let config_path = dir.join("keel.toml");
        // A short lease unless the test sets its own.
        let lease = if config.contains("lease_ms") {
            ""
        } else {
            "lease_ms = 2000\n"
        };
        // No title calls unless the test asks for them: many tests count or inspect the
        // requests their provider received.
        let titles = if config.contains("titles") {
            ""
        } else {
            "titles = false\n"
        };
        std::fs::write(&config_path, format!("[runs]\n{lease}{titles}{config}")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--database",
                database,
                "--config",
            ])
            .arg(&config_path)
            .current_dir(dir)
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("KEEL_CONFIG")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut command, uid);
            std::os::unix::process::CommandExt::gid(&mut command, uid);
        }
        command
    }

    /// Like [`Daemon::start`], with extra environment variables.
    pub fn start_with_env(
        dir: &Path,
        database: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> Daemon {
        Self::start_as(dir, database, config, env, None)
    }

    /// Like [`Daemon::start_with_env`], as the user `uid` (group `uid` too) when given.
    pub fn start_as(
        dir: &Path,
        database: &str,
        config: &str,
        env: &[(&str, &str)],
        uid: Option<u32>,
    ) -> Daemon {
        let mut child = Self::command(dir, database, config, env, uid)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[keel] {line}");
                lines.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let url = loop {
            let line = rx
                .recv_timeout(WAIT)
                .expect("keel serve did not report its address");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest
                    .split(|c: char| c.is_whitespace() || c == ';')
                    .next()
                    .unwrap()
                    .to_owned();
            }
        };
        Daemon {
            child: Some(child),
            url,
            log,
        }
    }

    /// Runs a daemon that must refuse to start; returns what it printed.
    pub fn refused(dir: &Path, database: &str, config: &str) -> String {
        Self::refused_with_env(dir, database, config, &[])
    }

    /// Like [`Daemon::refused`], with extra environment variables.
    pub fn refused_with_env(
        dir: &Path,
        database: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> String {
        let output = Self::command(dir, database, config, env, None)
            .output()
            .unwrap();
        assert!(!output.status.success(), "keel serve started");
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The daemon's log so far, as one text.
    pub fn logged(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The port the daemon listens on.
    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.url)
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Waits for the daemon to exit by itself (a debug build's `KEEL_DEBUG_ABORT` point).
    pub async fn wait_exit(&mut self) {
        let mut child = self.child.take().unwrap();
        wait_until("keel serve did not exit", async || {
            child.try_wait().unwrap().is_some()
        })
        .await;
    }

    /// SIGTERM, then waits for the exit; returns how long it took.
    pub fn terminate(&mut self) -> Duration {
        let mut child = self.child.take().unwrap();
        let started = std::time::Instant::now();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = child.wait().unwrap();
        assert!(exit.success(), "keel exited with {exit:?}");
        started.elapsed()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A client with an optional bearer token.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub token: Option<String>,
}

/// A SQLite database in `dir`.
pub fn sqlite(dir: &Path) -> String {
    format!("sqlite://{}/keel.db", dir.display())
}

/// A fresh directory and the SQLite database in it, for a test that starts a daemon on it
/// more than once (a restart, a kill -9); the directory lives as long as the guard.
pub fn scratch() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    (dir, database)
}

/// A daemon with no configuration (the built-in demo model) on a SQLite database in a fresh
/// directory, which lives as long as the returned guard.
pub fn demo_daemon() -> (tempfile::TempDir, Daemon) {
    demo_daemon_with("")
}

/// [`demo_daemon`] with `config` as extra TOML under `[runs]` (and any later tables).
pub fn demo_daemon_with(config: &str) -> (tempfile::TempDir, Daemon) {
    demo_daemon_with_env(config, &[])
}

/// [`demo_daemon_with`] with extra environment variables: the pauses and faults of debug
/// builds (`KEEL_DEBUG_*`) that land a test's change inside a window.
pub fn demo_daemon_with_env(config: &str, env: &[(&str, &str)]) -> (tempfile::TempDir, Daemon) {
    let (dir, database) = scratch();
    let daemon = Daemon::start_with_env(dir.path(), &database, config, env);
    (dir, daemon)
}

/// The texts of the assistant messages among `messages`, in order.
pub fn assistant_texts(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(text_of)
        .collect()
}

/// A plain HTTP client on the process's rustls crypto provider, which `keel` installs in
/// `main`; reqwest needs one to build any client.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A POST of `body` to `url` whose answer is read as it streams (the AI SDK and Responses
/// endpoints answer with their own SSE), with no token.
pub async fn post_stream(url: &str, body: &Value) -> reqwest::Response {
    http_client().post(url).json(body).send().await.unwrap()
}

/// The JSON answer of a GET of `url`, with no token.
pub async fn get_json(url: &str) -> Value {
    http_client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

impl Client {
    pub fn new() -> Self {
        Self {
            http: http_client(),
            token: None,
        }
    }

    pub fn with_token(token: &str) -> Self {
        Self {
            http: http_client(),
            token: Some(token.to_owned()),
        }
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.auth(self.http.request(method, url));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn post(&self, url: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, url, Some(body)).await
    }

    pub async fn get(&self, url: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, url, None).await
    }

    /// Creates a chat with `text`; returns its id.
    pub async fn create_chat(&self, daemon: &Daemon, body: Value) -> String {
        let (status, chat) = self.post(&daemon.api("/chats"), body).await;
        assert_eq!(status, 201, "{chat}");
        chat["id"].as_str().unwrap().to_owned()
    }

    /// A new chat whose first scripted reply is committed (the chat is `waiting`).
    pub async fn replied_chat(&self, daemon: &Daemon, reply: &str) -> String {
        let id = self
            .create_chat(daemon, json!({"text": scripted(reply, 0.0)}))
            .await;
        self.wait_status(daemon, &id, "waiting").await;
        id
    }

    /// A chat that offers the client-side tool `get_weather`: the demo model calls it in
    /// its first step and says `then` once answered. Returns when the call is pending (the
    /// chat is `requires_action`).
    pub async fn weather_chat(&self, daemon: &Daemon, then: &str) -> String {
        let script = json!({"steps": [
            {"tool_calls": [{"name": "get_weather", "args": {"city": "Oslo"}}]},
            {"text": then}
        ]});
        let id = self.create_chat(daemon, weather_chat_body(&script)).await;
        self.wait_status(daemon, &id, "requires_action").await;
        id
    }

    /// Waits until the chat is `waiting` and returns its messages; an `error` fails the test
    /// with the chat's error.
    pub async fn settle(&self, daemon: &Daemon, id: &str) -> Vec<Value> {
        eventually(async || {
            let chat = self.chat(daemon, id).await;
            match chat["status"].as_str() {
                Some("waiting") => Ok(self.messages(daemon, id).await),
                Some("error") => panic!("the chat failed: {}", chat["last_error"]),
                _ => Err(format!("chat never settled: {chat}")),
            }
        })
        .await
    }

    pub async fn chat(&self, daemon: &Daemon, id: &str) -> Value {
        let (status, chat) = self.get(&daemon.api(&format!("/chats/{id}"))).await;
        assert_eq!(status, 200, "{chat}");
        chat
    }

    pub async fn messages(&self, daemon: &Daemon, id: &str) -> Vec<Value> {
        let (status, body) = self
            .get(&daemon.api(&format!("/chats/{id}/messages")))
            .await;
        assert_eq!(status, 200, "{body}");
        body["messages"].as_array().unwrap().clone()
    }

    /// Creates a chat and opens its live events from the start, with an empty transcript
    /// to follow them into.
    pub async fn watched_chat(&self, daemon: &Daemon, body: Value) -> (String, Events, Transcript) {
        let id = self.create_chat(daemon, body).await;
        let events = self.events(daemon, &id, None).await;
        (id, events, Transcript::default())
    }

    /// A chat that answered `"ready"` and then got `text` as its second turn, with its live
    /// events opened (from the start) before that turn was sent: no event of the turn can
    /// be over before the stream connects, however fast the provider.
    pub async fn watched_turn(&self, daemon: &Daemon, text: &str) -> (String, Events, Transcript) {
        let id = self.replied_chat(daemon, "ready").await;
        let events = self.events(daemon, &id, None).await;
        let (status, body) = self.send_message(daemon, &id, json!({"text": text})).await;
        assert_eq!(status, 202, "{body}");
        (id, events, Transcript::default())
    }

    /// A chat whose scripted reply `text` streams at `rate` words a second on `daemon`,
    /// followed until `parts` of its text parts arrived: the reply is under way.
    pub async fn streaming_chat(
        &self,
        daemon: &Daemon,
        text: &str,
        rate: f64,
        parts: usize,
    ) -> (String, Events, Transcript) {
        let (id, mut events, mut transcript) = self
            .watched_chat(daemon, json!({"text": scripted(text, rate)}))
            .await;
        transcript.follow_parts(&mut events, parts).await;
        (id, events, transcript)
    }

    /// `POST .../messages` with `body`.
    pub async fn send_message(&self, daemon: &Daemon, id: &str, body: Value) -> (u16, Value) {
        self.post(&daemon.api(&format!("/chats/{id}/messages")), body)
            .await
    }

    /// `PUT .../messages/{message}`: a new version of a user message.
    pub async fn edit(&self, daemon: &Daemon, id: &str, message: i64, body: Value) -> (u16, Value) {
        self.send(
            reqwest::Method::PUT,
            &daemon.api(&format!("/chats/{id}/messages/{message}")),
            Some(body),
        )
        .await
    }

    /// `POST .../interrupt`.
    pub async fn interrupt(&self, daemon: &Daemon, id: &str) -> (u16, Value) {
        self.post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
            .await
    }

    /// Polls the current branch until `done` holds for it (bounded by [`WAIT`]).
    pub async fn wait_messages(
        &self,
        daemon: &Daemon,
        id: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        eventually(async || {
            let messages = self.messages(daemon, id).await;
            if done(&messages) {
                Ok(messages)
            } else {
                Err(format!("the messages never came: {messages:?}"))
            }
        })
        .await
    }

    /// Polls until the chat has `status` (bounded by [`WAIT`]).
    pub async fn wait_status(&self, daemon: &Daemon, id: &str, status: &str) -> Value {
        eventually(async || {
            let chat = self.chat(daemon, id).await;
            if chat["status"] == status {
                Ok(chat)
            } else {
                Err(format!("chat never reached {status}: {chat}"))
            }
        })
        .await
    }

    /// Opens the caller's chat-list feed (`GET /events`).
    pub async fn list_feed(&self, daemon: &Daemon) -> Events {
        let response = self
            .auth(self.http.get(daemon.api("/events")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        Events {
            stream: Box::pin(response.bytes_stream().eventsource()),
        }
    }

    /// Opens the live events of a chat.
    pub async fn events(&self, daemon: &Daemon, id: &str, last_event_id: Option<&str>) -> Events {
        let mut request = self.auth(self.http.get(daemon.api(&format!("/chats/{id}/events"))));
        if let Some(last) = last_event_id {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        Events {
            stream: Box::pin(response.bytes_stream().eventsource()),
        }
    }
}

/// One SSE event.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub event: String,
    pub data: Value,
}

pub struct Events {
    stream: std::pin::Pin<
        Box<
            dyn Stream<
                    Item = Result<
                        eventsource_stream::Event,
                        eventsource_stream::EventStreamError<reqwest::Error>,
                    >,
                > + Send,
        >,
    >,
}

impl Events {
    /// The next event, or `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Event> {
        let event = tokio::time::timeout(WAIT, self.stream.next())
            .await
            .expect("no event arrived in time")?;
        let event = event.ok()?;
        Some(Event {
            id: event.id,
            event: event.event,
            data: serde_json::from_str(&event.data).unwrap_or(Value::Null),
        })
    }
}

/// What a client rebuilds from live events: committed messages plus the step in progress.
#[derive(Debug, Default)]
pub struct Transcript {
    pub messages: Vec<Value>,
    pub live_text: String,
    /// Refusal and reasoning text of the step in progress, as streamed.
    pub live_refusal: String,
    pub live_reasoning: String,
    pub last_id: Option<String>,
    pub status: Option<String>,
    pub retries: usize,
    pub resets: usize,
    /// `branch` events: the current branch changed and the messages shown were dropped.
    pub branches: usize,
}

impl Transcript {
    /// Applies one event.
    pub fn apply(&mut self, event: &Event) {
        self.last_id = Some(event.id.clone());
        match event.event.as_str() {
            "message" => {
                self.clear_live();
                self.messages.push(event.data.clone());
            }
            "part" => {
                let part = &event.data["part"];
                let text = part["text"].as_str().unwrap_or_default();
                match part["type"].as_str() {
                    Some("text") => self.live_text.push_str(text),
                    Some("refusal") => self.live_refusal.push_str(text),
                    Some("reasoning") => self.live_reasoning.push_str(text),
                    _ => {}
                }
            }
            "stream_reset" => {
                self.resets += 1;
                self.clear_live();
            }
            "branch" => {
                self.branches += 1;
                self.messages.clear();
                self.clear_live();
            }
            "retry" => self.retries += 1,
            "status" => self.status = event.data["status"].as_str().map(str::to_owned),
            _ => {}
        }
    }

    fn clear_live(&mut self) {
        self.live_text.clear();
        self.live_refusal.clear();
        self.live_reasoning.clear();
    }

    /// Follows events until the chat is idle (`waiting`) after a committed assistant reply.
    pub async fn follow_until(&mut self, events: &mut Events, status: &str) {
        while let Some(event) = events.next().await {
            self.apply(&event);
            if self.status.as_deref() == Some(status) && event.event == "status" {
                return;
            }
        }
        panic!("the event stream ended before the chat became {status}");
    }

    /// Reads events until at least `n` text parts of the step in progress arrived.
    pub async fn follow_parts(&mut self, events: &mut Events, n: usize) {
        let mut seen = 0;
        while let Some(event) = events.next().await {
            self.apply(&event);
            if event.event == "part" && event.data["part"]["type"] == "text" {
                seen += 1;
                if seen >= n {
                    return;
                }
            }
        }
        panic!("the event stream ended after {seen} parts");
    }

    /// Assistant texts of the committed messages.
    pub fn assistant_texts(&self) -> Vec<String> {
        assistant_texts(&self.messages)
    }
}

pub fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The body creating a chat that offers the client-side tool `get_weather` and scripts
/// the demo model with `script`.
pub fn weather_chat_body(script: &Value) -> Value {
    json!({
        "text": format!("weather?\n#mock {script}"),
        "tools": [{"name": "get_weather", "description": "Weather by city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    })
}

/// A user message scripting the demo model's reply.
pub fn scripted(text: &str, rate: f64) -> String {
    format!("go\n#mock {}", json!({"text": text, "rate": rate}))
}

/// `n` distinct words.
pub fn words(n: usize) -> String {
    (1..=n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the `keel` command line (`keel ARGS`) in `dir` with `env`, away from any
/// configuration or database the test's own environment names.
pub fn keel(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .current_dir(dir)
        .env_remove("KEEL_CONFIG")
        .env_remove("KEEL_DATABASE_URL")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}
