//! Rebuilding the step in progress from its live-part log after a crash.
//!
//! The log holds exactly what clients were sent. Replaying it gives the partial text and the
//! tool calls of the step, which the loop resumes with its recovery plans: the final reply
//! then contains what was streamed before the crash exactly once.

use keel_agent::StreamSnapshot;
use keel_agent::recovery::{CapturedCall, args_are_json};
use serde_json::Value;

use crate::live::from_log;

/// Replays logged payloads (in sequence order) into a snapshot of the step.
pub fn snapshot_from_log<'a>(payloads: impl IntoIterator<Item = &'a Value>) -> StreamSnapshot {
    let mut text = String::new();
    let mut calls: Vec<(CapturedCall, bool)> = Vec::new();
    for value in payloads {
        let Some((event, data)) = from_log(value) else {
            continue;
        };
        match event {
            "stream_reset" => {
                text.clear();
                calls.clear();
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
}
