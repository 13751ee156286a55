//! The contract's live events, built from the loop's [`LiveEvent`]s.
//!
//! Durable events (`part`, `stream_reset`, `tool_call_cancel`) take a number from the chat's
//! event sequence and go to the live-part log, so a reconnecting client or a new owner after
//! a crash sees exactly what was streamed. `retry` is ephemeral: it is only sent live.

use keel_agent::LiveEvent;
use keel_core::{Part, PartKind};
use serde_json::{Value, json};

/// An event as the contract names and shapes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LivePayload {
    pub event: &'static str,
    pub data: Value,
    pub durable: bool,
}

/// Shapes a loop event for clients.
pub(crate) fn payload(event: &LiveEvent) -> LivePayload {
    let (name, data, durable) = match event {
        LiveEvent::TextDelta { delta } => (
            "part",
            part("assistant", json!({"type": "text", "text": delta})),
            true,
        ),
        LiveEvent::ReasoningDelta { delta } => (
            "part",
            part("assistant", json!({"type": "reasoning", "text": delta})),
            true,
        ),
        LiveEvent::RefusalDelta { delta } => (
            "part",
            part("assistant", json!({"type": "refusal", "text": delta})),
            true,
        ),
        LiveEvent::ToolCallDelta {
            tool_call_id,
            tool_name,
            args_delta,
        } => (
            "part",
            part(
                "assistant",
                json!({"type": "tool_call", "tool_call_id": tool_call_id, "tool_name": tool_name, "args_delta": args_delta}),
            ),
            true,
        ),
        LiveEvent::ToolCall {
            tool_call_id,
            tool_name,
            args,
            provider_executed,
        } => (
            "part",
            part(
                "assistant",
                json!({"type": "tool_call", "tool_call_id": tool_call_id, "tool_name": tool_name,
                       "args_delta": "", "args": args, "complete": true, "provider_executed": provider_executed}),
            ),
            true,
        ),
        LiveEvent::ToolResult { part: result } => {
            let role = match &result.kind {
                PartKind::ToolResult {
                    provider_executed: true,
                    ..
                } => "assistant",
                _ => "tool",
            };
            ("part", part(role, part_json(result)), true)
        }
        LiveEvent::Source { url, title } => (
            "part",
            part(
                "assistant",
                json!({"type": "source", "url": url, "title": title}),
            ),
            true,
        ),
        LiveEvent::Retry {
            attempt,
            delay,
            kind,
            message,
            provider,
            url,
        } => (
            "retry",
            json!({"attempt": attempt, "delay_ms": delay.as_millis() as u64, "kind": kind.as_str(),
                   "message": message, "provider": provider, "url": url}),
            false,
        ),
        LiveEvent::StreamReset => ("stream_reset", json!({}), true),
        LiveEvent::ToolCallCancel {
            tool_call_id,
            tool_name,
            reason,
        } => (
            "tool_call_cancel",
            json!({"tool_call_id": tool_call_id, "tool_name": tool_name, "reason": reason}),
            true,
        ),
    };
    LivePayload {
        event: name,
        data,
        durable,
    }
}

fn part(role: &str, part: Value) -> Value {
    json!({"role": role, "part": part})
}

fn part_json(part: &Part) -> Value {
    serde_json::to_value(part).unwrap_or(Value::Null)
}

/// The event name of a logged payload (the log stores `{"event", "data"}`).
pub(crate) fn logged(payload: &LivePayload) -> Value {
    json!({"event": payload.event, "data": payload.data})
}

/// Reads back a logged payload.
pub(crate) fn from_log(value: &Value) -> Option<(&'static str, Value)> {
    let event = match value.get("event")?.as_str()? {
        "part" => "part",
        "stream_reset" => "stream_reset",
        "tool_call_cancel" => "tool_call_cancel",
        _ => return None,
    };
    Some((event, value.get("data")?.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn text_and_tool_deltas_carry_only_the_new_text() {
        let p = payload(&LiveEvent::TextDelta {
            delta: "Hel".into(),
        });
        assert_eq!(p.event, "part");
        assert_eq!(
            p.data,
            json!({"role":"assistant","part":{"type":"text","text":"Hel"}})
        );
        let p = payload(&LiveEvent::ToolCallDelta {
            tool_call_id: "c".into(),
            tool_name: "read_file".into(),
            args_delta: "{\"pa".into(),
        });
        assert_eq!(p.data["part"]["args_delta"], "{\"pa");
        assert!(p.durable);
    }

    #[test]
    fn retry_is_ephemeral_and_shaped_as_the_contract_says() {
        let p = payload(&LiveEvent::Retry {
            attempt: 2,
            delay: Duration::from_millis(1500),
            kind: keel_core::ErrorKind::RateLimit,
            message: "slow down".into(),
            provider: Some("openai".into()),
            url: Some("https://api.openai.com/v1/chat/completions".into()),
        });
        assert_eq!(p.event, "retry");
        assert!(!p.durable);
        assert_eq!(
            p.data,
            json!({"attempt":2,"delay_ms":1500,"kind":"rate_limit","message":"slow down",
                   "provider":"openai","url":"https://api.openai.com/v1/chat/completions"})
        );
    }

    #[test]
    fn logged_payloads_round_trip() {
        let p = payload(&LiveEvent::StreamReset);
        let (event, data) = from_log(&logged(&p)).unwrap();
        assert_eq!((event, data), ("stream_reset", json!({})));
        assert!(from_log(&json!({"event":"retry","data":{}})).is_none());
    }

    #[test]
    fn local_tool_results_are_tool_role_parts() {
        let result = Part::tool_result("c", "read_file", json!("text"), false, false);
        let p = payload(&LiveEvent::ToolResult { part: result });
        assert_eq!(p.data["role"], "tool");
        assert_eq!(p.data["part"]["type"], "tool_result");
    }
}
