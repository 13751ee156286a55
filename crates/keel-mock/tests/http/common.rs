//! Shared client plumbing: requests, SSE parsing, reading a body until it breaks.

use futures::StreamExt;
use keel_mock::{MockConfig, MockServer};
use serde_json::{Value, json};

pub async fn server() -> MockServer {
    keel_mock::spawn(MockConfig::fast()).await.unwrap()
}

/// A plain HTTP client on the process's rustls crypto provider, which the `keel` binary
/// installs in `main`; reqwest needs one to build any client.
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub async fn post(server: &MockServer, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}{path}", server.base_url()))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// A streaming Chat Completions request with one user message.
pub fn chat(text: &str) -> Value {
    json!({
        "model": "mock",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": text}],
    })
}

/// A streaming Anthropic Messages request with one user message.
pub fn messages(text: &str) -> Value {
    json!({
        "model": "mock",
        "max_tokens": 1024,
        "stream": true,
        "messages": [{"role": "user", "content": text}],
    })
}

/// A streaming Responses request with one user message.
pub fn responses(text: &str) -> Value {
    json!({"model": "mock", "stream": true, "input": text})
}

#[derive(Debug, Clone)]
pub struct Event {
    pub event: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// Parses an SSE body into events (one `data:` line per event, as the mock sends).
pub fn parse(body: &str) -> Vec<Event> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = Event {
                event: None,
                data: String::new(),
            };
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event.event = Some(name.to_owned());
                } else if let Some(data) = line.strip_prefix("data: ") {
                    event.data = data.to_owned();
                } else {
                    event.data = line.to_owned();
                }
            }
            event
        })
        .collect()
}

/// Reads a whole successful SSE response.
pub async fn read_events(response: reqwest::Response) -> Vec<Event> {
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    parse(&response.text().await.unwrap())
}

/// Reads a body until it ends; returns the text received and whether it broke off.
pub async fn read_until_break(response: reqwest::Response) -> (String, bool) {
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => received.extend_from_slice(&bytes),
            Err(_) => return (String::from_utf8(received).unwrap(), true),
        }
    }
    (String::from_utf8(received).unwrap(), false)
}

/// Concatenated Chat Completions content deltas.
pub fn chat_text(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| {
            e.json()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Concatenated Chat Completions argument deltas of tool call 0.
pub fn chat_args(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| {
            e.json()["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// The `data` of every event named `name`.
pub fn named(events: &[Event], name: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.event.as_deref() == Some(name))
        .map(Event::json)
        .collect()
}
