//! Request rules the real APIs enforce, as pure functions over the request JSON.
//!
//! A real provider answers a malformed conversation (a tool call without its result, a
//! reasoning item without the item it belongs to, ...) with a `400` that a client never
//! retries; a mock that accepts such a request hides the bug until production. Each rule
//! here answers exactly the `400` the real API answers, and cites the public reference page
//! that documents the rule. The server checks every request against its protocol's rules
//! when [`MockConfig::strict`](crate::MockConfig) is on (the default).
//!
//! * [`openai_chat`]: tool-call / tool-message pairing, DeepSeek's `reasoning_content`;
//! * [`openai_responses`]: call / output pairing, reasoning items and their following item;
//! * [`anthropic`]: `tool_use` / `tool_result` pairing, unique ids, provider-run results.

pub(crate) mod anthropic;
pub(crate) mod openai_chat;
pub(crate) mod openai_responses;

use serde_json::Value;

/// Why a request is refused: the message and `param` of the provider's `400` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub message: String,
    pub param: Option<String>,
}

impl Rejection {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            param: None,
        }
    }

    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }
}

/// One rule: accepts the request or says why the real API refuses it.
pub(crate) type Rule = fn(&Value) -> Result<(), Rejection>;

/// The first rule of `rules` that refuses `request`.
pub(crate) fn check(rules: &[Rule], request: &Value) -> Result<(), Rejection> {
    rules.iter().try_for_each(|rule| rule(request))
}

/// The array under `key`, or nothing.
pub(crate) fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The string under `key`, or `""`.
pub(crate) fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}
