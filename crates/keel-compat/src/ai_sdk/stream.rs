//! The AI SDK's UI message stream of one reply: the [`Op`]s of the reply's projection as
//! chunks of the `ui-message-chunks` schema of the `ai` package (version 6).
//!
//! | op | chunks |
//! | --- | --- |
//! | start | `start` (`messageId`) |
//! | a new step | `start-step` |
//! | text / reasoning part | `text-start`, `text-delta`…, `text-end` (`reasoning-…` likewise); a voided part (a whole restart said something else) just ends, and the new text comes in a new part: the protocol cannot take text back |
//! | tool call (arguments complete) | `tool-input-start`, `tool-input-delta` (all of them), `tool-input-available` (`tool-input-error` when the arguments are not JSON); `providerExecuted: true` for a call the provider ran (web search), and when its result is already known, so a resumed page does not run a client-side tool again |
//! | tool result | `tool-output-available`, or `tool-output-error` with the result as text |
//! | step stored | `finish-step` |
//! | end `Done` / `ToolCalls` | `finish` with `stop` / `tool-calls` |
//! | end `Interrupted` (a stop, or a change of branch under the reply) | `abort` |
//! | end `Failed` | `error` with the message |

use serde_json::{Value, json};

use crate::project::{Op, Projection, TextKind};
use crate::reply::{Call, End, Reply};

/// The stream of one reply.
#[derive(Debug)]
pub(crate) struct UiStream {
    message_id: String,
    projection: Projection,
    /// Calls announced as already answered.
    answered: Vec<String>,
}

impl UiStream {
    /// A stream for the assistant message with this id.
    #[cfg(test)]
    pub(crate) fn new(message_id: impl Into<String>) -> Self {
        Self::holding(message_id, Vec::new())
    }

    /// A stream that announces calls of these client-side tools only once answered or at
    /// the reply's end (see [`Projection::new`]).
    pub(crate) fn holding(message_id: impl Into<String>, client_tools: Vec<String>) -> Self {
        Self {
            message_id: message_id.into(),
            projection: Projection::new(client_tools),
            answered: Vec::new(),
        }
    }

    /// The chunks that bring the client from what it has to `reply`.
    pub(crate) fn update(&mut self, reply: &Reply) -> Vec<Value> {
        let mut out = Vec::new();
        for op in self.projection.update(reply) {
            self.chunks(op, &mut out);
        }
        out
    }

    /// True once the reply's end was sent.
    pub(crate) fn finished(&self) -> bool {
        self.projection.ended()
    }

    fn chunks(&mut self, op: Op, out: &mut Vec<Value>) {
        out.push(match op {
            Op::Start => json!({"type": "start", "messageId": self.message_id}),
            Op::StartStep => json!({"type": "start-step"}),
            Op::Open { part, kind } => {
                json!({"type": format!("{}-start", name(kind)), "id": part_id(part, kind)})
            }
            Op::Delta { part, kind, text } => {
                json!({"type": format!("{}-delta", name(kind)), "id": part_id(part, kind), "delta": text})
            }
            Op::Close { part, kind, .. } => {
                json!({"type": format!("{}-end", name(kind)), "id": part_id(part, kind)})
            }
            Op::Call { call, answered, .. } => return self.call(&call, answered, out),
            Op::Output {
                call_id, outcome, ..
            } => {
                let answered = self.answered.contains(&call_id);
                let mut chunk = if outcome.is_error {
                    let text = match &outcome.value {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    json!({"type": "tool-output-error", "toolCallId": call_id, "errorText": text})
                } else {
                    json!({"type": "tool-output-available", "toolCallId": call_id, "output": outcome.value})
                };
                if answered {
                    chunk["providerExecuted"] = json!(true);
                }
                chunk
            }
            Op::FinishStep => json!({"type": "finish-step"}),
            Op::End(end) => match end {
                End::Done => json!({"type": "finish", "finishReason": "stop"}),
                End::ToolCalls => json!({"type": "finish", "finishReason": "tool-calls"}),
                End::Interrupted => json!({"type": "abort", "reason": "interrupted"}),
                End::Failed(message) => json!({"type": "error", "errorText": message}),
            },
        });
    }

    /// A call's input, whole: its arguments are complete when it is announced.
    fn call(&mut self, call: &Call, answered: bool, chunks: &mut Vec<Value>) {
        let mut start =
            json!({"type": "tool-input-start", "toolCallId": call.id, "toolName": call.name});
        if call.provider_executed {
            start["providerExecuted"] = json!(true);
        }
        chunks.push(start);
        if !call.args.is_empty() {
            chunks.push(json!({"type": "tool-input-delta", "toolCallId": call.id, "inputTextDelta": call.args}));
        }
        let args = if call.args.trim().is_empty() {
            "{}"
        } else {
            &call.args
        };
        match serde_json::from_str::<Value>(args) {
            Ok(input) => {
                let mut available = json!({"type": "tool-input-available", "toolCallId": call.id,
                                           "toolName": call.name, "input": input});
                if answered || call.provider_executed {
                    // Run by the provider, or answered already (a resumed stream): the page
                    // must not run it (again).
                    available["providerExecuted"] = json!(true);
                    self.answered.push(call.id.clone());
                }
                chunks.push(available);
            }
            Err(error) => chunks.push(json!({"type": "tool-input-error", "toolCallId": call.id,
                "toolName": call.name, "input": call.args,
                "errorText": format!("the arguments are not JSON: {error}")})),
        }
    }
}

fn name(kind: TextKind) -> &'static str {
    match kind {
        TextKind::Text => "text",
        TextKind::Reasoning => "reasoning",
    }
}

fn part_id(part: usize, kind: TextKind) -> String {
    format!("{}-{}", name(kind), part + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Value {
        json!({"role": "assistant", "part": {"type": "text", "text": t}})
    }

    fn types(chunks: &[Value]) -> Vec<&str> {
        chunks.iter().map(|c| c["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn a_text_reply_streams_as_start_step_text_and_finish() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m1");
        reply.apply("part", &text("Hel"));
        let first = stream.update(&reply);
        assert_eq!(
            types(&first),
            ["start", "start-step", "text-start", "text-delta"]
        );
        assert_eq!(first[0]["messageId"], "m1");
        reply.apply("part", &text("lo"));
        let second = stream.update(&reply);
        assert_eq!(
            second,
            vec![json!({"type": "text-delta", "id": "text-1", "delta": "lo"})]
        );
        reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [{"type": "text", "text": "Hello"}]}),
        );
        reply.apply("status", &json!({"status": "waiting"}));
        let last = stream.update(&reply);
        assert_eq!(types(&last), ["text-end", "finish-step", "finish"]);
        assert_eq!(last[2]["finishReason"], "stop");
        assert!(stream.finished());
        assert!(stream.update(&reply).is_empty());
    }

    #[test]
    fn a_republished_prefix_after_a_reset_is_not_sent_twice() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply("part", &text("Hello wor"));
        stream.update(&reply);
        // A new owner after a crash: reset, then the kept text, then the continuation.
        reply.apply("stream_reset", &json!({}));
        assert!(stream.update(&reply).is_empty());
        reply.apply("part", &text("Hello"));
        assert!(stream.update(&reply).is_empty());
        reply.apply("part", &text(" world"));
        assert_eq!(
            stream.update(&reply),
            vec![json!({"type": "text-delta", "id": "text-1", "delta": "ld"})]
        );
    }

    #[test]
    fn a_restart_with_other_text_starts_a_new_part() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply("part", &text("abc"));
        stream.update(&reply);
        reply.apply("stream_reset", &json!({}));
        reply.apply("part", &text("xyz"));
        let chunks = stream.update(&reply);
        assert_eq!(types(&chunks), ["text-end", "text-start", "text-delta"]);
        assert_eq!(chunks[1]["id"], "text-2");
    }

    #[test]
    fn a_tool_call_is_announced_whole_once_its_arguments_are_complete() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply(
            "part",
            &json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c",
                    "tool_name": "weather", "args_delta": "{\"city\":"}}),
        );
        assert_eq!(types(&stream.update(&reply)), ["start"]);
        reply.apply(
            "part",
            &json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c",
                    "tool_name": "weather", "args_delta": "", "args": "{\"city\":\"Oslo\"}", "complete": true}}),
        );
        reply.apply(
            "part",
            &json!({"role": "tool", "part": {"type": "tool_result", "tool_call_id": "c",
                    "tool_name": "weather", "result": {"c": 3}, "is_error": false}}),
        );
        let chunks = stream.update(&reply);
        assert_eq!(
            types(&chunks),
            [
                "start-step",
                "tool-input-start",
                "tool-input-delta",
                "tool-input-available",
                "tool-output-available"
            ]
        );
        assert_eq!(chunks[2]["inputTextDelta"], "{\"city\":\"Oslo\"}");
        assert_eq!(chunks[3]["input"], json!({"city": "Oslo"}));
        assert_eq!(chunks[3].get("providerExecuted"), None);
        assert_eq!(chunks[4]["output"], json!({"c": 3}));
    }

    #[test]
    fn a_reply_cut_inside_a_tool_call_keeps_its_continuation_in_the_same_text_part() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        let mut chunks = stream.update(&reply);
        for (event, data) in [
            ("part", text("Looking it up: ")),
            (
                "part",
                json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c",
                       "tool_name": "lookup", "args_delta": "{\"q\": \"lo"}}),
            ),
            (
                "tool_call_cancel",
                json!({"tool_call_id": "c", "tool_name": "lookup", "reason": "cut"}),
            ),
            ("part", text("done.")),
            (
                "message",
                json!({"role": "assistant", "parts": [{"type": "text", "text": "Looking it up: done."}]}),
            ),
            ("status", json!({"status": "waiting"})),
        ] {
            reply.apply(event, &data);
            chunks.extend(stream.update(&reply));
        }
        assert_eq!(
            types(&chunks),
            [
                "start",
                "start-step",
                "text-start",
                "text-delta",
                "text-delta",
                "text-end",
                "finish-step",
                "finish"
            ]
        );
        let text: String = chunks.iter().filter_map(|c| c["delta"].as_str()).collect();
        assert_eq!(text, "Looking it up: done.");
    }

    #[test]
    fn a_resumed_client_call_that_was_answered_is_not_asked_again() {
        let mut reply = Reply::default();
        let mut stream = UiStream::holding("m", vec!["ask".into()]);
        reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [{"type": "tool_call", "tool_call_id": "c",
                    "tool_name": "ask", "args": "{}"}]}),
        );
        // The replay's answer may come in a later batch than the call.
        assert_eq!(types(&stream.update(&reply)), ["start", "start-step"]);
        reply.apply(
            "message",
            &json!({"role": "tool", "parts": [{"type": "tool_result", "tool_call_id": "c",
                    "tool_name": "ask", "result": "yes"}]}),
        );
        let chunks = stream.update(&reply);
        let available = chunks
            .iter()
            .find(|c| c["type"] == "tool-input-available")
            .unwrap();
        assert_eq!(available["providerExecuted"], true);
        let output = chunks
            .iter()
            .find(|c| c["type"] == "tool-output-available")
            .unwrap();
        assert_eq!(output["output"], "yes");
        assert_eq!(output["providerExecuted"], true);
    }

    #[test]
    fn a_provider_run_search_is_sent_as_provider_executed_live() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply(
            "part",
            &json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "s",
                    "tool_name": "web_search", "args_delta": "", "args": "{\"query\":\"q\"}",
                    "complete": true, "provider_executed": true}}),
        );
        reply.apply(
            "part",
            &json!({"role": "assistant", "part": {"type": "tool_result", "tool_call_id": "s",
                    "tool_name": "web_search", "result": [], "provider_executed": true}}),
        );
        let chunks = stream.update(&reply);
        for kind in [
            "tool-input-start",
            "tool-input-available",
            "tool-output-available",
        ] {
            let chunk = chunks.iter().find(|c| c["type"] == kind).unwrap();
            assert_eq!(chunk["providerExecuted"], true, "{kind}: {chunks:?}");
        }
    }

    #[test]
    fn client_side_calls_finish_with_tool_calls_and_failures_with_an_error() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [{"type": "tool_call", "tool_call_id": "c",
                    "tool_name": "ask", "args": "{}"}]}),
        );
        reply.apply("status", &json!({"status": "requires_action"}));
        let chunks = stream.update(&reply);
        assert_eq!(
            types(&chunks),
            [
                "start",
                "start-step",
                "tool-input-start",
                "tool-input-delta",
                "tool-input-available",
                "finish-step",
                "finish"
            ]
        );
        assert_eq!(chunks[6]["finishReason"], "tool-calls");

        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply(
            "status",
            &json!({"status": "error", "last_error": {"kind": "auth", "message": "bad key"}}),
        );
        assert_eq!(
            stream.update(&reply)[1],
            json!({"type": "error", "errorText": "bad key"})
        );
    }

    #[test]
    fn an_interrupt_aborts_the_stream() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply("part", &text("par"));
        stream.update(&reply);
        reply.apply(
            "message",
            &json!({"role": "assistant", "interrupted": true, "parts": [{"type": "text", "text": "par"}]}),
        );
        reply.apply("status", &json!({"status": "waiting"}));
        assert_eq!(
            types(&stream.update(&reply)),
            ["text-end", "finish-step", "abort"]
        );
    }
}
