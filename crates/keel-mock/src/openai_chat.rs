//! OpenAI Chat Completions: `POST /v1/chat/completions`.
//!
//! Streams `chat.completion.chunk` objects whose `choices[0].delta` carries `content`,
//! `reasoning_content` (the field OpenAI-compatible servers use for reasoning), `refusal` or
//! indexed
//! `tool_calls`; then a chunk with `finish_reason`, a usage-only chunk (empty `choices`)
//! when `stream_options.include_usage` is set, and `data: [DONE]`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State as Extract;
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde::ser::{SerializeMap as _, Serializer};
use serde_json::{Value, json};

use crate::config::ChatServer;
use crate::conversation::{Conversation, content_text};
use crate::driver::{self, Encoder, Piece};
use crate::errors::{self, Flavor};
use crate::plan::{Plan, Reply, StreamFault, plan};
use crate::rules::{self, thought_signature};
use crate::script::Finish;
use crate::sse;
use crate::state::State;
use crate::unix_now;

pub(crate) async fn handle(Extract(state): Extract<Arc<State>>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => return errors::invalid(Flavor::OpenAi, &format!("invalid JSON: {error}")),
    };
    state.record_request("/v1/chat/completions", &request);
    if state.config.strict
        && let Err(violation) = rules::check(rules::openai_chat::RULES, &request)
            .and_then(|()| rules::prefill::check(&request))
            .and_then(|()| server_rules(state.config.chat_server, &request))
    {
        return violation.response(Flavor::OpenAi);
    }
    let model = request["model"].as_str().unwrap_or("mock");
    let reply = match plan(&conversation(&request), model, &state) {
        Plan::Reply(reply) => *reply,
        Plan::Fail(error) => return errors::scripted(Flavor::OpenAi, &error),
        Plan::Invalid(message) => return errors::invalid(Flavor::OpenAi, &message),
    };
    if request["stream"].as_bool().unwrap_or(false) {
        let include_usage = request
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let encoder = Chunks {
            include_usage,
            created: unix_now(),
            id: completion_id(&reply),
        };
        driver::stream(reply, encoder, &state, "openai-chat")
    } else {
        let body = completion(&reply);
        driver::whole(&reply, body, Flavor::OpenAi, &state, "openai-chat").await
    }
}

/// The rules of the one server the mock stands in for.
fn server_rules(server: ChatServer, request: &Value) -> Result<(), rules::Violation> {
    match server {
        ChatServer::Standard => Ok(()),
        ChatServer::Cerebras => rules::openai_chat::reasoning_content_is_unsupported(request),
    }
}

fn conversation(request: &Value) -> Conversation {
    let mut conversation = Conversation::default();
    let mut names: HashMap<String, String> = HashMap::new();
    for message in request["messages"].as_array().into_iter().flatten() {
        let text = content_text(&message["content"]);
        match message["role"].as_str().unwrap_or_default() {
            "user" => conversation.user(text),
            "assistant" => {
                let mut chars = text.len();
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    let function = &call["function"];
                    chars += function["arguments"].as_str().map_or(0, str::len);
                    if let (Some(id), Some(name)) = (call["id"].as_str(), function["name"].as_str())
                    {
                        names.insert(id.to_owned(), name.to_owned());
                    }
                }
                conversation.assistant(chars, &text);
            }
            "tool" => {
                let name = message["tool_call_id"]
                    .as_str()
                    .and_then(|id| names.get(id).cloned());
                conversation.tool_result(name, text);
            }
            _ => conversation.context(text.len()),
        }
    }
    for tool in request["tools"].as_array().into_iter().flatten() {
        if let Some(name) = tool.pointer("/function/name").and_then(Value::as_str) {
            conversation.tools.push(name.to_owned());
        }
        conversation.context(tool.to_string().len());
    }
    conversation
}

/// The `index` call `index` streams under: its position unless scripted otherwise.
fn stream_index(reply: &Reply, index: usize) -> usize {
    reply
        .calls
        .get(index)
        .and_then(|c| c.index)
        .unwrap_or(index)
}

fn finish_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop | Finish::PauseTurn => "stop",
        Finish::Length => "length",
        Finish::ToolCalls => "tool_calls",
        Finish::ContentFilter => "content_filter",
    }
}

fn completion_id(reply: &Reply) -> String {
    format!("chatcmpl-mock{}", reply.seq)
}

fn usage(reply: &Reply) -> Value {
    let u = reply.usage;
    // OpenAI's prompt_tokens include the cached ones.
    let prompt = u.input + u.cache_read + u.cache_write;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": u.output,
        "total_tokens": prompt + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cache_read},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    })
}

fn completion(reply: &Reply) -> Value {
    let mut message = json!({"role": "assistant", "content": Value::Null});
    if !reply.text.is_empty() {
        message["content"] = Value::String(reply.text());
    }
    if !reply.reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reply.reasoning());
    }
    if !reply.refusal.is_empty() {
        message["refusal"] = Value::String(reply.refusal());
    }
    if !reply.calls.is_empty() {
        let calls: Vec<Value> = reply
            .calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                let id = reply.call_id(index, "call_");
                let mut value = json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.args},
                });
                if let Some(extra) = thought_signature::extra_content(&reply.model, &id, index) {
                    value["extra_content"] = extra;
                }
                value
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": completion_id(reply),
        "object": "chat.completion",
        "created": unix_now(),
        "model": reply.model,
        "system_fingerprint": Value::Null,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": Value::Null,
            "finish_reason": finish_reason(reply.finish),
        }],
        "usage": usage(reply),
    })
}

struct Chunks {
    include_usage: bool,
    created: u64,
    /// The completion's id, the same in every chunk.
    id: String,
}

/// One `chat.completion.chunk`, serialised without building a JSON tree: the load
/// benchmark streams hundreds of thousands of them through this mock.
#[derive(Serialize)]
struct Chunk<'a, D> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: Option<()>,
    choices: [Choice<D>; 1],
    /// `Some(None)`: `"usage": null`, which OpenAI sends in every chunk but the last when
    /// usage is asked for; `None`: no such field.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<()>>,
}

#[derive(Serialize)]
struct Choice<D> {
    index: u32,
    delta: D,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

/// The delta of one token: a map of the one field its kind is sent in.
struct TokenDelta<'a> {
    field: &'static str,
    text: &'a str,
}

impl Serialize for TokenDelta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.field, self.text)?;
        map.end()
    }
}

impl Chunks {
    fn chunk(&self, reply: &Reply, delta: impl Serialize, finish: Option<Finish>) -> Bytes {
        sse::data(&Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &reply.model,
            system_fingerprint: None,
            choices: [Choice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason: finish.map(finish_reason),
            }],
            usage: self.include_usage.then_some(None),
        })
    }

    fn token(&self, reply: &Reply, field: &'static str, text: &str) -> Bytes {
        self.chunk(reply, TokenDelta { field, text }, None)
    }
}

impl Encoder for Chunks {
    fn start(&mut self, reply: &Reply) -> Vec<Bytes> {
        vec![self.chunk(reply, json!({"role": "assistant", "content": ""}), None)]
    }

    fn piece(&mut self, reply: &Reply, piece: Piece<'_>) -> Vec<Bytes> {
        let delta = match piece {
            Piece::ReasoningDelta(text) => {
                return vec![self.token(reply, "reasoning_content", text)];
            }
            Piece::TextDelta(text) => return vec![self.token(reply, "content", text)],
            Piece::RefusalDelta(text) => return vec![self.token(reply, "refusal", text)],
            Piece::ToolStart(index) => {
                let id = reply.call_id(index, "call_");
                let mut call = json!({
                    "index": stream_index(reply, index),
                    "id": id,
                    "type": "function",
                    "function": {
                        "name": reply.calls.get(index).map(|c| c.name.as_str()),
                        "arguments": "",
                    },
                });
                if let Some(extra) = thought_signature::extra_content(&reply.model, &id, index) {
                    call["extra_content"] = extra;
                }
                // A call scripted with an empty id is streamed without one, as llama.cpp
                // and some vLLM versions do.
                if call["id"] == ""
                    && let Some(call) = call.as_object_mut()
                {
                    call.remove("id");
                }
                json!({"tool_calls": [call]})
            }
            Piece::ToolDelta(index, chunk) => json!({"tool_calls": [{
                "index": stream_index(reply, index),
                "function": {"arguments": chunk},
            }]}),
            Piece::ReasoningStart
            | Piece::ReasoningEnd
            | Piece::TextStart
            | Piece::TextEnd
            | Piece::RefusalStart
            | Piece::RefusalEnd
            | Piece::ToolEnd(_) => return Vec::new(),
        };
        vec![self.chunk(reply, delta, None)]
    }

    fn finish(&mut self, reply: &Reply) -> Vec<Bytes> {
        let mut frames = vec![self.chunk(reply, json!({}), Some(reply.finish))];
        if self.include_usage {
            frames.push(sse::data(&json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": reply.model,
                "system_fingerprint": Value::Null,
                "choices": [],
                "usage": usage(reply),
            })));
        }
        frames.push(Bytes::from_static(sse::DONE.as_bytes()));
        frames
    }

    fn keepalive(&mut self) -> Vec<Bytes> {
        vec![sse::raw(": keep-alive")]
    }

    fn reports_usage(&self) -> bool {
        self.include_usage
    }

    fn error(&mut self, _reply: &Reply, fault: &StreamFault) -> Vec<Bytes> {
        let body = errors::envelope(
            Flavor::OpenAi,
            &fault.error_type,
            None,
            &fault.message,
            None,
        );
        vec![sse::data(&body)]
    }
}
