//! Rebuilding the step in progress from its live-part log after a crash.
//!
//! The log holds exactly what clients were sent. Replaying it gives the partial text and the
//! tool calls of the step, which the loop resumes with its recovery plans: the final reply
//! then contains what was streamed before the crash exactly once.

use keel_agent::StreamSnapshot;
use keel_agent::recovery::{CapturedCall, CapturedReasoning, args_are_json};
use keel_core::{Part, PartKind, Role};
use keel_store::PendingToolCall;
use serde_json::Value;

use crate::live::from_log;

/// Replays logged payloads (in sequence order) into a snapshot of the step.
pub fn snapshot_from_log<'a>(payloads: impl IntoIterator<Item = &'a Value>) -> StreamSnapshot {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<(CapturedCall, bool)> = Vec::new();
    for value in payloads {
        let Some((event, data)) = from_log(value) else {
            continue;
        };
        match event {
            "stream_reset" => {
                text.clear();
                reasoning.clear();
                calls.clear();
            }
            _ if data["role"] == "assistant" && data["part"]["type"] == "reasoning" => {
                reasoning.push_str(data["part"]["text"].as_str().unwrap_or_default());
            }
            "tool_call_cancel" => {
                let id = data["tool_call_id"].as_str().unwrap_or_default();
                calls.retain(|(c, _)| c.tool_call_id != id);
            }
            _ => apply_part(&data, &mut text, &mut calls),
        }
    }
    let mut snapshot = StreamSnapshot {
        bytes_received: text.len(),
        partial_text: text,
        ..StreamSnapshot::default()
    };
    // What clients were sent of the reasoning carries no signature.
    if !reasoning.is_empty() {
        snapshot.reasoning.push(CapturedReasoning {
            text: reasoning,
            provider_metadata: None,
        });
    }
    for (call, complete) in calls {
        snapshot.bytes_received += call.args.len();
        if complete && args_are_json(&call.args) {
            snapshot.completed_calls.push(call);
        } else {
            snapshot.in_flight = Some(call);
        }
    }
    snapshot
}

/// The reasoning a step resumed from the log continues with: the loop's own checkpoint
/// keeps it with its provider metadata (signatures), the log only as text. The
/// checkpoint's is taken when it is the same reasoning, so signed thinking survives a crash;
/// otherwise the log's unsigned text stands, and the recovery plan knows it cannot be sent
/// back as signed.
pub fn signed_reasoning(
    from_log: &[CapturedReasoning],
    checkpoint: &[CapturedReasoning],
) -> Vec<CapturedReasoning> {
    let text =
        |blocks: &[CapturedReasoning]| blocks.iter().map(|r| r.text.as_str()).collect::<String>();
    if !checkpoint.is_empty() && text(checkpoint) == text(from_log) {
        checkpoint.to_vec()
    } else {
        from_log.to_vec()
    }
}

/// The client-side tool calls a crashed owner committed but never handed to the client: the
/// last message is the model's, and it calls client tools that have no result yet. The
/// resumed run hands them over (enters `requires_action`) instead of calling the model.
pub fn unhanded_client_calls(
    last: Option<(Role, &[Part])>,
    client_tools: &[String],
) -> Vec<PendingToolCall> {
    let Some((Role::Assistant, parts)) = last else {
        return Vec::new();
    };
    parts
        .iter()
        .filter_map(|part| match &part.kind {
            PartKind::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_executed: false,
            } if client_tools.contains(tool_name) => Some(PendingToolCall {
                tool_call_id: tool_call_id.clone(),
                tool_name: tool_name.clone(),
                args: args.clone(),
            }),
            _ => None,
        })
        .collect()
}

fn apply_part(data: &Value, text: &mut String, calls: &mut Vec<(CapturedCall, bool)>) {
    if data["role"] != "assistant" {
        return;
    }
    let part = &data["part"];
    match part["type"].as_str() {
        Some("text") => text.push_str(part["text"].as_str().unwrap_or_default()),
        Some("tool_call") if part["provider_executed"] != true => {
            let id = part["tool_call_id"].as_str().unwrap_or_default();
            let position = calls.iter().position(|(c, _)| c.tool_call_id == id);
            let index = position.unwrap_or_else(|| {
                calls.push((
                    CapturedCall {
                        tool_call_id: id.to_owned(),
                        tool_name: part["tool_name"].as_str().unwrap_or_default().to_owned(),
                        args: String::new(),
                    },
                    false,
                ));
                calls.len() - 1
            });
            let (call, complete) = &mut calls[index];
            if part["complete"] == true {
                call.args = part["args"].as_str().unwrap_or_default().to_owned();
                *complete = true;
            } else {
                call.args
                    .push_str(part["args_delta"].as_str().unwrap_or_default());
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{logged, payload};
    use keel_agent::LiveEvent;

    fn log(events: &[LiveEvent]) -> Vec<Value> {
        events.iter().map(|e| logged(&payload(e))).collect()
    }

    #[test]
    fn text_deltas_and_tool_calls_are_rebuilt() {
        let entries = log(&[
            LiveEvent::ReasoningDelta {
                delta: "hmm".into(),
            },
            LiveEvent::TextDelta {
                delta: "Hello ".into(),
            },
            LiveEvent::TextDelta {
                delta: "world".into(),
            },
            LiveEvent::ToolCallDelta {
                tool_call_id: "a".into(),
                tool_name: "read_file".into(),
                args_delta: "{\"path\":".into(),
            },
            LiveEvent::ToolCall {
                tool_call_id: "a".into(),
                tool_name: "read_file".into(),
                args: "{\"path\":\"x\"}".into(),
                provider_executed: false,
            },
            LiveEvent::ToolCallDelta {
                tool_call_id: "b".into(),
                tool_name: "write_file".into(),
                args_delta: "{\"pa".into(),
            },
        ]);
        let snapshot = snapshot_from_log(&entries);
        assert_eq!(snapshot.partial_text, "Hello world");
        assert_eq!(snapshot.completed_calls.len(), 1);
        assert_eq!(snapshot.completed_calls[0].args, "{\"path\":\"x\"}");
        assert_eq!(snapshot.in_flight.as_ref().unwrap().tool_call_id, "b");
    }

    #[test]
    fn resets_and_cancels_void_what_came_before() {
        let entries = log(&[
            LiveEvent::TextDelta {
                delta: "void".into(),
            },
            LiveEvent::StreamReset,
            LiveEvent::TextDelta {
                delta: "kept".into(),
            },
            LiveEvent::ToolCallDelta {
                tool_call_id: "b".into(),
                tool_name: "t".into(),
                args_delta: "{".into(),
            },
            LiveEvent::ToolCallCancel {
                tool_call_id: "b".into(),
                tool_name: "t".into(),
                reason: "cut".into(),
            },
        ]);
        let snapshot = snapshot_from_log(&entries);
        assert_eq!(snapshot.partial_text, "kept");
        assert!(snapshot.in_flight.is_none());
        assert!(snapshot.completed_calls.is_empty());
    }

    #[test]
    fn client_calls_left_without_results_are_handed_over() {
        let tools = vec!["ask".to_owned()];
        let parts = vec![
            Part::text("let me ask"),
            Part::tool_call("c1", "ask", "{}", false),
            Part::tool_call("c2", "read_file", "{}", false),
            Part::tool_call("c3", "ask", "{}", true),
        ];
        let calls = unhanded_client_calls(Some((Role::Assistant, &parts)), &tools);
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].tool_call_id.as_str(), calls[0].tool_name.as_str()),
            ("c1", "ask")
        );
        // Answered already (the last message is the tool's), or not the model's turn.
        assert!(unhanded_client_calls(Some((Role::Tool, &parts)), &tools).is_empty());
        assert!(unhanded_client_calls(None, &tools).is_empty());
    }

    fn reasoning(text: &str, signed: bool) -> CapturedReasoning {
        CapturedReasoning {
            text: text.into(),
            provider_metadata: signed.then(|| serde_json::json!({"anthropic": {"signature": "s"}})),
        }
    }

    #[test]
    fn logged_reasoning_is_captured_without_a_signature() {
        let snapshot = snapshot_from_log(&log(&[
            LiveEvent::ReasoningDelta {
                delta: "let me ".into(),
            },
            LiveEvent::ReasoningDelta {
                delta: "think".into(),
            },
            LiveEvent::TextDelta { delta: "Hi".into() },
        ]));
        assert_eq!(snapshot.reasoning, vec![reasoning("let me think", false)]);
        assert_eq!(snapshot.partial_text, "Hi");
    }

    #[test]
    fn the_checkpoint_signs_the_same_reasoning_and_only_that() {
        let logged = [reasoning("let me think", false)];
        let checkpoint = [reasoning("let me ", true), reasoning("think", true)];
        assert_eq!(signed_reasoning(&logged, &checkpoint), checkpoint.to_vec());
        let stale = [reasoning("let me", true)];
        assert_eq!(signed_reasoning(&logged, &stale), logged.to_vec());
        assert_eq!(signed_reasoning(&logged, &[]), logged.to_vec());
    }
}
