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
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// `runs` are extra `[runs]` keys; `model` extra keys of every `[[models]]` entry.
    pub async fn start(runs: &str, model: &str) -> Fixture {
        Self::start_named(runs, model, "mock").await
    }

    /// As [`Fixture::start`], with `upstream` as every model's upstream name.
    pub async fn start_named(runs: &str, model: &str, upstream: &str) -> Fixture {
        let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
            .await
            .unwrap();
        let root = format!("http://{}", mock.addr());
        // Base URLs as the official SDKs take them: OpenAI's with /v1, Anthropic's bare.
        let mut config = format!(
            "{runs}\n\n[[providers]]\nname = \"chat\"\nkind = \"openai-chat\"\nbase_url = \"{root}/v1\"\n\n\
             [[providers]]\nname = \"responses\"\nkind = \"openai-responses\"\nbase_url = \"{root}/v1\"\n\n\
             [[providers]]\nname = \"anthropic\"\nkind = \"anthropic\"\nbase_url = \"{root}\"\n"
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
        let dir = tempfile::tempdir().unwrap();
        let database = format!("sqlite://{}/keel.db", dir.path().display());
        let daemon = Daemon::start(dir.path(), &database, &config);
        Fixture {
            mock,
            daemon,
            client: Client::new(),
            _dir: dir,
        }
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
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let chat = self.client.chat(&self.daemon, id).await;
            match chat["status"].as_str() {
                Some("waiting") => return self.client.messages(&self.daemon, id).await,
                Some("error") => panic!("the chat failed: {}", chat["last_error"]),
                _ => {}
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chat never settled: {chat}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits until the chat is in `error` and returns its `last_error`.
    pub async fn failure(&self, id: &str) -> Value {
        let chat = self.client.wait_status(&self.daemon, id, "error").await;
        chat["last_error"].clone()
    }
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
