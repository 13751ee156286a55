//! The contract's live events, built from the loop's [`LiveEvent`]s.
//!
//! Durable events (`part`, `stream_reset`, `tool_call_cancel`) take a number from the chat's
//! event sequence and go to the live-part log, so a reconnecting client or a new owner after
//! a crash sees exactly what was streamed. `retry` is ephemeral: it is sent live, and kept
//! as the chat's retry state (`retry_state`) until the step commits or the run ends, for
//! clients that connect during the wait and for the followers of other replicas.
//!
//! The deltas that make up nearly every event of a reply (text, reasoning, refusal, tool
//! call arguments) are serialised straight from borrowed structs, once for clients and once
//! for the log, with no `serde_json::Value` in between. Their fields are declared in the
//! order a `Value` object sorts its keys, so the text is the same as the rarer events'
//! (built as a `Value`) and as it always was.

use keel_agent::LiveEvent;
use keel_core::{Part, PartKind};
use keel_store::JsonText;
use serde::Serialize;
use serde_json::{Value, json};

/// An event as the contract names and shapes it: its JSON data, and for a durable event the
/// entry the live-part log stores (`{"data", "event"}`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LivePayload {
    pub event: &'static str,
    pub data: String,
    /// Present exactly for durable events.
    pub logged: Option<JsonText>,
}

/// `{"part", "role"}`: a live part.
#[derive(Serialize)]
struct PartEvent<'a, P> {
    part: P,
    role: &'a str,
}

/// A text, reasoning or refusal delta.
#[derive(Serialize)]
struct TextPart<'a> {
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// New argument text of a streamed tool call.
#[derive(Serialize)]
struct ToolCallDeltaPart<'a> {
    args_delta: &'a str,
    tool_call_id: &'a str,
    tool_name: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// The log's form of a durable event.
#[derive(Serialize)]
struct Logged<'a, D> {
    data: &'a D,
    event: &'static str,
}

/// Serialises `data` for clients and, when `durable`, for the log.
fn shaped<D: Serialize>(event: &'static str, data: &D, durable: bool) -> LivePayload {
    LivePayload {
        event,
        // The shapes here are structs of strings and `Value`s, which always serialise.
        data: serde_json::to_string(data).unwrap_or_else(|_| "null".to_owned()),
        logged: durable.then(|| JsonText::of(&Logged { data, event })),
    }
}

fn text_part(role: &'static str, kind: &'static str, text: &str) -> LivePayload {
    let data = PartEvent {
        part: TextPart { text, kind },
        role,
    };
    shaped("part", &data, true)
}

fn assistant_text(kind: &'static str, text: &str) -> LivePayload {
    text_part("assistant", kind, text)
}

/// Shapes a loop event of a compaction summary streaming: its text is the `system`
/// message's to come (the summary), not the assistant's, so no client takes it for the
/// reply.
pub(crate) fn summary_payload(event: &LiveEvent) -> LivePayload {
    match event {
        LiveEvent::TextDelta { delta } => text_part("system", "text", delta),
        other => payload(other),
    }
}

/// Shapes a loop event for clients.
pub(crate) fn payload(event: &LiveEvent) -> LivePayload {
    let (name, data, durable) = match event {
        LiveEvent::TextDelta { delta } => return assistant_text("text", delta),
        LiveEvent::ReasoningDelta { delta } => return assistant_text("reasoning", delta),
        LiveEvent::RefusalDelta { delta } => return assistant_text("refusal", delta),
        LiveEvent::ToolCallDelta {
            tool_call_id,
            tool_name,
            args_delta,
        } => {
            let data = PartEvent {
                part: ToolCallDeltaPart {
                    args_delta,
                    tool_call_id,
                    tool_name,
                    kind: "tool_call",
                },
                role: "assistant",
            };
            return shaped("part", &data, true);
        }
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
    shaped(name, &data, durable)
}

fn part(role: &str, part: Value) -> Value {
    json!({"role": role, "part": part})
}

fn part_json(part: &Part) -> Value {
    serde_json::to_value(part).unwrap_or(Value::Null)
}

/// A chat's stored retry state: the `retry` event's data and the position it carried.
pub(crate) fn retry_state(seq: i64, data: &str) -> Value {
    let data = serde_json::from_str::<Value>(data).unwrap_or(Value::Null);
    json!({"seq": seq, "data": data})
}

/// Reads back a stored retry state: the position the `retry` event carried, and its data.
pub(crate) fn from_retry_state(state: &Value) -> Option<(i64, Value)> {
    Some((state.get("seq")?.as_i64()?, state.get("data")?.clone()))
}

/// Reads back a logged payload.
pub fn from_log(value: &Value) -> Option<(&'static str, Value)> {
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

    fn data(p: &LivePayload) -> Value {
        serde_json::from_str(&p.data).unwrap()
    }

    /// The log entry as the log reads it back.
    fn logged(p: &LivePayload) -> Value {
        serde_json::from_str(p.logged.as_ref().unwrap().as_str()).unwrap()
    }

    #[test]
    fn a_retry_state_reads_back_as_its_position_and_data() {
        let p = payload(&LiveEvent::Retry {
            attempt: 2,
            delay: Duration::from_millis(250),
            kind: keel_core::ErrorKind::Server,
            message: "boom".into(),
            provider: Some("p".into()),
            url: None,
        });
        let state = retry_state(41, &p.data);
        assert_eq!(from_retry_state(&state), Some((41, data(&p))));
        assert_eq!(from_retry_state(&json!({"data": {}})), None);
    }

    #[test]
    fn text_and_tool_deltas_carry_only_the_new_text() {
        let p = payload(&LiveEvent::TextDelta {
            delta: "Hel".into(),
        });
        assert_eq!(p.event, "part");
        assert_eq!(
            data(&p),
            json!({"role":"assistant","part":{"type":"text","text":"Hel"}})
        );
        let p = payload(&LiveEvent::ToolCallDelta {
            tool_call_id: "c".into(),
            tool_name: "read_file".into(),
            args_delta: "{\"pa".into(),
        });
        assert_eq!(data(&p)["part"]["args_delta"], "{\"pa");
        assert!(p.logged.is_some());
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
        assert!(p.logged.is_none());
        assert_eq!(
            data(&p),
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
        assert_eq!(data(&p)["role"], "tool");
        assert_eq!(data(&p)["part"]["type"], "tool_result");
    }

    /// Every event as the shapes were built before the deltas were serialised directly:
    /// a `Value` for clients, `{"event", "data"}` as a `Value` for the log.
    fn as_values(event: &LiveEvent) -> (Value, Value) {
        let text = |kind: &str, text: &str| json!({"role": "assistant", "part": {"type": kind, "text": text}});
        let data = match event {
            LiveEvent::TextDelta { delta } => text("text", delta),
            LiveEvent::ReasoningDelta { delta } => text("reasoning", delta),
            LiveEvent::RefusalDelta { delta } => text("refusal", delta),
            LiveEvent::ToolCallDelta {
                tool_call_id,
                tool_name,
                args_delta,
            } => json!({"role": "assistant", "part": {"type": "tool_call",
                "tool_call_id": tool_call_id, "tool_name": tool_name, "args_delta": args_delta}}),
            _ => serde_json::from_str(&payload(event).data).unwrap(),
        };
        let name = payload(event).event;
        (data.clone(), json!({"event": name, "data": data}))
    }

    #[test]
    fn every_event_is_byte_for_byte_what_it_was() {
        let tricky = "h\u{e9}llo \"q\" \\ \n\t\u{1} </script> \u{1F600}";
        let events = [
            LiveEvent::TextDelta {
                delta: tricky.into(),
            },
            LiveEvent::ReasoningDelta {
                delta: tricky.into(),
            },
            LiveEvent::RefusalDelta {
                delta: tricky.into(),
            },
            LiveEvent::ToolCallDelta {
                tool_call_id: "call_\"1".into(),
                tool_name: "read_file".into(),
                args_delta: "{\"path\":\"a\\b\"".into(),
            },
            LiveEvent::ToolCall {
                tool_call_id: "c".into(),
                tool_name: "t".into(),
                args: "{}".into(),
                provider_executed: true,
            },
            LiveEvent::ToolResult {
                part: Part::tool_result("c", "t", json!({"z": 1, "a": [tricky]}), true, false),
            },
            LiveEvent::Source {
                url: "https://example.com".into(),
                title: None,
            },
            LiveEvent::StreamReset,
            LiveEvent::ToolCallCancel {
                tool_call_id: "c".into(),
                tool_name: "t".into(),
                reason: tricky.into(),
            },
        ];
        for event in &events {
            let p = payload(event);
            let (data, logged) = as_values(event);
            assert_eq!(p.data, data.to_string(), "{event:?}");
            assert_eq!(
                p.logged.as_ref().map(JsonText::as_str),
                Some(logged.to_string().as_str()),
                "{event:?}"
            );
        }
    }
}
