//! A reply as an OpenAI Responses object and as its streaming events, numbered so that a
//! client resuming with `starting_after` — on the server, or by dropping events itself as
//! the SDKs' `responses.stream(response_id=…, starting_after=…)` helpers do — gets exactly
//! what it has not seen.
//!
//! **Sequence numbers.** Keel keeps the reply, not the deltas it was streamed in (a step's
//! live parts are replaced by the stored message). So the events are made from the content
//! alone: the events follow the reply's [`Projection`], and a text or arguments delta is
//! always one *chunk* of its item's text — a word with the whitespace before it, or
//! [`CHUNK_CHARS`] characters of a longer one — whatever deltas the provider sent. The
//! chunk still growing is held until the next one starts or its item ends. Every event
//! takes the next number. A live stream and any replay of the same reply (after a drop, a
//! commit or a daemon restart) are then the same events with the same numbers, and any
//! number a client saw ends an event of the replay. The exception is a whole restart that
//! said something else (`stream_reset`): the voided item and its numbers exist only in
//! the streams that saw it before the step was stored.
//!
//! | projection | Responses |
//! | --- | --- |
//! | start | `response.created`, `response.in_progress` |
//! | text part | a `message` item: `output_item.added`, `content_part.added`, `output_text.delta`…, `output_text.done`, `content_part.done`, `output_item.done` (status `incomplete` when a restart voided it; the new text comes in a new item) |
//! | call of a client-side tool (`tools` of the request), arguments complete | a `function_call` item (`call_id` = Keel's tool call id): `output_item.added`, `function_call_arguments.delta`…, `.done`, `output_item.done` |
//! | call of one of Keel's own tools | an `mcp_call` item (`server_label: "keel"`) added with its arguments, done with its `output` (or `error`) |
//! | web search the provider ran | a `web_search_call` item: `output_item.added` (`in_progress`), `web_search_call.in_progress`, and once its result is in `web_search_call.completed` and `output_item.done` with its `action` |
//! | reasoning | not sent (Keel keeps it; the Responses summary format does not fit it) |
//! | end `Done` / `ToolCalls` | `response.completed` |
//! | end `Interrupted` (cancel, or a change of branch under the reply) | `response.incomplete`, status `cancelled` |
//! | end `Failed` | `response.failed` with the message |
//!
//! The final event carries the Response object of the stored reply, which is what the SDKs
//! return as the final response.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::api::compat::project::{Op, Projection, TextKind};
use crate::api::compat::reply::{Block, Call, End, Reply};

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
    WebSearch,
}

/// Whether a call is a web search the provider ran, shown as the Responses API shows its
/// own (<https://platform.openai.com/docs/api-reference/responses/object>, `output`, "Web
/// search tool call").
fn is_web_search(call: &Call) -> bool {
    call.provider_executed && call.name == "web_search"
}

/// A web search's `action` from its arguments: the Responses API's own action as it is, or
/// a search for the query another provider's call carried.
fn search_action(args: &str) -> Value {
    let mut action = match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    action
        .entry("type")
        .or_insert_with(|| Value::String("search".to_owned()));
    Value::Object(action)
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
                // A call is shown once its arguments are complete, as in the stream.
                Block::Call(c) => c.complete || step.committed,
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
                        kind: if client {
                            Kind::Function
                        } else if is_web_search(call) {
                            Kind::WebSearch
                        } else {
                            Kind::Mcp
                        },
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
        Kind::WebSearch => "ws",
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
        Kind::WebSearch => {
            let status = match &item.result {
                Some((_, false)) if done => "completed",
                _ if done => "failed",
                _ => "in_progress",
            };
            let mut json = json!({"id": id, "type": "web_search_call", "status": status});
            if done {
                json["action"] = search_action(&item.text);
            }
            json
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

/// The longest chunk a delta carries (see the module documentation).
pub(crate) const CHUNK_CHARS: usize = 32;

/// Takes the complete chunks off the front of `pending`, and the rest too when `flush`.
/// A chunk ends before a whitespace character that follows another character, or after
/// [`CHUNK_CHARS`] characters.
fn take_chunks(pending: &mut String, flush: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut count = 0;
    let mut previous_space = false;
    for (i, c) in pending.char_indices() {
        let space = c.is_whitespace();
        if count > 0 && ((space && !previous_space) || count == CHUNK_CHARS) {
            out.push(pending[start..i].to_owned());
            start = i;
            count = 0;
        }
        count += 1;
        previous_space = space;
    }
    if flush && start < pending.len() {
        out.push(pending[start..].to_owned());
        start = pending.len();
    }
    pending.drain(..start);
    out
}

/// An output item the stream opened.
#[derive(Debug)]
struct OpenItem {
    output_index: usize,
    id: String,
    /// Text not yet sent as a chunk.
    pending: String,
    /// An `mcp_call` not yet done: its name and arguments.
    mcp: Option<(String, String)>,
    /// A `web_search_call` not yet done: its arguments.
    search: Option<String>,
}

/// The streaming events of one response.
#[derive(Debug)]
pub(crate) struct ResponsesStream {
    meta: Meta,
    projection: Projection,
    /// The number the next event takes.
    next: u64,
    /// Events numbered up to this were seen by the client already.
    seen_through: Option<u64>,
    /// The output item of each part of the projection that has one.
    items: HashMap<usize, OpenItem>,
    outputs: usize,
    finished: bool,
}

impl ResponsesStream {
    /// A stream from the start, or after `starting_after`.
    pub(crate) fn new(meta: Meta, starting_after: Option<u64>) -> Self {
        Self {
            meta,
            projection: Projection::default(),
            next: 0,
            seen_through: starting_after,
            items: HashMap::new(),
            outputs: 0,
            finished: false,
        }
    }

    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Numbers an event; drops it when the client has seen it.
    fn push(&mut self, out: &mut Vec<Value>, mut event: Value) {
        let number = self.next;
        self.next += 1;
        if self.seen_through.is_some_and(|seen| number <= seen) {
            return;
        }
        event["sequence_number"] = json!(number);
        out.push(event);
    }

    /// The events that bring the client from what it has to `reply`.
    pub(crate) fn update(&mut self, reply: &Reply) -> Vec<Value> {
        let mut out = Vec::new();
        for op in self.projection.update(reply) {
            self.op(op, reply, &mut out);
        }
        out
    }

    fn open_item(&mut self, part: usize, kind: &Kind) -> (usize, String) {
        let output_index = self.outputs;
        self.outputs += 1;
        let id = item_id(&self.meta, kind, output_index);
        self.items.insert(
            part,
            OpenItem {
                output_index,
                id: id.clone(),
                pending: String::new(),
                mcp: None,
                search: None,
            },
        );
        (output_index, id)
    }

    fn op(&mut self, op: Op, reply: &Reply, out: &mut Vec<Value>) {
        match op {
            Op::Start => {
                let mut created = response_object(&self.meta, &Reply::default());
                created["status"] = json!("in_progress");
                self.push(
                    out,
                    json!({"type": "response.created", "response": created}),
                );
                self.push(
                    out,
                    json!({"type": "response.in_progress", "response": created}),
                );
            }
            Op::Open {
                part,
                kind: TextKind::Text,
            } => {
                let (output_index, id) = self.open_item(part, &Kind::Message);
                self.push(out, json!({"type": "response.output_item.added", "output_index": output_index,
                    "item": {"id": id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}}));
                self.push(out, json!({"type": "response.content_part.added", "item_id": id,
                    "output_index": output_index, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}));
            }
            Op::Delta {
                part,
                kind: TextKind::Text,
                text,
            } => self.text_chunks(part, &text, false, out),
            Op::Close {
                part,
                kind: TextKind::Text,
                text,
                voided,
            } => {
                self.text_chunks(part, "", true, out);
                let Some(item) = self.items.remove(&part) else {
                    return;
                };
                let (index, id) = (item.output_index, item.id);
                let status = if voided { "incomplete" } else { "completed" };
                let content =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                self.push(
                    out,
                    json!({"type": "response.output_text.done", "item_id": id,
                    "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
                );
                self.push(
                    out,
                    json!({"type": "response.content_part.done", "item_id": id,
                    "output_index": index, "content_index": 0, "part": content}),
                );
                self.push(out, json!({"type": "response.output_item.done", "output_index": index,
                    "item": {"id": id, "type": "message", "role": "assistant", "status": status, "content": [content]}}));
            }
            Op::Call { part, call, .. } if self.meta.client_tools.contains(&call.name) => {
                let (index, id) = self.open_item(part, &Kind::Function);
                self.items.remove(&part);
                let item = |arguments: &str, status: &str| {
                    json!({"id": id, "type": "function_call", "call_id": call.id, "name": call.name,
                           "arguments": arguments, "status": status})
                };
                self.push(
                    out,
                    json!({"type": "response.output_item.added", "output_index": index,
                    "item": item("", "in_progress")}),
                );
                let mut pending = call.args.clone();
                for chunk in take_chunks(&mut pending, true) {
                    self.push(
                        out,
                        json!({"type": "response.function_call_arguments.delta",
                        "item_id": id, "output_index": index, "delta": chunk}),
                    );
                }
                self.push(
                    out,
                    json!({"type": "response.function_call_arguments.done", "item_id": id,
                    "output_index": index, "name": call.name, "arguments": call.args}),
                );
                self.push(
                    out,
                    json!({"type": "response.output_item.done", "output_index": index,
                    "item": item(&call.args, "completed")}),
                );
            }
            Op::Call { part, call, .. } if is_web_search(&call) => {
                let (index, id) = self.open_item(part, &Kind::WebSearch);
                if let Some(item) = self.items.get_mut(&part) {
                    item.search = Some(call.args.clone());
                }
                self.push(
                    out,
                    json!({"type": "response.output_item.added", "output_index": index,
                    "item": {"id": id, "type": "web_search_call", "status": "in_progress"}}),
                );
                self.push(
                    out,
                    json!({"type": "response.web_search_call.in_progress",
                    "item_id": id, "output_index": index}),
                );
            }
            Op::Call { part, call, .. } => {
                let (index, id) = self.open_item(part, &Kind::Mcp);
                if let Some(item) = self.items.get_mut(&part) {
                    item.mcp = Some((call.name.clone(), call.args.clone()));
                }
                self.push(out, json!({"type": "response.output_item.added", "output_index": index,
                    "item": {"id": id, "type": "mcp_call", "server_label": "keel", "name": call.name,
                             "arguments": call.args, "output": null, "error": null, "status": "in_progress"}}));
            }
            Op::Output { part, outcome, .. } => {
                let result = if outcome.is_error {
                    Err(text_of(&outcome.value))
                } else {
                    Ok(text_of(&outcome.value))
                };
                self.mcp_done(part, result, out);
            }
            Op::End(end) => {
                let mut open: Vec<usize> = self.items.keys().copied().collect();
                open.sort_unstable();
                for part in open {
                    self.mcp_done(part, Err("the call was interrupted".to_owned()), out);
                }
                self.finished = true;
                let kind = match end {
                    End::Done | End::ToolCalls => "response.completed",
                    End::Interrupted => "response.incomplete",
                    End::Failed(_) => "response.failed",
                };
                let response = response_object(&self.meta, reply);
                self.push(out, json!({"type": kind, "response": response}));
            }
            // Reasoning is not sent; steps have no events of their own.
            Op::Open { .. }
            | Op::Delta { .. }
            | Op::Close { .. }
            | Op::StartStep
            | Op::FinishStep => {}
        }
    }

    fn text_chunks(&mut self, part: usize, text: &str, flush: bool, out: &mut Vec<Value>) {
        let Some(item) = self.items.get_mut(&part) else {
            return;
        };
        item.pending.push_str(text);
        let chunks = take_chunks(&mut item.pending, flush);
        let (index, id) = (item.output_index, item.id.clone());
        for chunk in chunks {
            self.push(
                out,
                json!({"type": "response.output_text.delta", "item_id": id,
                "output_index": index, "content_index": 0, "delta": chunk, "logprobs": []}),
            );
        }
    }

    fn mcp_done(&mut self, part: usize, result: Result<String, String>, out: &mut Vec<Value>) {
        let Some(item) = self.items.remove(&part) else {
            return;
        };
        if let Some(args) = item.search {
            let status = if result.is_ok() {
                "completed"
            } else {
                "failed"
            };
            let (index, id) = (item.output_index, item.id);
            if result.is_ok() {
                self.push(
                    out,
                    json!({"type": "response.web_search_call.completed",
                    "item_id": id, "output_index": index}),
                );
            }
            self.push(
                out,
                json!({"type": "response.output_item.done", "output_index": index,
                "item": {"id": id, "type": "web_search_call", "status": status,
                         "action": search_action(&args)}}),
            );
            return;
        }
        let Some((name, arguments)) = item.mcp else {
            return;
        };
        let (output, error, status) = match result {
            Ok(output) => (Some(output), None, "completed"),
            Err(error) => (None, Some(error), "failed"),
        };
        self.push(
            out,
            json!({"type": "response.output_item.done", "output_index": item.output_index,
            "item": {"id": item.id, "type": "mcp_call", "server_label": "keel", "name": name,
                     "arguments": arguments, "output": output, "error": error, "status": status}}),
        );
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

    fn types(events: &[Value]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    fn deltas(events: &[Value]) -> String {
        events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .filter_map(|e| e["delta"].as_str())
            .collect()
    }

    /// Every event of a reply streamed live, one update per event.
    fn live(events: &[(&str, Value)], client_tools: Vec<String>) -> Vec<Value> {
        let mut reply = Reply::ending_at_answers_to(client_tools.clone());
        let mut stream = ResponsesStream::new(
            Meta {
                client_tools,
                ..meta()
            },
            None,
        );
        let mut out = stream.update(&reply);
        for (event, data) in events {
            reply.apply(event, data);
            out.extend(stream.update(&reply));
        }
        out
    }

    #[test]
    fn a_text_reply_streams_the_reference_event_sequence() {
        let mut stream = ResponsesStream::new(meta(), None);
        let events = stream.update(&finished_reply(&["Hello"]));
        assert_eq!(
            types(&events),
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
        assert_eq!(numbers(&events), (0..9).collect::<Vec<u64>>());
        assert_eq!(events[8]["response"]["output_text"], "Hello");
        assert_eq!(events[8]["response"]["status"], "completed");
        assert!(stream.finished());
    }

    #[test]
    fn deltas_are_chunks_of_the_content_whatever_the_provider_sent() {
        let mut pending = "Hello wonderful  world, ".to_owned() + &"x".repeat(40);
        let chunks = take_chunks(&mut pending, false);
        assert_eq!(
            chunks,
            [
                "Hello",
                " wonderful",
                "  world,",
                " xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            ]
        );
        assert_eq!(pending, "x".repeat(9), "the chunk still growing is held");
        assert_eq!(take_chunks(&mut pending, true), ["x".repeat(9)]);
        assert!(pending.is_empty());
    }

    #[test]
    fn a_replay_is_the_live_stream_event_for_event() {
        let full = "Hello world, how are you today?";
        let live = live(
            &[
                ("part", text("Hel")),
                ("part", text("lo wor")),
                ("part", text("ld, how are")),
                ("part", text(" you today?")),
                (
                    "message",
                    json!({"role": "assistant", "parts": [{"type": "text", "text": full}]}),
                ),
                ("status", json!({"status": "waiting"})),
            ],
            meta().client_tools,
        );
        let replay = ResponsesStream::new(meta(), None).update(&finished_reply(&[full]));
        assert_eq!(live, replay);
        assert_eq!(deltas(&live), full);
        // Whatever event a client stopped after, dropping the numbers it saw from a replay
        // (the SDK helpers' client-side `starting_after`) or asking the server for what
        // follows gives each character exactly once.
        for (seen, event) in live.iter().enumerate() {
            let last = event["sequence_number"].as_u64().unwrap();
            let rest: Vec<Value> = replay
                .iter()
                .filter(|e| e["sequence_number"].as_u64().unwrap() > last)
                .cloned()
                .collect();
            assert_eq!(deltas(&live[..=seen]) + &deltas(&rest), full);
            let served = ResponsesStream::new(meta(), Some(last)).update(&finished_reply(&[full]));
            assert_eq!(served, rest);
        }
    }

    #[test]
    fn a_function_call_cut_mid_arguments_still_ends_the_stream() {
        let events = live(
            &[
                ("part", text("Looking it up: ")),
                (
                    "part",
                    json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c1",
                           "tool_name": "ask", "args_delta": "{\"q\": \"wea"}}),
                ),
                (
                    "tool_call_cancel",
                    json!({"tool_call_id": "c1", "tool_name": "ask", "reason": "cut"}),
                ),
                ("part", text("done.")),
                (
                    "message",
                    json!({"role": "assistant", "parts": [{"type": "text", "text": "Looking it up: done."}]}),
                ),
                ("status", json!({"status": "waiting"})),
            ],
            vec!["ask".into()],
        );
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["output_text"], "Looking it up: done.");
        assert_eq!(deltas(&events), "Looking it up: done.");
        assert!(!types(&events).iter().any(|t| t.contains("function_call")));
    }

    #[test]
    fn a_cancelled_call_leaves_later_calls_their_items_and_call_ids() {
        let call = |id: &str, delta: &str, complete: bool| {
            json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": id,
                   "tool_name": "ask", "args_delta": delta, "complete": complete}})
        };
        let events = live(
            &[
                ("part", call("c1", "{\"a", false)),
                (
                    "tool_call_cancel",
                    json!({"tool_call_id": "c1", "tool_name": "ask", "reason": "cut"}),
                ),
                ("part", call("c2", "{}", true)),
                (
                    "message",
                    json!({"role": "assistant", "parts": [{"type": "tool_call", "tool_call_id": "c2",
                           "tool_name": "ask", "args": "{}"}]}),
                ),
                ("status", json!({"status": "requires_action"})),
            ],
            vec!["ask".into()],
        );
        let added: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.added")
            .collect();
        assert_eq!(added.len(), 1);
        assert_eq!(added[0]["item"]["call_id"], "c2");
        assert_eq!(added[0]["output_index"], 0);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["output"][0]["call_id"], "c2");
    }

    #[test]
    fn a_restart_with_other_text_ends_the_item_and_a_new_item_carries_the_new_text() {
        let events = live(
            &[
                ("part", text("abc def")),
                ("stream_reset", json!({})),
                ("part", text("xyz")),
                (
                    "message",
                    json!({"role": "assistant", "parts": [{"type": "text", "text": "xyz"}]}),
                ),
                ("status", json!({"status": "waiting"})),
            ],
            Vec::new(),
        );
        let done: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .collect();
        assert_eq!(done[0]["item"]["status"], "incomplete");
        assert_eq!(done[0]["item"]["content"][0]["text"], "abc def");
        assert_eq!(done[1]["output_index"], 1);
        assert_eq!(done[1]["item"]["content"][0]["text"], "xyz");
        let last = events.last().unwrap();
        assert_eq!(last["response"]["output_text"], "xyz");
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
    fn a_provider_run_web_search_is_a_web_search_call_item() {
        let events = live(
            &[
                (
                    "part",
                    json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "s",
                           "tool_name": "web_search", "args_delta": "", "args": "{\"query\":\"q\"}",
                           "complete": true, "provider_executed": true}}),
                ),
                (
                    "part",
                    json!({"role": "assistant", "part": {"type": "tool_result", "tool_call_id": "s",
                           "tool_name": "web_search", "result": [], "provider_executed": true}}),
                ),
                ("part", text("Found.")),
                ("status", json!({"status": "waiting"})),
            ],
            Vec::new(),
        );
        let kinds = types(&events);
        let added = kinds
            .iter()
            .position(|k| *k == "response.web_search_call.in_progress")
            .unwrap();
        assert_eq!(kinds[added - 1], "response.output_item.added");
        assert_eq!(kinds[added + 1], "response.web_search_call.completed");
        let done = &events[added + 2];
        assert_eq!(
            done["item"],
            json!({"id": "ws_x_0", "type": "web_search_call", "status": "completed",
                   "action": {"type": "search", "query": "q"}})
        );
        let output = &events.last().unwrap()["response"]["output"];
        assert_eq!(output[0]["type"], "web_search_call");
        assert_eq!(output[0]["status"], "completed");
        assert_eq!(output[1]["type"], "message");
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
