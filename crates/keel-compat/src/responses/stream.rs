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

use crate::project::{Op, Projection, TextKind};
use crate::reply::{Block, Call, End, Reply};

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
mod tests;
