//! The daemon's HTTP API: one method per call a client makes.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Message;

/// A chat as listed by the API (the fields this client shows).
#[derive(Debug, Clone, Deserialize)]
pub struct ChatSummary {
    pub id: String,
    pub title: Option<String>,
    pub model: String,
    pub status: String,
    /// Hidden from the chat list of the web page; still listed here.
    #[serde(default)]
    pub archived: bool,
    /// When the chat last changed (RFC 3339, UTC).
    pub updated_at: String,
    /// The chat's tokens and cost (`GET /chats/{id}` only).
    #[serde(default)]
    pub usage: Option<ChatUsage>,
}

/// What a chat's steps used and cost, as `GET /chats/{id}` sums them.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
pub struct ChatUsage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    /// US dollars; `None` when the chat's model has no price.
    pub cost: Option<f64>,
}

/// What `POST .../messages` answered.
#[derive(Debug, Clone, Deserialize)]
pub struct Sent {
    pub message_id: Option<i64>,
    pub queue_id: Option<String>,
}

/// The daemon's base URL: `host:port` alone means `http://host:port`; no trailing slash.
fn base_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    }
}

/// The innermost cause of a failed request ("Connection refused"), which says more than
/// reqwest's own "error sending request".
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// A client of one daemon.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Api {
    pub fn new(url: &str, token: Option<String>) -> anyhow::Result<Self> {
        let http = keel_providers::tls::client_builder()?
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            http,
            base: format!("{}/api/v1", base_url(url)),
            token: token.filter(|t| !t.is_empty()),
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.request_to(method, format!("{}{path}", self.base))
    }

    fn request_to(&self, method: Method, url: String) -> RequestBuilder {
        let request = self.http.request(method, url);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The daemon's address as given.
    pub fn url(&self) -> &str {
        self.base.trim_end_matches("/api/v1")
    }

    /// Sends a request and turns any failure into a message that says what went wrong.
    async fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        let response = request.send().await.map_err(|error| {
            anyhow!(
                "cannot reach keel at {}: {} (is `keel serve` running?)",
                self.url(),
                root_cause(&error)
            )
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("no error message")
            .to_owned();
        if status == StatusCode::UNAUTHORIZED {
            bail!("the server refused the token ({message}); pass --token or set KEEL_TOKEN");
        }
        bail!("the server answered {status}: {message}")
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        request: RequestBuilder,
    ) -> anyhow::Result<T> {
        self.send(request)
            .await?
            .json()
            .await
            .context("the server's answer was not the expected JSON")
    }

    pub async fn create_chat(
        &self,
        text: &str,
        model: Option<&str>,
    ) -> anyhow::Result<ChatSummary> {
        let mut body = json!({ "text": text });
        if let Some(model) = model {
            body["model"] = json!(model);
        }
        self.json(self.request(Method::POST, "/chats").json(&body))
            .await
    }

    /// The daemon's metrics in Prometheus' text format.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        // Beside the API, at the daemon's root.
        let url = format!("{}/metrics", self.url());
        self.send(self.request_to(Method::GET, url))
            .await?
            .text()
            .await
            .context("reading the metrics failed")
    }

    pub async fn chat(&self, id: &str) -> anyhow::Result<ChatSummary> {
        self.json(self.request(Method::GET, &format!("/chats/{id}")))
            .await
    }

    /// The caller's newest chats, at most `limit` (1–200), the newest first.
    pub async fn chats(&self, limit: usize) -> anyhow::Result<Vec<ChatSummary>> {
        #[derive(Deserialize)]
        struct List {
            chats: Vec<ChatSummary>,
        }
        let list: List = self
            .json(self.request(Method::GET, &format!("/chats?limit={limit}")))
            .await?;
        Ok(list.chats)
    }

    pub async fn messages(&self, chat: &str) -> anyhow::Result<Vec<Message>> {
        #[derive(Deserialize)]
        struct List {
            messages: Vec<Message>,
        }
        let list: List = self
            .json(self.request(Method::GET, &format!("/chats/{chat}/messages")))
            .await?;
        Ok(list.messages)
    }

    /// The branch that runs through message `through`, to its newest message.
    pub async fn branch_messages(&self, chat: &str, through: i64) -> anyhow::Result<Vec<Message>> {
        #[derive(Deserialize)]
        struct List {
            messages: Vec<Message>,
        }
        let list: List = self
            .json(self.request(
                Method::GET,
                &format!("/chats/{chat}/messages?branch={through}"),
            ))
            .await?;
        Ok(list.messages)
    }

    /// Makes the branch through `message` current (`409` unless the chat is idle).
    pub async fn switch_branch(&self, chat: &str, message: i64) -> anyhow::Result<()> {
        self.send(
            self.request(Method::POST, &format!("/chats/{chat}/branch"))
                .json(&json!({ "message_id": message })),
        )
        .await?;
        Ok(())
    }

    /// Has a new run write another version of reply `message` (`409` unless the chat is
    /// idle).
    pub async fn regenerate(&self, chat: &str, message: i64) -> anyhow::Result<()> {
        self.send(self.request(
            Method::POST,
            &format!("/chats/{chat}/messages/{message}/regenerate"),
        ))
        .await?;
        Ok(())
    }

    pub async fn send_message(&self, chat: &str, text: &str, busy: &str) -> anyhow::Result<Sent> {
        self.json(
            self.request(Method::POST, &format!("/chats/{chat}/messages"))
                .json(&json!({ "text": text, "busy": busy })),
        )
        .await
    }

    pub async fn edit_message(&self, chat: &str, id: i64, text: &str) -> anyhow::Result<()> {
        self.send(
            self.request(Method::PUT, &format!("/chats/{chat}/messages/{id}"))
                .json(&json!({ "text": text })),
        )
        .await?;
        Ok(())
    }

    pub async fn interrupt(&self, chat: &str) -> anyhow::Result<()> {
        self.send(self.request(Method::POST, &format!("/chats/{chat}/interrupt")))
            .await?;
        Ok(())
    }

    /// Has the model carry on the reply the user stopped (`409` unless the chat is idle and
    /// ends in one).
    pub async fn continue_reply(&self, chat: &str) -> anyhow::Result<()> {
        self.send(self.request(Method::POST, &format!("/chats/{chat}/continue")))
            .await?;
        Ok(())
    }

    /// Runs a failed turn again (`409` unless the chat is in `error`).
    pub async fn retry(&self, chat: &str) -> anyhow::Result<()> {
        self.send(self.request(Method::POST, &format!("/chats/{chat}/retry")))
            .await?;
        Ok(())
    }

    /// Opens the chat's live events after `last_event_id`.
    pub async fn events(&self, chat: &str, last_event_id: Option<i64>) -> anyhow::Result<Response> {
        let mut request = self
            .request(Method::GET, &format!("/chats/{chat}/events"))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        self.send(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_host_and_port_means_plain_http() {
        assert_eq!(base_url("127.0.0.1:8791"), "http://127.0.0.1:8791");
        assert_eq!(base_url("localhost:8700/"), "http://localhost:8700");
        assert_eq!(
            base_url("https://keel.example.com/"),
            "https://keel.example.com"
        );
        assert_eq!(base_url(" http://h:1 "), "http://h:1");
    }
}
