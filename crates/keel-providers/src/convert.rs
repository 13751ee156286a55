//! Conversions every request builder and decoder shares: tool result text, file URLs,
//! continuation of a trailing assistant message, token counts and provider metadata.

use keel_core::{Message, Role};
use serde_json::Value;

/// Sent after a trailing assistant message to providers without native prefill, so the
/// model resumes an interrupted reply instead of starting over.
pub(crate) const CONTINUE_PROMPT: &str =
    "Continue exactly where you stopped, without repeating anything you already wrote.";

/// Whether the prompt ends with an assistant message to be continued.
pub(crate) fn ends_with_assistant(messages: &[Message]) -> bool {
    messages.last().is_some_and(|m| m.role == Role::Assistant)
}

/// A tool result as the text providers expect: strings verbatim, anything else as JSON.
pub(crate) fn tool_result_text(result: &Value) -> String {
    match result {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A file part as a URL: its own URL, or a `data:` URL of its base64 data.
pub(crate) fn file_url(media_type: &str, data: Option<&str>, url: Option<&str>) -> Option<String> {
    match (url, data) {
        (Some(url), _) => Some(url.to_owned()),
        (None, Some(data)) => Some(format!("data:{media_type};base64,{data}")),
        (None, None) => None,
    }
}

/// The string at `key`, or empty when it is absent or not a string.
pub(crate) fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A token count from JSON; absent, null or negative counts are zero.
pub(crate) fn count(value: Option<&Value>) -> u64 {
    value
        .and_then(Value::as_i64)
        .map(keel_core::Usage::count)
        .unwrap_or(0)
}

/// The object a provider keeps under its own key in a part's `provider_metadata`, so that
/// metadata of one provider is never sent to another.
pub(crate) fn metadata_for<'a>(metadata: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    metadata.and_then(|m| m.get(key)).filter(|v| v.is_object())
}

/// Arguments text as a JSON object; interrupted or malformed arguments become `{}`.
pub(crate) fn args_object(args: &str) -> Value {
    match serde_json::from_str::<Value>(args) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::Object(serde_json::Map::new()),
    }
}
