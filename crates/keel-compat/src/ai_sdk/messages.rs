//! Keel messages as the AI SDK's `UIMessage`s, and the parts of the messages a front end
//! sends back.
//!
//! | Keel | `UIMessage` |
//! | --- | --- |
//! | user message `n` | `{"id": "keel-n", "role": "user"}`; text → `text`, file → `file` (base64 data as a `data:` URL) |
//! | the assistant and tool messages after user message `n` | one `{"id": "keel-n-reply", "role": "assistant"}` |
//! | each stored step | `step-start`, then its parts |
//! | text / reasoning | `text` / `reasoning` with `state: "done"` |
//! | tool call + its result | `tool-NAME` with `output-available` (`output`) or `output-error` (`errorText`); `input-available` while it waits; `providerExecuted: true` when the provider ran it |
//! | system messages (compaction notices) | left out |

use keel_core::Role;
use keel_core::{Part, PartKind};
use keel_store::{StoredMessage, ToolResultInput};
use serde_json::{Value, json};

use crate::reply::{Block, Reply};

/// The id of the assistant message answering user message `user_id`.
pub(crate) fn reply_id(user_id: i64) -> String {
    format!("keel-{user_id}-reply")
}

/// A chat's history as `UIMessage`s.
pub(crate) fn ui_messages(messages: &[StoredMessage]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut index = 0;
    while index < messages.len() {
        let message = &messages[index];
        index += 1;
        if message.role != Role::User {
            continue;
        }
        out.push(json!({
            "id": format!("keel-{}", message.id),
            "role": "user",
            "parts": message.parts.iter().filter_map(user_part).collect::<Vec<_>>(),
        }));
        let start = index;
        while index < messages.len() && messages[index].role != Role::User {
            index += 1;
        }
        let reply = Reply::from_messages(
            messages[start..index]
                .iter()
                .map(|m| (m.role.as_str(), m.parts.as_slice())),
        );
        if !reply.steps.is_empty() {
            out.push(json!({
                "id": reply_id(message.id),
                "role": "assistant",
                "parts": assistant_parts(&reply),
            }));
        }
    }
    out
}

fn user_part(part: &Part) -> Option<Value> {
    match &part.kind {
        PartKind::Text { text } => Some(json!({"type": "text", "text": text})),
        PartKind::File {
            media_type,
            data,
            url,
        } => {
            let url = match (url, data) {
                (Some(url), _) => url.clone(),
                (None, Some(data)) => format!("data:{media_type};base64,{data}"),
                (None, None) => return None,
            };
            Some(json!({"type": "file", "mediaType": media_type, "url": url}))
        }
        _ => None,
    }
}

fn assistant_parts(reply: &Reply) -> Vec<Value> {
    let mut parts = Vec::new();
    for step in &reply.steps {
        parts.push(json!({"type": "step-start"}));
        for block in &step.blocks {
            parts.push(match block {
                Block::Text(text) => json!({"type": "text", "text": text, "state": "done"}),
                Block::Reasoning(text) => {
                    json!({"type": "reasoning", "text": text, "state": "done"})
                }
                Block::Call(call) => {
                    let input: Value = serde_json::from_str(&call.args)
                        .unwrap_or_else(|_| Value::String(call.args.clone()));
                    let mut part = json!({"type": format!("tool-{}", call.name),
                                          "toolCallId": call.id, "input": input});
                    if call.provider_executed {
                        part["providerExecuted"] = json!(true);
                    }
                    match &call.result {
                        Some(r) if r.is_error => {
                            part["state"] = json!("output-error");
                            part["errorText"] = match &r.value {
                                Value::String(s) => json!(s),
                                other => json!(other.to_string()),
                            };
                        }
                        Some(r) => {
                            part["state"] = json!("output-available");
                            part["output"] = r.value.clone();
                        }
                        None => part["state"] = json!("input-available"),
                    }
                    part
                }
            });
        }
    }
    parts
}

/// The stored user message that UI message `index` of `ui` (a user message) stands for,
/// among `users`, the ids of the user messages of the chat's current branch in order: the
/// one its id names (`keel-N`, as the history endpoint gives it), else the one at the same
/// place (the UI history and the branch hold the same user messages, one reply between).
/// `None` when it is newer than anything stored.
pub(crate) fn stored_user(ui: &[Value], index: usize, users: &[i64]) -> Option<i64> {
    let named = ui
        .get(index)
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .and_then(|id| id.strip_prefix("keel-"))
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| users.contains(n));
    named.or_else(|| {
        let before = ui
            .iter()
            .take(index)
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .count();
        users.get(before).copied()
    })
}

/// The stored user message a reply id (`keel-N-reply`) answers, when it is one of `users`.
pub(crate) fn reply_of(id: &str, users: &[i64]) -> Option<i64> {
    id.strip_prefix("keel-")
        .and_then(|rest| rest.strip_suffix("-reply"))
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| users.contains(n))
}

/// The Keel parts of a user `UIMessage`: its text and file parts.
pub(crate) fn user_message_parts(message: &Value) -> Result<Vec<Part>, String> {
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .ok_or("the last message needs `parts`")?;
    let mut out = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = part.get("text").and_then(Value::as_str).unwrap_or_default();
                out.push(Part::text(text));
            }
            Some("file") => {
                let media_type = part
                    .get("mediaType")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let url = part.get("url").and_then(Value::as_str).unwrap_or_default();
                // A data URL is the file itself; anything else stays a link.
                let (data, url) = match url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(";base64,"))
                {
                    Some((_, data)) => (Some(data.to_owned()), None),
                    None => (None, Some(url.to_owned())),
                };
                out.push(Part::new(PartKind::File {
                    media_type,
                    data,
                    url,
                }));
            }
            // Step markers, sources and data parts carry nothing for the model.
            _ => {}
        }
    }
    Ok(out)
}

/// The results a front end gave to client-side tool calls (`addToolResult`), as far as they
/// answer one of `pending`.
pub(crate) fn tool_results(message: &Value, pending: &[String]) -> Vec<ToolResultInput> {
    let Some(parts) = message.get("parts").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
        if !(kind.starts_with("tool-") || kind == "dynamic-tool") {
            continue;
        }
        let Some(id) = part.get("toolCallId").and_then(Value::as_str) else {
            continue;
        };
        if !pending.iter().any(|p| p == id) {
            continue;
        }
        let (result, is_error) = match part.get("state").and_then(Value::as_str) {
            Some("output-available") => (part.get("output").cloned().unwrap_or(Value::Null), false),
            Some("output-error") => (part.get("errorText").cloned().unwrap_or(Value::Null), true),
            Some("output-denied") => (json!("the user denied this call"), true),
            _ => continue,
        };
        out.push(ToolResultInput {
            tool_call_id: id.to_owned(),
            result,
            is_error,
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use chrono::Utc;
    use keel_core::Part;

    /// A stored message numbered after its id (shared by the compat modules' tests).
    pub(crate) fn stored(id: i64, role: Role, parts: Vec<Part>) -> StoredMessage {
        StoredMessage {
            id,
            chat_id: uuid::Uuid::nil(),
            role,
            parts,
            content_version: 1,
            usage: None,
            context_limit: None,
            runtime_ms: None,
            interrupted: false,
            provider_response_id: None,
            event_seq: id,
            created_at: Utc::now(),
            kind: Default::default(),
            finish_reason: None,
            parent_id: None,
            siblings: Vec::new(),
        }
    }

    #[test]
    fn a_reply_with_a_tool_step_is_one_assistant_message() {
        let history = vec![
            stored(1, Role::User, vec![Part::text("weather?")]),
            stored(
                2,
                Role::Assistant,
                vec![Part::tool_call(
                    "c1",
                    "weather",
                    "{\"city\":\"Oslo\"}",
                    false,
                )],
            ),
            stored(
                3,
                Role::Tool,
                vec![Part::tool_result(
                    "c1",
                    "weather",
                    json!({"t": 3}),
                    false,
                    false,
                )],
            ),
            stored(4, Role::Assistant, vec![Part::text("3 degrees")]),
        ];
        let ui = ui_messages(&history);
        assert_eq!(ui.len(), 2);
        assert_eq!(
            ui[0],
            json!({"id": "keel-1", "role": "user", "parts": [{"type": "text", "text": "weather?"}]})
        );
        assert_eq!(ui[1]["id"], "keel-1-reply");
        assert_eq!(
            ui[1]["parts"],
            json!([
                {"type": "step-start"},
                {"type": "tool-weather", "toolCallId": "c1", "input": {"city": "Oslo"},
                 "state": "output-available", "output": {"t": 3}},
                {"type": "step-start"},
                {"type": "text", "text": "3 degrees", "state": "done"}
            ])
        );
    }

    #[test]
    fn user_parts_keep_text_and_files() {
        let message = json!({"role": "user", "parts": [
            {"type": "text", "text": "look"},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA"},
            {"type": "step-start"}
        ]});
        let parts = user_message_parts(&message).unwrap();
        assert_eq!(parts.len(), 2);
        assert!(
            matches!(&parts[1].kind, PartKind::File { data: Some(d), url: None, .. } if d == "AAAA")
        );
        assert!(user_message_parts(&json!({"role": "user"})).is_err());
    }

    #[test]
    fn a_ui_message_stands_for_the_stored_user_message_it_names_or_sits_at() {
        let users = [1, 4, 9];
        let ui = vec![
            json!({"id": "a", "role": "user"}),
            json!({"id": "b", "role": "assistant"}),
            json!({"id": "c", "role": "user"}),
            json!({"id": "d", "role": "assistant"}),
            json!({"id": "keel-9", "role": "user"}),
            json!({"id": "e", "role": "user"}),
        ];
        assert_eq!(stored_user(&ui, 0, &users), Some(1));
        assert_eq!(stored_user(&ui, 2, &users), Some(4));
        // Named, wherever it sits.
        assert_eq!(stored_user(&ui, 4, &users), Some(9));
        // A fourth user message: nothing stored yet.
        assert_eq!(stored_user(&ui, 5, &users), None);
        // An id naming a message of another branch counts by place.
        let moved = vec![json!({"id": "keel-7", "role": "user"})];
        assert_eq!(stored_user(&moved, 0, &users), Some(1));
        assert_eq!(reply_of("keel-4-reply", &users), Some(4));
        for other in ["keel-5-reply", "keel-4", "msg-1", "keel-x-reply"] {
            assert_eq!(reply_of(other, &users), None, "{other}");
        }
    }

    #[test]
    fn only_answers_to_pending_calls_are_results() {
        let message = json!({"role": "assistant", "parts": [
            {"type": "tool-ask", "toolCallId": "a", "state": "output-available", "output": "yes"},
            {"type": "tool-ask", "toolCallId": "b", "state": "output-error", "errorText": "no"},
            {"type": "tool-ask", "toolCallId": "c", "state": "input-available"},
            {"type": "tool-ask", "toolCallId": "old", "state": "output-available", "output": 1}
        ]});
        let pending = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let results = tool_results(&message, &pending);
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].result, json!("yes"));
        assert!(results[1].is_error);
    }
}
