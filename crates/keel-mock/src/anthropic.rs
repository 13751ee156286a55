//! Anthropic Messages: `POST /v1/messages`.
//!
//! Streams `message_start` (with input usage), `ping`, then one content block per part
//! (`thinking` with `thinking_delta`s closed by a `signature_delta`, `text` with
//! `text_delta`s, `tool_use` with `input_json_delta`s), `message_delta` with the stop
//! reason and final usage, and `message_stop`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State as Extract;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::conversation::{Conversation, content_text};
use crate::driver::{self, Encoder, Piece};
use crate::errors::{self, Flavor};
use crate::plan::{Plan, Reply, StreamFault, plan};
use crate::rules;
use crate::script::{Finish, SearchResult};
use crate::sse;
use crate::state::State;

pub(crate) async fn handle(Extract(state): Extract<Arc<State>>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            return errors::invalid(Flavor::Anthropic, &format!("invalid JSON: {error}"));
        }
    };
    state.record_request("/v1/messages", &request);
    if state.config.strict
        && let Err(violation) = rules::check(rules::anthropic::RULES, &request)
            .and_then(|()| rules::check(rules::web_search::ANTHROPIC, &request))
            .and_then(|()| rules::thinking::check(&request))
    {
        return violation.response(Flavor::Anthropic);
    }
    let model = request["model"].as_str().unwrap_or("mock");
    let reply = match plan(&conversation(&request), model, &state) {
        Plan::Reply(reply) => *reply,
        Plan::Fail(error) => return errors::scripted(Flavor::Anthropic, &error),
        Plan::Invalid(message) => return errors::invalid(Flavor::Anthropic, &message),
    };
    if request["stream"].as_bool().unwrap_or(false) {
        driver::stream(reply, Events { block: 0 }, &state, "anthropic")
    } else {
        let body = message(&reply);
        driver::whole(&reply, body, Flavor::Anthropic, &state, "anthropic").await
    }
}

fn conversation(request: &Value) -> Conversation {
    let mut conversation = Conversation::default();
    let mut names: HashMap<String, String> = HashMap::new();
    conversation.context(content_text(&request["system"]).len());
    for message in request["messages"].as_array().into_iter().flatten() {
        let content = &message["content"];
        match message["role"].as_str().unwrap_or_default() {
            "assistant" => {
                let said = content_text(content);
                let mut chars = said.len();
                for block in content.as_array().into_iter().flatten() {
                    if block["type"] == "tool_use" {
                        chars += block["input"].to_string().len();
                        if let (Some(id), Some(name)) =
                            (block["id"].as_str(), block["name"].as_str())
                        {
                            names.insert(id.to_owned(), name.to_owned());
                        }
                    }
                }
                conversation.assistant(chars, &said);
            }
            _ => user_message(&mut conversation, &names, content),
        }
    }
    for tool in request["tools"].as_array().into_iter().flatten() {
        if let Some(name) = tool["name"].as_str() {
            conversation.tools.push(name.to_owned());
        }
        conversation.context(tool.to_string().len());
    }
    conversation
}

/// A user message carries tool results (Anthropic sends them with the user role), text, or
/// both; text after tool results is a new instruction and restarts the script's steps.
/// Consecutive user messages arrive merged into one turn (the API merges them too), so a
/// text block with a second directive starts the next user message.
fn user_message(conversation: &mut Conversation, names: &HashMap<String, String>, content: &Value) {
    let Some(blocks) = content.as_array() else {
        conversation.user(content_text(content));
        return;
    };
    let mut texts: Vec<&str> = Vec::new();
    let mut had_results = false;
    for block in blocks {
        match block["type"].as_str() {
            Some("tool_result") => {
                had_results = true;
                let name = block["tool_use_id"]
                    .as_str()
                    .and_then(|id| names.get(id).cloned());
                conversation.tool_result(name, content_text(&block["content"]));
            }
            _ => {
                if let Some(text) = block["text"].as_str() {
                    if has_directive(text) && texts.iter().any(|t| has_directive(t)) {
                        conversation.user(std::mem::take(&mut texts).join("\n"));
                    }
                    texts.push(text);
                }
            }
        }
    }
    if !had_results || !texts.is_empty() {
        conversation.user(texts.join("\n"));
    }
}

pub(crate) fn has_directive(text: &str) -> bool {
    matches!(crate::script::parse_directive(text), Ok(Some(_)))
}

fn message_id(reply: &Reply) -> String {
    format!("msg_mock{}", reply.seq)
}

fn stop_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
        Finish::ContentFilter => "refusal",
        Finish::PauseTurn => "pause_turn",
    }
}

fn usage(reply: &Reply, output_tokens: u64) -> Value {
    let u = reply.usage;
    json!({
        "input_tokens": u.input,
        "cache_creation_input_tokens": u.cache_write,
        "cache_read_input_tokens": u.cache_read,
        "output_tokens": output_tokens,
    })
}

fn call_type(call: &crate::plan::Call) -> &'static str {
    if call.server {
        "server_tool_use"
    } else {
        "tool_use"
    }
}

fn tool_id(reply: &Reply, index: usize) -> String {
    match reply.calls.get(index) {
        Some(call) if call.server => reply.call_id(index, "srvtoolu_"),
        _ => reply.call_id(index, "toolu_"),
    }
}

/// The result block a provider-run tool's call is followed by in the same turn
/// (<https://platform.claude.com/docs/en/agents-and-tools/tool-use/server-tools>).
fn server_result(reply: &Reply, index: usize) -> Value {
    let call = reply.calls.get(index);
    let name = call.map_or("web_search", |c| c.name.as_str());
    let example = [SearchResult {
        url: "https://example.com/".to_owned(),
        title: "Example".to_owned(),
    }];
    let pages = match call {
        Some(call) if !call.results.is_empty() => call.results.as_slice(),
        _ => &example,
    };
    let content: Vec<Value> = pages
        .iter()
        .map(|page| {
            json!({"type": "web_search_result", "url": page.url, "title": page.title,
                   "encrypted_content": rules::web_search::encrypted_content(&page.url),
                   "page_age": Value::Null})
        })
        .collect();
    json!({
        "type": format!("{name}_tool_result"),
        "tool_use_id": tool_id(reply, index),
        "content": content,
    })
}

/// The text of a reply that searched first cites the first page found
/// (<https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-search-tool>,
/// "Citations": `web_search_result_location`).
fn citations(reply: &Reply) -> Vec<Value> {
    let text = reply.text();
    reply.calls[..reply.leading_calls]
        .iter()
        .filter_map(|call| call.results.first())
        .map(|page| {
            json!({"type": "web_search_result_location", "url": page.url, "title": page.title,
                   "encrypted_index": rules::web_search::encrypted_content(&page.url),
                   "cited_text": text})
        })
        .collect()
}

/// A tool call's input as an object; argument text that is not JSON becomes `{}`.
fn input(args: &str) -> Value {
    serde_json::from_str(args).unwrap_or_else(|_| json!({}))
}

fn message(reply: &Reply) -> Value {
    let mut content = Vec::new();
    if !reply.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": reply.reasoning(),
                            "signature": rules::thinking::sign(&reply.reasoning())}));
    }
    let call = |index: usize| {
        let call = reply.calls.get(index)?;
        let block = json!({"type": call_type(call), "id": tool_id(reply, index),
                           "name": call.name, "input": input(&call.args)});
        Some(std::iter::once(block).chain(call.server.then(|| server_result(reply, index))))
    };
    content.extend((0..reply.leading_calls).filter_map(call).flatten());
    if !reply.text.is_empty() {
        let citations = citations(reply);
        let mut text = json!({"type": "text", "text": reply.text()});
        if !citations.is_empty() {
            text["citations"] = json!(citations);
        }
        content.push(text);
    }
    content.extend(
        (reply.leading_calls..reply.calls.len())
            .filter_map(call)
            .flatten(),
    );
    json!({
        "id": message_id(reply),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop_reason_of(reply),
        "stop_sequence": Value::Null,
        "stop_details": stop_details(reply),
        "usage": usage(reply, reply.usage.output),
    })
}

/// A refusal is no content block on this API: the reply stops with `stop_reason: "refusal"`
/// and explains itself in `stop_details`
/// (<https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals>).
fn stop_reason_of(reply: &Reply) -> &'static str {
    if reply.refusal.is_empty() {
        stop_reason(reply.finish)
    } else {
        "refusal"
    }
}

fn stop_details(reply: &Reply) -> Value {
    if reply.refusal.is_empty() {
        return Value::Null;
    }
    json!({"type": "refusal", "category": Value::Null, "explanation": reply.refusal()})
}

struct Events {
    /// Index of the current content block.
    block: usize,
}

fn event(kind: &str, mut data: Value) -> Bytes {
    data["type"] = Value::String(kind.to_owned());
    sse::event(kind, &data)
}

impl Events {
    fn block_start(&self, block: Value) -> Bytes {
        event(
            "content_block_start",
            json!({"index": self.block, "content_block": block}),
        )
    }

    fn delta(&self, delta: Value) -> Bytes {
        event(
            "content_block_delta",
            json!({"index": self.block, "delta": delta}),
        )
    }

    fn block_stop(&mut self) -> Bytes {
        let frame = event("content_block_stop", json!({"index": self.block}));
        self.block += 1;
        frame
    }
}

impl Encoder for Events {
    fn start(&mut self, reply: &Reply) -> Vec<Bytes> {
        let message = json!({
            "id": message_id(reply),
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": [],
            "stop_reason": Value::Null,
            "stop_sequence": Value::Null,
            // Anthropic reports a provisional output count of 1 at the start.
            "usage": usage(reply, 1),
        });
        vec![
            event("message_start", json!({"message": message})),
            event("ping", json!({})),
        ]
    }

    fn piece(&mut self, reply: &Reply, piece: Piece<'_>) -> Vec<Bytes> {
        let frame = match piece {
            Piece::ReasoningStart => {
                self.block_start(json!({"type": "thinking", "thinking": "", "signature": ""}))
            }
            Piece::ReasoningDelta(text) => {
                self.delta(json!({"type": "thinking_delta", "thinking": text}))
            }
            Piece::ReasoningEnd => {
                let signature =
                    self.delta(json!({"type": "signature_delta", "signature": rules::thinking::sign(&reply.reasoning())}));
                return vec![signature, self.block_stop()];
            }
            Piece::TextStart => {
                let start = self.block_start(json!({"type": "text", "text": ""}));
                let cited = citations(reply).into_iter().map(|citation| {
                    self.delta(json!({"type": "citations_delta", "citation": citation}))
                });
                return std::iter::once(start).chain(cited).collect();
            }
            Piece::TextDelta(text) => self.delta(json!({"type": "text_delta", "text": text})),
            Piece::ToolStart(index) => self.block_start(json!({
                "type": reply.calls.get(index).map_or("tool_use", call_type),
                "id": tool_id(reply, index),
                "name": reply.calls.get(index).map(|c| c.name.as_str()),
                "input": {},
            })),
            Piece::ToolEnd(index) if reply.calls.get(index).is_some_and(|c| c.server) => {
                let stop = self.block_stop();
                let result = self.block_start(server_result(reply, index));
                return vec![stop, result, self.block_stop()];
            }
            Piece::ToolDelta(_, chunk) => {
                self.delta(json!({"type": "input_json_delta", "partial_json": chunk}))
            }
            Piece::TextEnd | Piece::ToolEnd(_) => self.block_stop(),
            // The refusal rides on `message_delta` (see `stop_details`).
            Piece::RefusalStart | Piece::RefusalDelta(_) | Piece::RefusalEnd => {
                return Vec::new();
            }
        };
        vec![frame]
    }

    fn finish(&mut self, reply: &Reply) -> Vec<Bytes> {
        vec![
            event(
                "message_delta",
                json!({
                    "delta": {"stop_reason": stop_reason_of(reply), "stop_sequence": Value::Null,
                              "stop_details": stop_details(reply)},
                    "usage": usage(reply, reply.usage.output),
                }),
            ),
            event("message_stop", json!({})),
        ]
    }

    fn keepalive(&mut self) -> Vec<Bytes> {
        vec![event("ping", json!({}))]
    }

    fn error(&mut self, _reply: &Reply, fault: &StreamFault) -> Vec<Bytes> {
        let body = errors::envelope(
            Flavor::Anthropic,
            &fault.error_type,
            None,
            &fault.message,
            None,
        );
        vec![sse::event("error", &body)]
    }
}
