//! A reply as an OpenAI Responses object and as its streaming events, numbered so that a
//! client resuming with `starting_after` gets exactly what it has not seen.
//!
//! **Sequence numbers.** Keel keeps the reply, not the deltas it was streamed in (a step's
//! live parts are replaced by the stored message). So numbers are derived from the content:
//! every event takes one number, except a delta, which takes one per character and carries
//! the number of its last character. The numbers grow strictly and depend only on the
//! reply's content, so after a reconnect, a commit or a daemon restart the same position
//! names the same point; a resumed delta that straddles it is cut there.
//!
//! | reply | Responses |
//! | --- | --- |
//! | start | `response.created`, `response.in_progress` |
//! | text block | a `message` item: `output_item.added`, `content_part.added`, `output_text.delta`…, `output_text.done`, `content_part.done`, `output_item.done` |
//! | call of a client-side tool (`tools` of the request) | a `function_call` item (`call_id` = Keel's tool call id): `output_item.added`, `function_call_arguments.delta`…, `.done`, `output_item.done` |
//! | call of one of Keel's own tools | an `mcp_call` item (`server_label: "keel"`) added when its arguments are complete, done with its `output` (or `error`) |
//! | reasoning | not sent (Keel keeps it; the Responses summary format does not fit it) |
//! | end `Done` / `ToolCalls` | `response.completed` |
//! | end `Interrupted` (cancel) | `response.incomplete`, status `cancelled` |
//! | end `Failed` | `response.failed` with the message |

use serde_json::{Value, json};

use crate::api::compat::reply::{Block, End, Reply};

/// What a response is about, besides its reply.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub id: String,
    pub model: String,
    pub created_at: i64,
    pub previous_response_id: Option<String>,
    pub background: bool,
    /// Names of the client-side tools: their calls are `function_call` items.
    pub client_tools: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Message,
    Function,
    Mcp,
}

/// One output item as far as the reply has it.
#[derive(Debug, Clone)]
struct Item {
    kind: Kind,
    /// The text, or the arguments.
    text: String,
    name: String,
    call_id: String,
    result: Option<(Value, bool)>,
    /// Nothing in it changes any more.
    closed: bool,
}

fn items(reply: &Reply, client_tools: &[String]) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    let ended = reply.end.is_some();
    for step in &reply.steps {
        let blocks: Vec<&Block> = step
            .blocks
            .iter()
            .filter(|b| match b {
                Block::Text(t) => !t.is_empty(),
                Block::Reasoning(_) => false,
                Block::Call(_) => true,
            })
            .collect();
        for (i, block) in blocks.iter().enumerate() {
            let later = i + 1 < blocks.len();
            let item = match block {
                Block::Text(text) => Item {
                    kind: Kind::Message,
                    text: text.clone(),
                    name: String::new(),
                    call_id: String::new(),
                    result: None,
                    closed: later || step.committed || ended,
                },
                Block::Call(call) => {
                    let client = client_tools.contains(&call.name);
                    Item {
                        kind: if client { Kind::Function } else { Kind::Mcp },
                        text: call.args.clone(),
                        name: call.name.clone(),
                        call_id: call.id.clone(),
                        result: call.result.as_ref().map(|r| (r.value.clone(), r.is_error)),
                        closed: if client {
                            call.complete || ended
                        } else {
                            call.result.is_some() || ended
                        },
                    }
                }
                Block::Reasoning(_) => continue,
            };
            out.push(item);
        }
    }
    out
}

fn item_id(meta: &Meta, kind: &Kind, index: usize) -> String {
    let prefix = match kind {
        Kind::Message => "msg",
        Kind::Function => "fc",
        Kind::Mcp => "mcp",
    };
    let suffix = meta.id.trim_start_matches("resp_");
    format!("{prefix}_{suffix}_{index}")
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An item as the Responses API shows it; `done` gives its final status. A message in
/// progress shows its text so far only `with_partial` (a retrieved response, not the
/// `output_item.added` event, which starts empty as the reference has it).
fn item_json(meta: &Meta, index: usize, item: &Item, done: bool, with_partial: bool) -> Value {
    let id = item_id(meta, &item.kind, index);
    let status = if done { "completed" } else { "in_progress" };
    match item.kind {
        Kind::Message => json!({
            "id": id, "type": "message", "role": "assistant", "status": status,
            "content": if done || with_partial { json!([{"type": "output_text", "text": item.text, "annotations": [], "logprobs": []}]) } else { json!([]) },
        }),
        Kind::Function => json!({
            "id": id, "type": "function_call", "call_id": item.call_id, "name": item.name,
            "arguments": if done { item.text.as_str() } else { "" }, "status": status,
        }),
        Kind::Mcp => {
            let (output, error, status) = match &item.result {
                Some((value, false)) if done => (Some(text_of(value)), None, "completed"),
                Some((value, true)) if done => (None, Some(text_of(value)), "failed"),
                _ if done => (None, Some("the call was interrupted".to_owned()), "failed"),
                _ => (None, None, "in_progress"),
            };
            json!({"id": id, "type": "mcp_call", "server_label": "keel", "name": item.name,
                   "arguments": item.text, "output": output, "error": error, "status": status})
        }
    }
}

/// The status of a response with this reply.
pub(crate) fn status(reply: &Reply) -> &'static str {
    match &reply.end {
        None => "in_progress",
        Some(End::Done | End::ToolCalls) => "completed",
        Some(End::Interrupted) => "cancelled",
        Some(End::Failed(_)) => "failed",
    }
}

/// The Response object of a reply.
pub(crate) fn response_object(meta: &Meta, reply: &Reply) -> Value {
    let items = items(reply, &meta.client_tools);
    let ended = reply.end.is_some();
    let output: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, item)| item_json(meta, i, item, item.closed || ended, true))
        .collect();
    let output_text: String = items
        .iter()
        .filter(|i| i.kind == Kind::Message)
        .map(|i| i.text.as_str())
        .collect();
    let error = match &reply.end {
        Some(End::Failed(message)) => json!({"code": "server_error", "message": message}),
        _ => Value::Null,
    };
    let incomplete = match &reply.end {
        Some(End::Interrupted) => json!({"reason": "cancelled"}),
        _ => Value::Null,
    };
    json!({
        "id": meta.id,
        "object": "response",
        "created_at": meta.created_at,
        "status": status(reply),
        "background": meta.background,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": null,
        "metadata": {},
        "model": meta.model,
        "output": output,
        "output_text": output_text,
        "parallel_tool_calls": true,
        "previous_response_id": meta.previous_response_id,
        "temperature": null,
        "tool_choice": "auto",
        "tools": meta.client_tools.iter().map(|name| json!({"type": "function", "name": name, "parameters": null, "strict": false})).collect::<Vec<_>>(),
        "top_p": null,
        "store": true,
        "usage": null,
    })
}

/// What was sent of one item.
#[derive(Debug, Clone)]
struct Sent {
    sent: String,
    added: bool,
    done: bool,
}

/// The streaming events of one response.
#[derive(Debug)]
pub(crate) struct ResponsesStream {
    meta: Meta,
    /// The number the next event (or a delta's first character) takes.
    next: u64,
    /// Events numbered up to this were seen by the client already.
    seen_through: Option<u64>,
    opened: bool,
    sent: Vec<Sent>,
    finished: bool,
}

impl ResponsesStream {
    /// A stream from the start, or after `starting_after`.
    pub(crate) fn new(meta: Meta, starting_after: Option<u64>) -> Self {
        Self {
            meta,
            next: 0,
            seen_through: starting_after,
            opened: false,
            sent: Vec::new(),
            finished: false,
        }
    }

    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Numbers an event taking `units` numbers; drops or cuts what the client has seen.
    /// `delta` names the field a delta's text is in.
    fn push(&mut self, out: &mut Vec<Value>, mut event: Value, units: u64, delta: Option<&str>) {
        let units = units.max(1);
        let first = self.next;
        self.next += units;
        let number = self.next - 1;
        if let Some(seen) = self.seen_through {
            if number <= seen {
                return;
            }
            if let Some(field) = delta
                && first <= seen
            {
                let skip = usize::try_from(seen - first + 1).unwrap_or(usize::MAX);
                let text: String = event[field]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .skip(skip)
                    .collect();
                event[field] = json!(text);
            }
        }
        event["sequence_number"] = json!(number);
        out.push(event);
    }

    /// The events that bring the client from what it has to `reply`.
    pub(crate) fn update(&mut self, reply: &Reply) -> Vec<Value> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        if !self.opened {
            self.opened = true;
            let mut created = response_object(&self.meta, &Reply::default());
            created["status"] = json!("in_progress");
            self.push(
                &mut out,
                json!({"type": "response.created", "response": created}),
                1,
                None,
            );
            self.push(
                &mut out,
                json!({"type": "response.in_progress", "response": created}),
                1,
                None,
            );
        }
        let items = items(reply, &self.meta.client_tools);
        for (index, item) in items.iter().enumerate() {
            if index == self.sent.len() {
                self.sent.push(Sent {
                    sent: String::new(),
                    added: false,
                    done: false,
                });
            }
            self.sync(index, item, &mut out);
            if !self.sent[index].done {
                // Items are sent one after another: later ones wait for this one.
                break;
            }
        }
        let all_done = self.sent.len() == items.len() && self.sent.iter().all(|s| s.done);
        if let Some(end) = &reply.end
            && all_done
        {
            self.finished = true;
            let response = response_object(&self.meta, reply);
            let kind = match end {
                End::Done | End::ToolCalls => "response.completed",
                End::Interrupted => "response.incomplete",
                End::Failed(_) => "response.failed",
            };
            self.push(
                &mut out,
                json!({"type": kind, "response": response}),
                1,
                None,
            );
        }
        out
    }

    fn sync(&mut self, index: usize, item: &Item, out: &mut Vec<Value>) {
        let meta = self.meta.clone();
        let id = item_id(&meta, &item.kind, index);
        let output_index = index;
        let state = self.sent[index].clone();
        if state.done {
            return;
        }
        let mut sent = state.sent.clone();
        let mut added = state.added;
        match item.kind {
            Kind::Message => {
                if !added {
                    added = true;
                    self.push(
                        out,
                        json!({"type": "response.output_item.added", "output_index": output_index,
                                          "item": item_json(&meta, index, item, false, false)}),
                        1,
                        None,
                    );
                    self.push(out, json!({"type": "response.content_part.added", "item_id": id,
                                          "output_index": output_index, "content_index": 0,
                                          "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}), 1, None);
                }
                if item.text.len() > sent.len() && item.text.starts_with(sent.as_str()) {
                    let delta = item.text[sent.len()..].to_owned();
                    let units = delta.chars().count() as u64;
                    self.push(
                        out,
                        json!({"type": "response.output_text.delta", "item_id": id,
                                          "output_index": output_index, "content_index": 0,
                                          "delta": delta, "logprobs": []}),
                        units,
                        Some("delta"),
                    );
                    sent.push_str(&delta);
                }
                if item.closed {
                    self.push(
                        out,
                        json!({"type": "response.output_text.done", "item_id": id,
                                          "output_index": output_index, "content_index": 0,
                                          "text": item.text, "logprobs": []}),
                        1,
                        None,
                    );
                    self.push(out, json!({"type": "response.content_part.done", "item_id": id,
                                          "output_index": output_index, "content_index": 0,
                                          "part": {"type": "output_text", "text": item.text, "annotations": [], "logprobs": []}}), 1, None);
                    self.push(
                        out,
                        json!({"type": "response.output_item.done", "output_index": output_index,
                                          "item": item_json(&meta, index, item, true, false)}),
                        1,
                        None,
                    );
                }
            }
            Kind::Function => {
                if !added {
                    added = true;
                    self.push(
                        out,
                        json!({"type": "response.output_item.added", "output_index": output_index,
                                          "item": item_json(&meta, index, item, false, false)}),
                        1,
                        None,
                    );
                }
                if item.text.len() > sent.len() && item.text.starts_with(sent.as_str()) {
                    let delta = item.text[sent.len()..].to_owned();
                    let units = delta.chars().count() as u64;
                    self.push(
                        out,
                        json!({"type": "response.function_call_arguments.delta", "item_id": id,
                                          "output_index": output_index, "delta": delta}),
                        units,
                        Some("delta"),
                    );
                    sent.push_str(&delta);
                }
                if item.closed {
                    self.push(out, json!({"type": "response.function_call_arguments.done", "item_id": id,
                                          "output_index": output_index, "name": item.name, "arguments": item.text}), 1, None);
                    self.push(
                        out,
                        json!({"type": "response.output_item.done", "output_index": output_index,
                                          "item": item_json(&meta, index, item, true, false)}),
                        1,
                        None,
                    );
                }
            }
            Kind::Mcp => {
                if item.closed {
                    added = true;
                    self.push(
                        out,
                        json!({"type": "response.output_item.added", "output_index": output_index,
                                          "item": item_json(&meta, index, item, false, false)}),
                        1,
                        None,
                    );
                    self.push(
                        out,
                        json!({"type": "response.output_item.done", "output_index": output_index,
                                          "item": item_json(&meta, index, item, true, false)}),
                        1,
                        None,
                    );
                }
            }
        }
        self.sent[index] = Sent {
            sent,
            added,
            done: item.closed,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            id: "resp_x".into(),
            model: "demo".into(),
            created_at: 1,
            previous_response_id: None,
            background: false,
            client_tools: vec!["ask".into()],
        }
    }

    fn text(t: &str) -> Value {
        json!({"role": "assistant", "part": {"type": "text", "text": t}})
    }

    fn finished_reply(parts: &[&str]) -> Reply {
        let mut reply = Reply::default();
        for p in parts {
            reply.apply("part", &text(p));
        }
        reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [{"type": "text", "text": parts.concat()}]}),
        );
        reply.apply("status", &json!({"status": "waiting"}));
        reply
    }

    fn numbers(events: &[Value]) -> Vec<u64> {
        events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn a_text_reply_streams_the_reference_event_sequence() {
        let mut stream = ResponsesStream::new(meta(), None);
        let events = stream.update(&finished_reply(&["Hello"]));
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        // A delta takes one number per character and carries its last one.
        assert_eq!(numbers(&events), [0, 1, 2, 3, 8, 9, 10, 11, 12]);
        assert_eq!(events[8]["response"]["output_text"], "Hello");
        assert_eq!(events[8]["response"]["status"], "completed");
        assert!(stream.finished());
    }

    #[test]
    fn numbers_depend_on_content_not_on_how_it_was_streamed() {
        // Live, in two deltas; the client drops after the first.
        let mut live = ResponsesStream::new(meta(), None);
        let mut reply = Reply::default();
        reply.apply("part", &text("Hel"));
        let seen = live.update(&reply);
        assert_eq!(seen[4]["delta"], "Hel");
        assert_eq!(seen[4]["sequence_number"], 6);
        reply.apply("part", &text("lo world"));
        let missed = live.update(&reply);
        // Resumed from 6 after the step was stored (the live parts are gone).
        let mut resumed = ResponsesStream::new(meta(), Some(6));
        let events = resumed.update(&finished_reply(&["Hello world"]));
        assert_eq!(
            events[0]["delta"], "lo world",
            "the rest, cut where the client was"
        );
        assert_eq!(events[0]["sequence_number"], missed[0]["sequence_number"]);
        let numbers = numbers(&events);
        assert!(numbers.windows(2).all(|w| w[0] < w[1]));
        assert!(numbers[0] > 6);
    }

    #[test]
    fn resuming_after_the_last_event_sends_nothing_more() {
        let reply = finished_reply(&["Hi"]);
        let all = ResponsesStream::new(meta(), None).update(&reply);
        let last = all.last().unwrap()["sequence_number"].as_u64().unwrap();
        let mut resumed = ResponsesStream::new(meta(), Some(last));
        assert!(resumed.update(&reply).is_empty());
        assert!(resumed.finished());
    }

    #[test]
    fn client_tool_calls_are_function_calls_and_own_tools_mcp_calls() {
        let mut reply = Reply::default();
        reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [
                {"type": "tool_call", "tool_call_id": "t1", "tool_name": "list_dir", "args": "{}"}]}),
        );
        reply.apply(
            "message",
            &json!({"role": "tool", "parts": [
                {"type": "tool_result", "tool_call_id": "t1", "tool_name": "list_dir", "result": "a.txt"}]}),
        );
        reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [
                {"type": "tool_call", "tool_call_id": "c1", "tool_name": "ask", "args": "{\"q\":1}"}]}),
        );
        reply.apply("status", &json!({"status": "requires_action"}));
        let object = response_object(&meta(), &reply);
        assert_eq!(object["status"], "completed");
        assert_eq!(object["output"][0]["type"], "mcp_call");
        assert_eq!(object["output"][0]["output"], "a.txt");
        assert_eq!(object["output"][1]["type"], "function_call");
        assert_eq!(object["output"][1]["call_id"], "c1");
        assert_eq!(object["output"][1]["arguments"], "{\"q\":1}");
        let events = ResponsesStream::new(meta(), None).update(&reply);
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "response.function_call_arguments.done")
        );
        assert_eq!(events.last().unwrap()["type"], "response.completed");
    }

    #[test]
    fn cancelled_and_failed_replies_end_as_the_reference_says() {
        let mut reply = Reply::default();
        reply.apply(
            "message",
            &json!({"role": "assistant", "interrupted": true, "parts": [{"type": "text", "text": "pa"}]}),
        );
        reply.apply("status", &json!({"status": "waiting"}));
        let events = ResponsesStream::new(meta(), None).update(&reply);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.incomplete");
        assert_eq!(last["response"]["status"], "cancelled");

        let mut reply = Reply::default();
        reply.apply(
            "status",
            &json!({"status": "error", "last_error": {"kind": "auth", "message": "bad key"}}),
        );
        let events = ResponsesStream::new(meta(), None).update(&reply);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.failed");
        assert_eq!(last["response"]["error"]["message"], "bad key");
    }
}
