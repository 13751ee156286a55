//! Rules the real APIs enforce with a `400`, each a pure function over the request JSON.
//!
//! A request that breaks one gets the real API's error (status, type, code, message), so a
//! Keel bug shows up as a failing test against the mock instead of a production incident.
//! Every rule cites the public API reference page it comes from. The server checks every
//! request when [`MockConfig::strict`](crate::MockConfig) is on (the default).
//!
//! * [`openai_chat`]: tool-call / tool-message pairing, DeepSeek's `reasoning_content`,
//!   `max_tokens` on OpenAI's reasoning models, Cerebras's refusal of `reasoning_content`;
//! * [`thought_signature`]: Gemini's thought signatures on its OpenAI-compatible endpoint;
//! * [`gemini`]: Gemini's own API: known fields, roles, call and response turns, thinking
//!   controls, thought signatures;
//! * [`openai_responses`]: call / output pairing, reasoning items and their following item;
//! * [`anthropic`]: `tool_use` / `tool_result` pairing, unique ids, provider-run results, no
//!   prefill on Claude 4.6 and later;
//! * [`chain`], [`prefill`], [`thinking`]: chained responses, assistant prefill, signed
//!   thinking;
//! * [`web_search`]: provider tool types and provider-run web searches, on both APIs.

pub(crate) mod anthropic;
pub(crate) mod chain;
pub(crate) mod gemini;
pub(crate) mod openai_chat;
pub(crate) mod openai_responses;
pub(crate) mod prefill;
pub(crate) mod thinking;
pub(crate) mod thought_signature;
pub(crate) mod web_search;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::errors::{Flavor, envelope};

/// A request the real API refuses with `400 invalid_request_error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub message: String,
    pub code: Option<&'static str>,
    pub param: Option<String>,
}

impl Violation {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: None,
            param: None,
        }
    }

    pub(crate) fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub(crate) fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// The `400` response in `flavor`'s envelope.
    pub(crate) fn response(&self, flavor: Flavor) -> Response {
        let body = envelope(
            flavor,
            "invalid_request_error",
            self.code,
            &self.message,
            self.param.as_deref(),
        );
        (StatusCode::BAD_REQUEST, Json(body)).into_response()
    }
}

/// One rule: accepts the request or says why the real API refuses it.
pub(crate) type Rule = fn(&Value) -> Result<(), Violation>;

/// The first rule of `rules` that refuses `request`.
pub(crate) fn check(rules: &[Rule], request: &Value) -> Result<(), Violation> {
    rules.iter().try_for_each(|rule| rule(request))
}

/// The array under `key`, or nothing.
pub(crate) fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The first content part of an assistant message (in `messages`) whose type is not one of
/// `allowed`: the message's index, the part's index and its type. Content given as a string
/// has no parts.
pub(crate) fn foreign_assistant_part<'a>(
    messages: &'a [Value],
    allowed: &[&str],
) -> Option<(usize, usize, &'a str)> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| str_at(m, "role") == "assistant")
        .find_map(|(i, m)| {
            array(m, "content")
                .iter()
                .enumerate()
                .map(|(j, part)| (j, str_at(part, "type")))
                .find(|(_, kind)| !allowed.contains(kind))
                .map(|(j, kind)| (i, j, kind))
        })
}

/// The string under `key`, or `""`.
pub(crate) fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}
