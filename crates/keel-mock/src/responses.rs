//! OpenAI Responses: `POST /v1/responses`.
//!
//! Streams typed events (`response.created`, `response.output_item.added`,
//! `response.output_text.delta`, ..., `response.completed`), each with a
//! `sequence_number`. Responses are remembered (unless `store` is false) so a later request
//! can continue from one with `previous_response_id`; an unknown id gets OpenAI's 400.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State as Extract;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::conversation::{Conversation, Item, content_text};
use crate::driver::{self, Encoder, Piece};
use crate::errors::{self, Flavor};
use crate::plan::{Plan, Reply, StreamFault, plan};
use crate::rules;
use crate::script::Finish;
use crate::sse;
use crate::state::State;
use crate::unix_now;

pub(crate) async fn handle(Extract(state): Extract<Arc<State>>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return errors::invalid(Flavor::OpenAi, &format!("invalid JSON: {error}")),
    };
    state.record_request("/v1/responses", &request);
    if state.config.strict
        && let Err(violation) = rules::check(rules::openai_responses::RULES, &request)
            .and_then(|()| rules::check(rules::web_search::RESPONSES, &request))
            .and_then(|()| rules::chain::check(&request, |id| state.stored_response(id).is_some()))
    {
        return violation.response(Flavor::OpenAi);
    }
    let previous = request["previous_response_id"].as_str();
    let prior = previous
        .and_then(|id| state.stored_response(id))
        .unwrap_or_default();
    let conversation = conversation(&request, prior);
    let model = request["model"].as_str().unwrap_or("mock");
    let reply = match plan(&conversation, model, &state) {
        Plan::Reply(reply) => *reply,
        Plan::Fail(error) => return errors::scripted(Flavor::OpenAi, &error),
        Plan::Invalid(message) => return errors::invalid(Flavor::OpenAi, &message),
    };
    let store = request["store"].as_bool().unwrap_or(true);
    if store && !reply.may_break() {
        let mut items = conversation.items;
        items.push(Item::Assistant(reply.text()));
        state.store_response(response_id(&reply), items);
    }
    let context = Context {
        previous: previous.map(str::to_owned),
        store,
        encrypted: rules::chain::returns_encrypted_reasoning(&request),
        created: unix_now(),
    };
    if request["stream"].as_bool().unwrap_or(false) {
        let encoder = Events {
            context,
            sequence: 0,
            next_output: 0,
            reasoning_index: 0,
            text_index: 0,
            call_indexes: HashMap::new(),
        };
        driver::stream(reply, encoder, &state, "openai-responses")
    } else {
        let body = response_object(
            &reply,
            &context,
            "completed",
            output(&reply, &context),
            true,
        );
        driver::whole(&reply, body, Flavor::OpenAi, &state, "openai-responses").await
    }
}

fn conversation(request: &Value, prior: Vec<Item>) -> Conversation {
    let mut conversation = Conversation {
        items: prior,
        ..Conversation::default()
    };
    let mut names: HashMap<String, String> = HashMap::new();
    if let Some(instructions) = request["instructions"].as_str() {
        conversation.context(instructions.len());
    }
    match &request["input"] {
        Value::String(text) => conversation.user(text.clone()),
        Value::Array(items) => {
            for item in items {
                input_item(&mut conversation, &mut names, item);
            }
        }
        _ => {}
    }
    for tool in request["tools"].as_array().into_iter().flatten() {
        if let Some(name) = tool["name"].as_str() {
            conversation.tools.push(name.to_owned());
        }
        conversation.context(tool.to_string().len());
    }
    conversation
}

fn input_item(conversation: &mut Conversation, names: &mut HashMap<String, String>, item: &Value) {
    match item["type"].as_str().unwrap_or("message") {
        "function_call" => {
            if let (Some(id), Some(name)) = (item["call_id"].as_str(), item["name"].as_str()) {
                names.insert(id.to_owned(), name.to_owned());
            }
            conversation.assistant(item["arguments"].as_str().map_or(0, str::len), "");
        }
        "function_call_output" => {
            let name = item["call_id"]
                .as_str()
                .and_then(|id| names.get(id).cloned());
            let output = match &item["output"] {
                Value::String(text) => text.clone(),
                other => content_text(other),
            };
            conversation.tool_result(name, output);
        }
        "reasoning" | "web_search_call" => conversation.assistant(0, ""),
        "message" => {
            let text = content_text(&item["content"]);
            match item["role"].as_str().unwrap_or_default() {
                "user" => conversation.user(text),
                "assistant" => conversation.assistant(text.len(), &text),
                _ => conversation.context(text.len()),
            }
        }
        _ => {}
    }
}

fn response_id(reply: &Reply) -> String {
    format!("resp_mock{}", reply.seq)
}

fn reasoning_id(reply: &Reply) -> String {
    format!("rs_mock{}", reply.seq)
}

fn message_id(reply: &Reply) -> String {
    format!("msg_mock{}", reply.seq)
}

fn call_item_id(reply: &Reply, index: usize) -> String {
    format!("fc_mock{}x{index}", reply.seq)
}

struct Context {
    previous: Option<String>,
    store: bool,
    /// Reasoning carries `encrypted_content` only when the request included it.
    encrypted: bool,
    created: u64,
}

fn usage(reply: &Reply) -> Value {
    let u = reply.usage;
    // Responses' input_tokens include the cached ones.
    let input = u.input + u.cache_read + u.cache_write;
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": u.cache_read},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": input + u.output,
    })
}

fn response_object(
    reply: &Reply,
    context: &Context,
    status: &str,
    output: Vec<Value>,
    with_usage: bool,
) -> Value {
    let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
    json!({
        "id": response_id(reply),
        "object": "response",
        "created_at": context.created,
        "status": status,
        "error": Value::Null,
        "incomplete_details": incomplete,
        "instructions": Value::Null,
        "model": reply.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": context.previous,
        "store": context.store,
        "temperature": 1.0,
        "top_p": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}},
        "metadata": {},
        "usage": if with_usage { usage(reply) } else { Value::Null },
    })
}

fn reasoning_item(reply: &Reply, context: &Context) -> Value {
    let mut item = json!({
        "id": reasoning_id(reply),
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": reply.reasoning()}],
    });
    if context.encrypted {
        item["encrypted_content"] = json!(reply.signature());
    }
    item
}

fn text_part(text: &str, annotations: Vec<Value>) -> Value {
    json!({"type": "output_text", "text": text, "annotations": annotations})
}

/// The text of a reply that searched first cites the first page found, as a whole
/// (<https://platform.openai.com/docs/guides/tools-web-search>, "Output and citations").
fn citations(reply: &Reply) -> Vec<Value> {
    let end = reply.text().chars().count();
    reply.calls[..reply.leading_calls]
        .iter()
        .filter_map(|call| call.results.first())
        .map(|page| {
            json!({"type": "url_citation", "start_index": 0, "end_index": end,
                   "url": page.url, "title": page.title})
        })
        .collect()
}

fn refusal_part(text: &str) -> Value {
    json!({"type": "refusal", "refusal": text})
}

/// The content of the reply's message item: its text, then its refusal, each a part.
fn message_content(reply: &Reply) -> Vec<Value> {
    let mut content = Vec::new();
    if !reply.text.is_empty() {
        content.push(text_part(&reply.text(), citations(reply)));
    }
    if !reply.refusal.is_empty() {
        content.push(refusal_part(&reply.refusal()));
    }
    content
}

fn message_item(reply: &Reply, status: &str, content: Vec<Value>) -> Value {
    json!({
        "id": message_id(reply),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

fn call_item(reply: &Reply, index: usize, status: &str, arguments: &str) -> Value {
    if is_server(reply, index) {
        return server_item(reply, index, status, arguments);
    }
    json!({
        "id": call_item_id(reply, index),
        "type": "function_call",
        "status": status,
        "call_id": reply.call_id(index, "call_"),
        "name": reply.calls.get(index).map(|c| c.name.as_str()),
        "arguments": arguments,
    })
}

fn is_server(reply: &Reply, index: usize) -> bool {
    reply.calls.get(index).is_some_and(|c| c.server)
}

/// A tool the provider runs itself is an output item of its own type, never a
/// `function_call`: a web search is a `web_search_call` whose `action` says what it searched
/// once done, and that nothing in the next request may answer
/// (<https://platform.openai.com/docs/api-reference/responses/object>, `output`, "Web search
/// tool call").
fn server_item(reply: &Reply, index: usize, status: &str, arguments: &str) -> Value {
    let mut item = json!({
        "id": format!("ws_mock{}x{index}", reply.seq),
        "type": "web_search_call",
        "status": status,
    });
    if status == "completed" {
        let args: Value = serde_json::from_str(arguments).unwrap_or_default();
        item["action"] = json!({"type": "search", "query": args["query"]});
    }
    item
}

/// The complete output items, in stream order.
fn output(reply: &Reply, context: &Context) -> Vec<Value> {
    let mut items = Vec::new();
    if !reply.reasoning.is_empty() {
        items.push(reasoning_item(reply, context));
    }
    let call = |index: usize| {
        let args = reply.calls.get(index).map(|c| c.args.as_str());
        call_item(reply, index, "completed", args.unwrap_or_default())
    };
    items.extend((0..reply.leading_calls).map(call));
    let content = message_content(reply);
    if !content.is_empty() {
        items.push(message_item(reply, "completed", content));
    }
    items.extend((reply.leading_calls..reply.calls.len()).map(call));
    items
}

/// Where the refusal sits in the message item's content: after the text, if any.
fn refusal_index(reply: &Reply) -> usize {
    usize::from(!reply.text.is_empty())
}

struct Events {
    context: Context,
    sequence: u64,
    next_output: usize,
    reasoning_index: usize,
    text_index: usize,
    call_indexes: HashMap<usize, usize>,
}

impl Events {
    fn event(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = Value::String(kind.to_owned());
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        sse::event(kind, &data)
    }

    fn claim_output(&mut self) -> usize {
        let index = self.next_output;
        self.next_output += 1;
        index
    }

    fn call_index(&self, index: usize) -> usize {
        self.call_indexes.get(&index).copied().unwrap_or_default()
    }
}

impl Encoder for Events {
    fn start(&mut self, reply: &Reply) -> Vec<Bytes> {
        let response = response_object(reply, &self.context, "in_progress", Vec::new(), false);
        vec![
            self.event("response.created", json!({"response": response.clone()})),
            self.event("response.in_progress", json!({"response": response})),
        ]
    }

    fn piece(&mut self, reply: &Reply, piece: Piece<'_>) -> Vec<Bytes> {
        match piece {
            Piece::ReasoningStart => {
                self.reasoning_index = self.claim_output();
                let (id, output) = (reasoning_id(reply), self.reasoning_index);
                vec![
                    self.event(
                        "response.output_item.added",
                        json!({"output_index": output,
                               "item": {"id": id, "type": "reasoning", "summary": []}}),
                    ),
                    self.event(
                        "response.reasoning_summary_part.added",
                        json!({"item_id": id, "output_index": output, "summary_index": 0,
                               "part": {"type": "summary_text", "text": ""}}),
                    ),
                ]
            }
            Piece::ReasoningDelta(delta) => {
                let data = json!({"item_id": reasoning_id(reply),
                                  "output_index": self.reasoning_index,
                                  "summary_index": 0, "delta": delta});
                vec![self.event("response.reasoning_summary_text.delta", data)]
            }
            Piece::ReasoningEnd => {
                let (id, output, text) =
                    (reasoning_id(reply), self.reasoning_index, reply.reasoning());
                vec![
                    self.event(
                        "response.reasoning_summary_text.done",
                        json!({"item_id": id, "output_index": output, "summary_index": 0,
                               "text": text}),
                    ),
                    self.event(
                        "response.reasoning_summary_part.done",
                        json!({"item_id": id, "output_index": output, "summary_index": 0,
                               "part": {"type": "summary_text", "text": text}}),
                    ),
                    self.event(
                        "response.output_item.done",
                        json!({"output_index": output, "item": reasoning_item(reply, &self.context)}),
                    ),
                ]
            }
            Piece::TextStart => {
                self.text_index = self.claim_output();
                let (id, output) = (message_id(reply), self.text_index);
                vec![
                    self.event(
                        "response.output_item.added",
                        json!({"output_index": output,
                               "item": message_item(reply, "in_progress", Vec::new())}),
                    ),
                    self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": output, "content_index": 0,
                               "part": text_part("", Vec::new())}),
                    ),
                ]
            }
            Piece::TextDelta(delta) => {
                let data = json!({"item_id": message_id(reply), "output_index": self.text_index,
                                  "content_index": 0, "delta": delta, "logprobs": []});
                vec![self.event("response.output_text.delta", data)]
            }
            Piece::TextEnd => {
                let (id, output, text) = (message_id(reply), self.text_index, reply.text());
                let mut frames: Vec<Bytes> = citations(reply)
                    .into_iter()
                    .enumerate()
                    .map(|(index, annotation)| {
                        self.event(
                            "response.output_text.annotation.added",
                            json!({"item_id": id, "output_index": output, "content_index": 0,
                                   "annotation_index": index, "annotation": annotation}),
                        )
                    })
                    .collect();
                frames.extend([
                    self.event(
                        "response.output_text.done",
                        json!({"item_id": id, "output_index": output, "content_index": 0,
                               "text": text, "logprobs": []}),
                    ),
                    self.event(
                        "response.content_part.done",
                        json!({"item_id": id, "output_index": output, "content_index": 0,
                               "part": text_part(&text, citations(reply))}),
                    ),
                ]);
                // A refusal that follows is a part of the same message item.
                if reply.refusal.is_empty() {
                    frames.push(self.event(
                        "response.output_item.done",
                        json!({"output_index": output,
                               "item": message_item(reply, "completed", message_content(reply))}),
                    ));
                }
                frames
            }
            Piece::RefusalStart => {
                let mut frames = Vec::new();
                if reply.text.is_empty() {
                    self.text_index = self.claim_output();
                    frames.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": self.text_index,
                               "item": message_item(reply, "in_progress", Vec::new())}),
                    ));
                }
                let data = json!({"item_id": message_id(reply), "output_index": self.text_index,
                                  "content_index": refusal_index(reply), "part": refusal_part("")});
                frames.push(self.event("response.content_part.added", data));
                frames
            }
            Piece::RefusalDelta(delta) => {
                let data = json!({"item_id": message_id(reply), "output_index": self.text_index,
                                  "content_index": refusal_index(reply), "delta": delta});
                vec![self.event("response.refusal.delta", data)]
            }
            Piece::RefusalEnd => {
                let (id, output, index) =
                    (message_id(reply), self.text_index, refusal_index(reply));
                let refusal = reply.refusal();
                vec![
                    self.event(
                        "response.refusal.done",
                        json!({"item_id": id, "output_index": output, "content_index": index,
                               "refusal": refusal}),
                    ),
                    self.event(
                        "response.content_part.done",
                        json!({"item_id": id, "output_index": output, "content_index": index,
                               "part": refusal_part(&refusal)}),
                    ),
                    self.event(
                        "response.output_item.done",
                        json!({"output_index": output,
                               "item": message_item(reply, "completed", message_content(reply))}),
                    ),
                ]
            }
            Piece::ToolStart(index) => {
                let output = self.claim_output();
                self.call_indexes.insert(index, output);
                vec![self.event(
                    "response.output_item.added",
                    json!({"output_index": output,
                           "item": call_item(reply, index, "in_progress", "")}),
                )]
            }
            // A provider-run call streams no arguments; it is only searching meanwhile.
            Piece::ToolDelta(index, _) if is_server(reply, index) => Vec::new(),
            Piece::ToolEnd(index) if is_server(reply, index) => {
                let args = reply.calls.get(index).map(|c| c.args.clone());
                vec![self.event(
                    "response.output_item.done",
                    json!({"output_index": self.call_index(index),
                           "item": call_item(reply, index, "completed", &args.unwrap_or_default())}),
                )]
            }
            Piece::ToolDelta(index, delta) => {
                let data = json!({"item_id": call_item_id(reply, index),
                                  "output_index": self.call_index(index), "delta": delta});
                vec![self.event("response.function_call_arguments.delta", data)]
            }
            Piece::ToolEnd(index) => {
                let output = self.call_index(index);
                let (name, args) = reply
                    .calls
                    .get(index)
                    .map(|c| (c.name.clone(), c.args.clone()))
                    .unwrap_or_default();
                vec![
                    self.event(
                        "response.function_call_arguments.done",
                        json!({"item_id": call_item_id(reply, index), "output_index": output,
                               "name": name, "arguments": args}),
                    ),
                    self.event(
                        "response.output_item.done",
                        json!({"output_index": output,
                               "item": call_item(reply, index, "completed", &args)}),
                    ),
                ]
            }
        }
    }

    fn finish(&mut self, reply: &Reply) -> Vec<Bytes> {
        let (kind, status) = match reply.finish {
            Finish::Length => ("response.incomplete", "incomplete"),
            _ => ("response.completed", "completed"),
        };
        let response = response_object(
            reply,
            &self.context,
            status,
            output(reply, &self.context),
            true,
        );
        vec![self.event(kind, json!({"response": response}))]
    }

    fn keepalive(&mut self) -> Vec<Bytes> {
        vec![self.event(
            "response.in_progress",
            json!({"response": {"status": "in_progress"}}),
        )]
    }

    fn error(&mut self, _reply: &Reply, fault: &StreamFault) -> Vec<Bytes> {
        let data =
            json!({"code": fault.error_type, "message": fault.message, "param": Value::Null});
        vec![self.event("error", data)]
    }
}
