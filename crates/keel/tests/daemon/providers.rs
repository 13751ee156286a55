//! Each wire protocol through the daemon, against the mock provider with the rules the real
//! APIs enforce switched on: a request a real API would refuse fails these tests.

use serde_json::{Value, json};

use crate::harness::*;

/// The three protocols, as the model ids the fixture configures.
pub const PROTOCOLS: [&str; 3] = ["chat", "responses", "anthropic"];

/// A strict mock provider and a daemon with one model per protocol on it.
pub struct Fixture {
    pub mock: keel_mock::MockServer,
    pub daemon: Daemon,
    pub client: Client,
    config: String,
    database: String,
    dir: tempfile::TempDir,
}

impl Fixture {
    /// `runs` are extra `[runs]` keys; `model` extra keys of every `[[models]]` entry.
    pub async fn start(runs: &str, model: &str) -> Fixture {
        Self::start_named(runs, model, "mock").await
    }

    /// As [`Fixture::start`], with `upstream` as every model's upstream name.
    pub async fn start_named(runs: &str, model: &str, upstream: &str) -> Fixture {
        Self::build(runs, model, upstream, &[]).await
    }

    /// As [`Fixture::start`], with extra environment variables for the daemon.
    pub async fn start_with_env(runs: &str, model: &str, env: &[(&str, &str)]) -> Fixture {
        Self::build(runs, model, "mock", env).await
    }

    async fn build(runs: &str, model: &str, upstream: &str, env: &[(&str, &str)]) -> Fixture {
        let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
            .await
            .unwrap();
        let root = format!("http://{}", mock.addr());
        // Base URLs as the official SDKs take them: OpenAI's with /v1, Anthropic's bare.
        let dir = tempfile::tempdir().unwrap();
        let workspace = tool_workspace(dir.path());
        let mut config = format!(
            "{runs}\n\n[tools]\nbuiltin = [\"read_file\"]\nworkspace = \"{}\"\n\n[[providers]]\nname = \"chat\"\nkind = \"openai-chat\"\nbase_url = \"{root}/v1\"\n\n\
             [[providers]]\nname = \"responses\"\nkind = \"openai-responses\"\nbase_url = \"{root}/v1\"\n\n\
             [[providers]]\nname = \"anthropic\"\nkind = \"anthropic\"\nbase_url = \"{root}\"\n",
            workspace.display()
        );
        for protocol in PROTOCOLS {
            let default = if protocol == "chat" {
                "default = true\n"
            } else {
                ""
            };
            config.push_str(&format!(
                "\n[[models]]\nid = \"{protocol}\"\nprovider = \"{protocol}\"\nmodel = \"{upstream}\"\n{default}{model}\n"
            ));
        }
        Self::launch(mock, dir, config, env)
    }

    /// Starts a daemon in `dir` with `config`, whose providers are served by `mock`.
    pub fn launch(
        mock: keel_mock::MockServer,
        dir: tempfile::TempDir,
        config: String,
        env: &[(&str, &str)],
    ) -> Fixture {
        let database = sqlite(dir.path());
        let daemon = Daemon::start_with_env(dir.path(), &database, &config, env);
        Fixture {
            mock,
            daemon,
            client: Client::new(),
            config,
            database,
            dir,
        }
    }

    /// Kills the daemon with SIGKILL and starts a new one on the same database.
    pub fn kill_and_restart(&mut self) {
        self.daemon.kill();
        self.daemon = Daemon::start(self.dir.path(), &self.database, &self.config);
    }

    /// Waits until the chat's run has ended (neither `running` nor `interrupting`) and
    /// returns the chat.
    pub async fn ended(&self, id: &str) -> Value {
        eventually(async || {
            let chat = self.client.chat(&self.daemon, id).await;
            if matches!(chat["status"].as_str(), Some("running" | "interrupting")) {
                Err(format!("the run never ended: {chat}"))
            } else {
                Ok(chat)
            }
        })
        .await
    }

    /// The latest request the mock received on `protocol`'s endpoint.
    pub fn last_request(&self, protocol: &str) -> Value {
        let path = match protocol {
            "chat" => "/v1/chat/completions",
            "responses" => "/v1/responses",
            _ => "/v1/messages",
        };
        self.mock
            .recent_requests()
            .into_iter()
            .rev()
            .find(|(p, _)| p == path)
            .map(|(_, body)| body)
            .unwrap_or_else(|| panic!("no request on {path}"))
    }

    /// Starts a chat on `model` with `text` and `script` as its directive.
    pub async fn chat(&self, model: &str, text: &str, script: &Value) -> String {
        self.client
            .create_chat(
                &self.daemon,
                json!({"model": model, "text": format!("{text}\n#mock {script}")}),
            )
            .await
    }

    /// Sends a follow-up user message.
    pub async fn send(&self, id: &str, text: &str, script: &Value) {
        let (status, body) = self
            .client
            .post(
                &self.daemon.api(&format!("/chats/{id}/messages")),
                json!({"text": format!("{text}\n#mock {script}")}),
            )
            .await;
        assert!(status == 202 || status == 201, "{status} {body}");
    }

    /// Waits until the chat is `waiting` and returns its messages; an `error` fails the test
    /// with the chat's error.
    pub async fn settle(&self, id: &str) -> Vec<Value> {
        self.client.settle(&self.daemon, id).await
    }

    /// Waits until the chat is in `error` and returns its `last_error`.
    pub async fn failure(&self, id: &str) -> Value {
        let chat = self.client.wait_status(&self.daemon, id, "error").await;
        chat["last_error"].clone()
    }
}

/// A workspace under `dir` for `read_file` to read: `a.txt` says alpha, `b.txt` bravo.
pub fn tool_workspace(dir: &std::path::Path) -> std::path::PathBuf {
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("a.txt"), "alpha").unwrap();
    std::fs::write(workspace.join("b.txt"), "bravo").unwrap();
    workspace
}

/// The parts of the messages with `role`, flattened.
pub fn parts_of(messages: &[Value], role: &str) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["role"] == role)
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocol_answers_with_the_base_urls_the_sdks_use() {
    let f = Fixture::start("", "").await;
    for protocol in PROTOCOLS {
        let id = f
            .chat(protocol, "hi", &json!({"text": "hello there"}))
            .await;
        let messages = f.settle(&id).await;
        assert_eq!(
            text_of(messages.last().unwrap()),
            "hello there",
            "{protocol}"
        );
    }
}

/// The text of the last message.
fn last_text(messages: &[Value]) -> String {
    text_of(messages.last().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_streamed_without_ids_run_again_on_every_turn() {
    let f = Fixture::start("", "").await;
    let read = |path: &str| json!({"tool_calls": [{"name": "read_file", "args": {"path": path}, "id": ""}]});
    let id = f.chat("chat", "read a", &read("a.txt")).await;
    let first = f.settle(&id).await;
    assert!(last_text(&first).contains("alpha"), "{first:?}");
    f.send(&id, "read b", &read("b.txt")).await;
    let second = f.settle(&id).await;
    // The second call gets its own result, not the first call's recorded one.
    assert!(last_text(&second).contains("bravo"), "{second:?}");
    let results = parts_of(&second, "tool");
    assert_eq!(results.len(), 2, "{results:?}");
    assert_ne!(results[0]["tool_call_id"], results[1]["tool_call_id"]);
    assert!(!results[0]["tool_call_id"].as_str().unwrap().ends_with("_0"));
}

const FAST_RETRIES: &str = "retry_initial_delay_ms = 10\nretry_max_delay_ms = 1000\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_in_any_form_never_parks_a_worker_or_panics() {
    let f = Fixture::start(FAST_RETRIES, "").await;
    let past = "Wed, 21 Oct 2015 07:28:00 GMT";
    for protocol in PROTOCOLS {
        // Waits Keel can honour (negative, NaN and past dates mean no wait) are retried.
        for (n, retry_after) in ["-3", "NaN", past, "0.01"].into_iter().enumerate() {
            let script = json!({"id": format!("{protocol}-{n}"), "text": "ok",
                "error": {"status": 429, "retry_after": retry_after, "times": 1}});
            let id = f.chat(protocol, "hi", &script).await;
            assert_eq!(
                last_text(&f.settle(&id).await),
                "ok",
                "{protocol} {retry_after}"
            );
        }
        // Longer than retry_max_delay_ms, or too long to represent: a clear rate_limit error
        // at once.
        for retry_after in [json!("1e20"), json!(5)] {
            let script =
                json!({"text": "never", "error": {"status": 429, "retry_after": retry_after}});
            let id = f.chat(protocol, "hi", &script).await;
            let error = f.failure(&id).await;
            assert_eq!(error["kind"], "rate_limit", "{protocol}: {error}");
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("retry_max_delay_ms"),
                "{error}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudflare_5xx_and_in_stream_server_errors_are_retried() {
    let f = Fixture::start(FAST_RETRIES, "").await;
    for protocol in PROTOCOLS {
        for status in [520, 522, 524, 527] {
            let script = json!({"id": format!("{protocol}-{status}"), "text": "ok",
                "error": {"status": status, "body": "<html>error code: 52x</html>", "times": 1}});
            let id = f.chat(protocol, "hi", &script).await;
            assert_eq!(last_text(&f.settle(&id).await), "ok", "{protocol} {status}");
        }
    }
    // The Responses API names an in-stream failure by `code` alone.
    let script = json!({"id": "in-stream", "text": "ok",
        "stream_error": {"after": 0, "type": "server_error", "message": "The server had an error", "times": 1}});
    let id = f.chat("responses", "hi", &script).await;
    assert_eq!(last_text(&f.settle(&id).await), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_outlast_the_idle_timeout_on_every_protocol() {
    let f = Fixture::start("idle_timeout_ms = 600\nretry_initial_delay_ms = 10\n", "").await;
    for protocol in PROTOCOLS {
        // Silent but for keep-alives for 1.5 s, with an idle limit of 0.6 s.
        let script = json!({"id": format!("ping-{protocol}"), "text": "a b c d",
            "stall": {"after": 2, "ms": 1500, "ping_ms": 100}});
        let id = f.chat(protocol, "hi", &script).await;
        assert_eq!(last_text(&f.settle(&id).await), "a b c d", "{protocol}");
        assert_eq!(
            f.mock.attempts(&format!("ping-{protocol}"), 0),
            1,
            "{protocol}: no retry"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_do_not_extend_a_models_startup_timeout() {
    let f = Fixture::start("retry_initial_delay_ms = 10\n", "startup_timeout_ms = 500").await;
    for protocol in PROTOCOLS {
        // The first attempt only pings, for longer than the model's start-up limit.
        let script = json!({"id": format!("start-{protocol}"), "text": "ok",
            "stall": {"after": 0, "ms": 3000, "ping_ms": 100, "times": 1}});
        let id = f.chat(protocol, "hi", &script).await;
        assert_eq!(last_text(&f.settle(&id).await), "ok", "{protocol}");
        assert_eq!(
            f.mock.attempts(&format!("start-{protocol}"), 0),
            2,
            "{protocol}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_cut_by_max_tokens_gets_an_error_result_and_is_never_run() {
    let f = Fixture::start("", "").await;
    for protocol in PROTOCOLS {
        let script = json!({"tool_calls": [{"name": "read_file", "args": "{\"path\": \"a.t"}],
            "finish": "length"});
        let id = f.chat(protocol, "read", &script).await;
        let messages = f.settle(&id).await;
        let results = parts_of(&messages, "tool");
        assert_eq!(results.len(), 1, "{protocol}: {messages:?}");
        assert_eq!(results[0]["is_error"], true);
        assert!(
            results[0]["result"]
                .to_string()
                .contains("not a complete JSON object"),
            "{protocol}: {}",
            results[0]
        );
        // The cut call and its error result make a history the provider accepts.
        f.send(&id, "go on", &json!({"text": "fine"})).await;
        assert_eq!(last_text(&f.settle(&id).await), "fine", "{protocol}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_reasoning_goes_back_with_the_items_that_followed_it() {
    let f = Fixture::start("", "").await;
    let script = json!({"steps": [
        {"reasoning": "I should read a.", "tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}]},
        {"reasoning": "It says alpha.", "text": "It says alpha."}
    ]});
    let id = f.chat("responses", "what is in a?", &script).await;
    let messages = f.settle(&id).await;
    assert_eq!(last_text(&messages), "It says alpha.");
    // Every later request replays both reasoning items, each followed by its own item.
    f.send(
        &id,
        "and again?",
        &json!({"reasoning": "Same.", "text": "Still alpha."}),
    )
    .await;
    assert_eq!(last_text(&f.settle(&id).await), "Still alpha.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_and_unknown_hosts_are_retried_then_reported_as_connection_errors() {
    // A port nothing listens on refuses; `.invalid` never resolves (RFC 6761).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config =
        "retry_max_attempts = 2\nretry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n".to_owned();
    let mut models = Vec::new();
    for (host, root) in [
        ("refused", format!("http://{closed}")),
        ("unknown", "http://keel-test.invalid".to_owned()),
    ] {
        for (protocol, kind, v1) in [
            ("chat", "openai-chat", "/v1"),
            ("responses", "openai-responses", "/v1"),
            ("anthropic", "anthropic", ""),
        ] {
            let name = format!("{host}-{protocol}");
            config.push_str(&format!(
                "\n[[providers]]\nname = \"{name}\"\nkind = \"{kind}\"\nbase_url = \"{root}{v1}\"\n\
                 [[models]]\nid = \"{name}\"\nprovider = \"{name}\"\nmodel = \"m\"\n"
            ));
            models.push(name);
        }
    }
    let database = format!("sqlite://{}/keel.db", dir.path().display());
    let daemon = Daemon::start_with_env(
        dir.path(),
        &database,
        &config,
        &[("OPENAI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")],
    );
    let client = Client::new();
    for model in models {
        let id = client
            .create_chat(&daemon, json!({"model": model, "text": "hi"}))
            .await;
        let chat = client.wait_status(&daemon, &id, "error").await;
        assert_eq!(chat["last_error"]["kind"], "connection", "{model}: {chat}");
    }
    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains("kind=\"connection\""),
        "the failures were retried: {metrics}"
    );
}
