//! Repair of tool calls and results that lost their partner, applied to stored history
//! before any prompt is built from it.
//!
//! Providers reject a prompt with a tool call that has no result, or a result whose call is
//! missing. Both happen legitimately: a step interrupted between committing its calls and
//! their results, or an edit that cut history between them.

use std::collections::HashSet;

use keel_core::{INTERRUPTED_RESULT, Message, Part, PartKind, Role};
use serde_json::Value;

/// Gives every unanswered tool call a synthetic error result and drops every result whose
/// call does not come before it. Synthetic results go into the tool message right after
/// the calling message (created when there is none). A call the provider ran itself
/// (web search, ...) that was cut before its result is dropped instead: only the provider
/// can answer it, and a result of Keel's making is refused (Anthropic wants its
/// `*_tool_result` block in the same turn). Messages left empty are dropped.
pub fn repair_orphans(messages: Vec<Message>) -> Vec<Message> {
    // First pass: which results come after their call (those are kept).
    let mut seen_calls: HashSet<&str> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    for part in messages.iter().flat_map(|m| m.parts.iter()) {
        match &part.kind {
            PartKind::ToolCall { tool_call_id, .. } => {
                seen_calls.insert(tool_call_id);
            }
            PartKind::ToolResult { tool_call_id, .. }
                if seen_calls.contains(tool_call_id.as_str()) =>
            {
                answered.insert(tool_call_id.clone());
            }
            _ => {}
        }
    }

    let mut emitted: HashSet<String> = HashSet::new();
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    // Synthetic results still to be placed after the last calling message.
    let mut owed: Vec<Part> = Vec::new();

    for mut message in messages {
        let mut calls_here = Vec::new();
        let mut kept = Vec::with_capacity(message.parts.len());
        for part in message.parts {
            match &part.kind {
                PartKind::ToolCall {
                    tool_call_id,
                    tool_name,
                    provider_executed,
                    ..
                } => {
                    if !answered.contains(tool_call_id) {
                        if *provider_executed {
                            continue;
                        }
                        calls_here.push(synthetic(tool_call_id, tool_name, false));
                    }
                    kept.push(part);
                }
                PartKind::ToolResult { tool_call_id, .. } => {
                    // Kept once, and only when its call came first.
                    if answered.contains(tool_call_id) && emitted.insert(tool_call_id.clone()) {
                        kept.push(part);
                    }
                }
                _ => kept.push(part),
            }
        }
        message.parts = kept;

        if message.role == Role::Tool && !owed.is_empty() {
            // The step's own tool message: owed results join it.
            let mut parts = std::mem::take(&mut owed);
            parts.append(&mut message.parts);
            message.parts = parts;
        } else if !owed.is_empty() {
            out.push(Message::new(Role::Tool, std::mem::take(&mut owed)));
        }
        if !message.parts.is_empty() {
            out.push(message);
        }
        owed.extend(calls_here);
    }
    if !owed.is_empty() {
        out.push(Message::new(Role::Tool, owed));
    }
    out
}

/// The calls `(id, name)` left without a result where a branch ends, given its last
/// messages (oldest first): those of a final assistant message, or of one followed only by
/// its step's tool message, that no result answers. A call the provider ran itself is left
/// out: only the provider can answer it. A branch ending anywhere else (a user message, a
/// reply without calls) leaves nothing open.
pub fn open_calls_at_end(recent: &[(Role, &[Part])]) -> Vec<(String, String)> {
    let (calls, results): (&[Part], &[Part]) = match recent {
        [.., (Role::Assistant, calls), (Role::Tool, results)] => (calls, results),
        [.., (Role::Assistant, calls)] => (calls, &[]),
        _ => return Vec::new(),
    };
    let answered: HashSet<&str> = results
        .iter()
        .filter_map(|part| match &part.kind {
            PartKind::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    calls
        .iter()
        .filter_map(|part| match &part.kind {
            PartKind::ToolCall {
                tool_call_id,
                tool_name,
                provider_executed: false,
                ..
            } if !answered.contains(tool_call_id.as_str()) => {
                Some((tool_call_id.clone(), tool_name.clone()))
            }
            _ => None,
        })
        .collect()
}

fn synthetic(id: &str, name: &str, provider_executed: bool) -> Part {
    Part::tool_result(
        id,
        name,
        Value::String(INTERRUPTED_RESULT.to_owned()),
        true,
        provider_executed,
    )
}

#[cfg(test)]
mod open_calls {
    use super::*;
    use serde_json::json;

    fn ids(open: Vec<(String, String)>) -> Vec<String> {
        open.into_iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn calls_of_the_last_step_without_results_are_open() {
        let calls = [
            Part::tool_call("local", "read_file", "{}", false),
            Part::tool_call("client", "get_weather", "{}", false),
            Part::tool_call("server", "web_search", "{}", true),
        ];
        let results = [Part::tool_result(
            "local",
            "read_file",
            json!("ok"),
            false,
            false,
        )];
        // A step that ran a local tool and waits for a client-side one.
        let step = [(Role::Assistant, &calls[..]), (Role::Tool, &results[..])];
        assert_eq!(ids(open_calls_at_end(&step)), ["client"]);
        // A step of client-side calls only.
        assert_eq!(
            ids(open_calls_at_end(&[(Role::Assistant, &calls[1..2])])),
            ["client"]
        );
    }

    #[test]
    fn a_branch_ending_in_a_reply_or_a_user_message_leaves_nothing_open() {
        let text = [Part::text("hi")];
        let call = [Part::tool_call("c", "get_weather", "{}", false)];
        let result = [Part::tool_result(
            "c",
            "get_weather",
            json!(1),
            false,
            false,
        )];
        assert!(open_calls_at_end(&[(Role::User, &text[..])]).is_empty());
        assert!(
            open_calls_at_end(&[(Role::User, &text[..]), (Role::Assistant, &text[..])]).is_empty()
        );
        assert!(
            open_calls_at_end(&[(Role::Assistant, &call[..]), (Role::Tool, &result[..])])
                .is_empty()
        );
        assert!(
            open_calls_at_end(&[(Role::Assistant, &call[..]), (Role::User, &text[..])]).is_empty()
        );
        assert!(open_calls_at_end(&[]).is_empty());
    }
}

#[cfg(test)]
mod provider_executed {
    use super::*;

    #[test]
    fn an_unanswered_provider_call_is_dropped_not_answered_locally() {
        let history = vec![
            Message::new(Role::User, vec![Part::text("search")]),
            Message::new(
                Role::Assistant,
                vec![
                    Part::text("Searching."),
                    Part::tool_call("srvtoolu_1", "web_search", "{}", true),
                ],
            ),
            Message::new(Role::User, vec![Part::text("never mind")]),
        ];
        let repaired = repair_orphans(history);
        assert_eq!(repaired.len(), 3, "{repaired:?}");
        assert_eq!(repaired[1].parts, vec![Part::text("Searching.")]);
        assert!(repaired.iter().all(|m| m.role != Role::Tool));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Part {
        Part::tool_call(id, "read_file", "{}", false)
    }

    fn result(id: &str) -> Part {
        Part::tool_result(id, "read_file", json!("ok"), false, false)
    }

    fn ids(m: &Message) -> Vec<(String, bool)> {
        m.parts
            .iter()
            .filter_map(|p| match &p.kind {
                PartKind::ToolResult {
                    tool_call_id,
                    is_error,
                    ..
                } => Some((tool_call_id.clone(), *is_error)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn complete_history_is_unchanged() {
        let history = vec![
            Message::user("hi"),
            Message::new(Role::Assistant, vec![Part::text("x"), call("a")]),
            Message::new(Role::Tool, vec![result("a")]),
            Message::assistant("done"),
        ];
        assert_eq!(repair_orphans(history.clone()), history);
    }

    #[test]
    fn unanswered_call_gets_an_error_result_right_after_it() {
        let history = vec![
            Message::user("hi"),
            Message::new(Role::Assistant, vec![call("a")]),
            Message::user("next"),
        ];
        let fixed = repair_orphans(history);
        assert_eq!(fixed.len(), 4);
        assert_eq!(fixed[2].role, Role::Tool);
        assert_eq!(ids(&fixed[2]), vec![("a".to_owned(), true)]);
        assert!(matches!(&fixed[2].parts[0].kind,
            PartKind::ToolResult { result, .. } if result == &json!(INTERRUPTED_RESULT)));
        assert_eq!(fixed[3], Message::user("next"));
    }

    #[test]
    fn partly_answered_step_is_completed_in_its_tool_message() {
        let history = vec![
            Message::new(Role::Assistant, vec![call("a"), call("b")]),
            Message::new(Role::Tool, vec![result("b")]),
        ];
        let fixed = repair_orphans(history);
        assert_eq!(fixed.len(), 2);
        assert_eq!(
            ids(&fixed[1]),
            vec![("a".to_owned(), true), ("b".to_owned(), false)]
        );
    }

    #[test]
    fn trailing_unanswered_call_is_answered() {
        let fixed = repair_orphans(vec![Message::new(Role::Assistant, vec![call("a")])]);
        assert_eq!(fixed.len(), 2);
        assert_eq!(ids(&fixed[1]), vec![("a".to_owned(), true)]);
    }

    #[test]
    fn result_without_call_is_dropped_with_its_empty_message() {
        let history = vec![
            Message::user("hi"),
            Message::new(Role::Tool, vec![result("ghost")]),
            Message::new(Role::Assistant, vec![Part::text("a"), result("ghost2")]),
        ];
        let fixed = repair_orphans(history);
        assert_eq!(fixed, vec![Message::user("hi"), Message::assistant("a")]);
    }

    #[test]
    fn result_before_its_call_is_dropped_and_the_call_answered() {
        let history = vec![
            Message::new(Role::Tool, vec![result("a")]),
            Message::new(Role::Assistant, vec![call("a")]),
        ];
        let fixed = repair_orphans(history);
        assert_eq!(fixed.len(), 1 + 1);
        assert_eq!(fixed[0].role, Role::Assistant);
        assert_eq!(ids(&fixed[1]), vec![("a".to_owned(), true)]);
    }

    #[test]
    fn provider_executed_results_in_the_same_message_stay() {
        let history = vec![Message::new(
            Role::Assistant,
            vec![
                Part::tool_call("w", "web_search", "{}", true),
                Part::tool_result("w", "web_search", json!([]), false, true),
                Part::text("found"),
            ],
        )];
        assert_eq!(repair_orphans(history.clone()), history);
    }
}
