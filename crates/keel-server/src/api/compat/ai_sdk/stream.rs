//! The AI SDK's UI message stream of one reply: what to send next, given the reply as Keel's
//! events built it and what was sent so far.
//!
//! Chunks follow the `ui-message-chunks` schema of the `ai` package (version 6). Text and
//! reasoning are sent as deltas of what the client has; when the reply's content no longer
//! extends what was sent (a whole restart after a provider failure), the old part is ended
//! and the new content starts a new part, since the protocol cannot take text back.
//!
//! | reply | chunks |
//! | --- | --- |
//! | first update | `start` (`messageId`) |
//! | a new step | `start-step` |
//! | text / reasoning block | `text-start`, `text-delta`…, `text-end` (`reasoning-…` likewise) once a later block exists or the step is stored |
//! | tool call | `tool-input-start`, `tool-input-delta`…, `tool-input-available` (`tool-input-error` when the arguments are not JSON or the call was cancelled) |
//! | tool result | `tool-output-available`, or `tool-output-error` with the result as text |
//! | step stored | `finish-step` |
//! | end `Done` / `ToolCalls` | `finish` with `stop` / `tool-calls` |
//! | end `Interrupted` | `abort` |
//! | end `Failed` | `error` with the message |

use serde_json::{Value, json};

use crate::api::compat::reply::{Block, Call, End, Reply};

/// What was sent of one block.
#[derive(Debug, Clone, PartialEq)]
enum Sent {
    Text {
        id: String,
        reasoning: bool,
        text: String,
        ended: bool,
    },
    Call {
        id: String,
        name: String,
        args: String,
        input_done: bool,
        output_done: bool,
    },
}

#[derive(Debug, Default)]
struct SentStep {
    blocks: Vec<Sent>,
    finished: bool,
}

/// The stream of one reply.
#[derive(Debug)]
pub(crate) struct UiStream {
    message_id: String,
    started: bool,
    steps: Vec<SentStep>,
    next_part: usize,
    finished: bool,
}

impl UiStream {
    /// A stream for the assistant message with this id.
    pub(crate) fn new(message_id: impl Into<String>) -> Self {
        Self {
            message_id: message_id.into(),
            started: false,
            steps: Vec::new(),
            next_part: 0,
            finished: false,
        }
    }

    /// The chunks that bring the client from what it has to `reply`.
    pub(crate) fn update(&mut self, reply: &Reply) -> Vec<Value> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        if !self.started {
            self.started = true;
            out.push(json!({"type": "start", "messageId": self.message_id}));
        }
        for (index, step) in reply.steps.iter().enumerate() {
            if index == self.steps.len() {
                // A step that nothing was sent of yet is announced only once it has content.
                if step.blocks.is_empty() && !step.committed {
                    break;
                }
                out.push(json!({"type": "start-step"}));
                self.steps.push(SentStep::default());
            }
            let mut next_part = self.next_part;
            let sent = &mut self.steps[index];
            for (b, block) in step.blocks.iter().enumerate() {
                let closed = step.committed || b + 1 < step.blocks.len();
                sync_block(sent, b, block, closed, &mut next_part, &mut out);
            }
            if step.committed && !sent.finished {
                // Blocks the stored step no longer has (a cancelled call) end here.
                for extra in sent.blocks.iter_mut().skip(step.blocks.len()) {
                    close(extra, "the call was cancelled", &mut out);
                }
                sent.finished = true;
                out.push(json!({"type": "finish-step"}));
            }
            self.next_part = next_part;
        }
        if let Some(end) = &reply.end {
            self.finished = true;
            match end {
                End::Done => out.push(json!({"type": "finish", "finishReason": "stop"})),
                End::ToolCalls => {
                    out.push(json!({"type": "finish", "finishReason": "tool-calls"}));
                }
                End::Interrupted => out.push(json!({"type": "abort", "reason": "interrupted"})),
                End::Failed(message) => out.push(json!({"type": "error", "errorText": message})),
            }
        }
        out
    }

    /// True once the reply's end was sent.
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }
}

fn sync_block(
    sent: &mut SentStep,
    index: usize,
    block: &Block,
    closed: bool,
    next_part: &mut usize,
    out: &mut Vec<Value>,
) {
    let fresh = |next_part: &mut usize, reasoning: bool| {
        *next_part += 1;
        let id = format!(
            "{}-{}",
            if reasoning { "reasoning" } else { "text" },
            next_part
        );
        Sent::Text {
            id,
            reasoning,
            text: String::new(),
            ended: false,
        }
    };
    match block {
        Block::Text(target) | Block::Reasoning(target) => {
            let reasoning = matches!(block, Block::Reasoning(_));
            let reusable = matches!(sent.blocks.get(index),
                Some(Sent::Text { reasoning: r, text, .. })
                    if *r == reasoning && (target.starts_with(text.as_str()) || text.starts_with(target.as_str())));
            if !reusable {
                if target.is_empty() {
                    return;
                }
                if let Some(old) = sent.blocks.get_mut(index) {
                    close(old, "the call was cancelled", out);
                }
                let new = fresh(next_part, reasoning);
                if let Sent::Text { id, .. } = &new {
                    let kind = if reasoning { "reasoning" } else { "text" };
                    out.push(json!({"type": format!("{kind}-start"), "id": id}));
                }
                if index < sent.blocks.len() {
                    sent.blocks[index] = new;
                } else {
                    sent.blocks.push(new);
                }
            }
            if let Some(Sent::Text {
                id,
                text,
                ended,
                reasoning,
            }) = sent.blocks.get_mut(index)
            {
                let kind = if *reasoning { "reasoning" } else { "text" };
                if !*ended && target.len() > text.len() && target.starts_with(text.as_str()) {
                    let delta = &target[text.len()..];
                    out.push(json!({"type": format!("{kind}-delta"), "id": id, "delta": delta}));
                    text.push_str(delta);
                }
                if closed && !*ended && text == target {
                    *ended = true;
                    out.push(json!({"type": format!("{kind}-end"), "id": id}));
                }
            }
        }
        Block::Call(call) => sync_call(sent, index, call, out),
    }
}

fn sync_call(sent: &mut SentStep, index: usize, call: &Call, out: &mut Vec<Value>) {
    let same = matches!(sent.blocks.get(index), Some(Sent::Call { id, .. }) if *id == call.id);
    if !same {
        if let Some(old) = sent.blocks.get_mut(index) {
            close(old, "the call was cancelled", out);
        }
        out.push(json!({"type": "tool-input-start", "toolCallId": call.id, "toolName": call.name}));
        let new = Sent::Call {
            id: call.id.clone(),
            name: call.name.clone(),
            args: String::new(),
            input_done: false,
            output_done: false,
        };
        if index < sent.blocks.len() {
            sent.blocks[index] = new;
        } else {
            sent.blocks.push(new);
        }
    }
    let Some(Sent::Call {
        args,
        input_done,
        output_done,
        ..
    }) = sent.blocks.get_mut(index)
    else {
        return;
    };
    if !*input_done && call.args.len() > args.len() && call.args.starts_with(args.as_str()) {
        let delta = &call.args[args.len()..];
        out.push(
            json!({"type": "tool-input-delta", "toolCallId": call.id, "inputTextDelta": delta}),
        );
        args.push_str(delta);
    }
    if call.complete && !*input_done {
        *input_done = true;
        match serde_json::from_str::<Value>(if call.args.trim().is_empty() {
            "{}"
        } else {
            &call.args
        }) {
            Ok(input) => out.push(
                json!({"type": "tool-input-available", "toolCallId": call.id,
                                         "toolName": call.name, "input": input}),
            ),
            Err(error) => {
                *output_done = true;
                out.push(json!({"type": "tool-input-error", "toolCallId": call.id, "toolName": call.name,
                                "input": call.args, "errorText": format!("the arguments are not JSON: {error}")}));
            }
        }
    }
    if let Some(result) = &call.result
        && *input_done
        && !*output_done
    {
        *output_done = true;
        if result.is_error {
            let text = match &result.value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.push(
                json!({"type": "tool-output-error", "toolCallId": call.id, "errorText": text}),
            );
        } else {
            out.push(json!({"type": "tool-output-available", "toolCallId": call.id, "output": result.value}));
        }
    }
}

/// Ends a block the reply no longer has.
fn close(block: &mut Sent, reason: &str, out: &mut Vec<Value>) {
    match block {
        Sent::Text {
            id,
            reasoning,
            ended,
            ..
        } => {
            if !*ended {
                *ended = true;
                let kind = if *reasoning { "reasoning" } else { "text" };
                out.push(json!({"type": format!("{kind}-end"), "id": id}));
            }
        }
        Sent::Call {
            id,
            name,
            args,
            input_done,
            output_done,
        } => {
            if !*input_done {
                *input_done = true;
                *output_done = true;
                out.push(
                    json!({"type": "tool-input-error", "toolCallId": id, "toolName": name,
                                "input": args, "errorText": reason}),
                );
            }
        }
    }
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
    fn a_tool_call_streams_its_input_then_its_output() {
        let mut reply = Reply::default();
        let mut stream = UiStream::new("m");
        reply.apply(
            "part",
            &json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c",
                    "tool_name": "weather", "args_delta": "{\"city\":"}}),
        );
        assert_eq!(
            types(&stream.update(&reply)),
            [
                "start",
                "start-step",
                "tool-input-start",
                "tool-input-delta"
            ]
        );
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
                "tool-input-delta",
                "tool-input-available",
                "tool-output-available"
            ]
        );
        assert_eq!(chunks[0]["inputTextDelta"], "\"Oslo\"}");
        assert_eq!(chunks[1]["input"], json!({"city": "Oslo"}));
        assert_eq!(chunks[2]["output"], json!({"c": 3}));
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
