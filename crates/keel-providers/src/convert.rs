//! Conversions every request builder and decoder shares: tool result text, file URLs,
//! continuation of a trailing assistant message, token counts and provider metadata.

use keel_core::{Message, PartKind, Role};
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

/// A part of a user or tool message, as every request builder sends it. Parts a user turn
/// does not carry to a provider (reasoning, tool calls, results of provider-executed tools,
/// files with neither data nor URL) are left out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum UserInput<'a> {
    Text(&'a str),
    ToolResult {
        call_id: &'a str,
        tool_name: &'a str,
        result: &'a Value,
        is_error: bool,
    },
    File(FileInput<'a>),
}

/// A file of a user turn: its base64 data, its URL, or both (never neither).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FileInput<'a> {
    pub(crate) media_type: &'a str,
    pub(crate) data: Option<&'a str>,
    pub(crate) url: Option<&'a str>,
}

impl FileInput<'_> {
    /// Its own URL, or a `data:` URL of its data.
    pub(crate) fn url(&self) -> String {
        match (self.url, self.data) {
            (Some(url), _) => url.to_owned(),
            (None, data) => format!(
                "data:{};base64,{}",
                self.media_type,
                data.unwrap_or_default()
            ),
        }
    }

    pub(crate) fn is_image(&self) -> bool {
        self.media_type.starts_with("image/")
    }
}

/// The parts of a user or tool message that go to a provider, in order.
pub(crate) fn user_inputs(message: &Message) -> impl Iterator<Item = UserInput<'_>> {
    message.parts.iter().filter_map(|part| match &part.kind {
        PartKind::Text { text } => Some(UserInput::Text(text)),
        PartKind::ToolResult {
            tool_call_id,
            tool_name,
            result,
            is_error,
            provider_executed: false,
        } => Some(UserInput::ToolResult {
            call_id: tool_call_id,
            tool_name,
            result,
            is_error: *is_error,
        }),
        PartKind::File {
            media_type,
            data,
            url,
        } if data.is_some() || url.is_some() => Some(UserInput::File(FileInput {
            media_type,
            data: data.as_deref(),
            url: url.as_deref(),
        })),
        _ => None,
    })
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

#[cfg(test)]
mod tests {
    use keel_core::Part;
    use serde_json::json;

    use super::*;

    fn file(media_type: &str, data: Option<&str>) -> Part {
        Part::new(PartKind::File {
            media_type: media_type.to_owned(),
            data: data.map(str::to_owned),
            url: None,
        })
    }

    #[test]
    fn a_user_turn_carries_text_results_of_its_own_tools_and_files_that_point_somewhere() {
        let message = Message::new(
            Role::User,
            vec![
                Part::text("look"),
                Part::tool_result("c1", "read_file", json!("body"), false, false),
                Part::tool_result("c2", "web_search", json!({"hits": 1}), false, true),
                file("image/png", Some("AAAA")),
                file("application/pdf", None),
                Part::reasoning("thinking", None),
            ],
        );
        let inputs: Vec<_> = user_inputs(&message).collect();
        assert_eq!(
            inputs,
            vec![
                UserInput::Text("look"),
                UserInput::ToolResult {
                    call_id: "c1",
                    tool_name: "read_file",
                    result: &json!("body"),
                    is_error: false,
                },
                UserInput::File(FileInput {
                    media_type: "image/png",
                    data: Some("AAAA"),
                    url: None,
                }),
            ]
        );
        let UserInput::File(file) = inputs[2] else {
            unreachable!()
        };
        assert_eq!(file.url(), "data:image/png;base64,AAAA");
        assert!(file.is_image());
    }
}
