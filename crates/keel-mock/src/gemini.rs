//! The Gemini API: `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, the whole
//! `:generateContent`, and `GET /v1beta/models/{model}`
//! (<https://ai.google.dev/api/generate-content>, <https://ai.google.dev/api/models>).
//!
//! A stream is a series of `GenerateContentResponse` chunks, one per token: thoughts
//! (`thought: true`, only when `thinkingConfig.includeThoughts` asks for them), text, then
//! each function call whole; the last chunk carries the `finishReason` and usage. Gemini
//! models sign the first call of a reply (`thoughtSignature`); Gemini 3 gives calls ids,
//! earlier models none.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::conversation::{Conversation, content_text};
use crate::driver::{self, Encoder, Piece};
use crate::errors::{self, Flavor};
use crate::plan::{Plan, Reply, StreamFault, plan};
use crate::rules::{self, array, gemini::signature, str_at};
use crate::script::Finish;
use crate::sse;
use crate::state::State;

/// What `GET /v1beta/models/{model}` reports as the context window: Gemini's 1M.
const INPUT_TOKEN_LIMIT: u64 = 1_048_576;

pub(crate) async fn model(Path(model): Path<String>) -> Json<Value> {
    Json(json!({
        "name": format!("models/{model}"),
        "baseModelId": model,
        "version": "001",
        "displayName": model,
        "description": "keel-mock",
        "inputTokenLimit": INPUT_TOKEN_LIMIT,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "temperature": 1.0,
        "maxTemperature": 2.0,
        "topP": 0.95,
        "topK": 64,
        "thinking": true,
    }))
}

pub(crate) async fn handle(
    Extract(state): Extract<Arc<State>>,
    Path(target): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let Some((model, method)) = target.split_once(':') else {
        return not_found(&target);
    };
    let streamed = match method {
        "streamGenerateContent" => true,
        "generateContent" => false,
        _ => return not_found(&target),
    };
    if streamed && !query.as_deref().unwrap_or_default().contains("alt=sse") {
        return errors::invalid(
            Flavor::Google,
            "keel-mock streams only server-sent events: add ?alt=sse",
        );
    }
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => camel_case(request),
        Err(error) => {
            let message = format!("Invalid JSON payload received. {error}");
            return errors::invalid(Flavor::Google, &message);
        }
    };
    state.record_request(&format!("/v1beta/models/{target}"), &request);
    if state.config.strict
        && let Err(violation) = rules::check(rules::gemini::RULES, &request)
            .and_then(|()| rules::gemini::signatures_come_back(model, &request))
    {
        return violation.response(Flavor::Google);
    }
    let reply = match plan(&conversation(&request), model, &state) {
        Plan::Reply(reply) => *reply,
        Plan::Fail(error) => return errors::scripted(Flavor::Google, &error),
        Plan::Invalid(message) => return errors::invalid(Flavor::Google, &message),
    };
    let thoughts = request["generationConfig"]["thinkingConfig"]["includeThoughts"] == true;
    if streamed {
        driver::stream(reply, Chunks { thoughts }, &state, "gemini")
    } else {
        let body = whole(&reply, thoughts);
        driver::whole(&reply, body, Flavor::Google, &state, "gemini").await
    }
}

/// Google's JSON parsing takes a field by its JSON name or its proto name
/// (<https://protobuf.dev/programming-guides/json/>: parsers accept both), so `include_thoughts`
/// is `includeThoughts`; the rules and the planner read the JSON names. Values that are the
/// caller's own data (arguments, responses, schemas) keep their keys.
fn camel_case(value: Value) -> Value {
    const OPAQUE: &[&str] = &[
        "args",
        "response",
        "parameters",
        "parametersJsonSchema",
        "responseSchema",
        "responseJsonSchema",
    ];
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, child)| {
                    let key = camel(&key);
                    let child = if OPAQUE.contains(&key.as_str()) {
                        child
                    } else {
                        camel_case(child)
                    };
                    (key, child)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(camel_case).collect()),
        other => other,
    }
}

fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for ch in key.chars() {
        if ch == '_' {
            upper = true;
        } else if upper {
            out.extend(ch.to_uppercase());
            upper = false;
        } else {
            out.push(ch);
        }
    }
    out
}

fn not_found(target: &str) -> Response {
    let message = format!("models/{target} is not found for API version v1beta");
    (StatusCode::NOT_FOUND, Json(errors::google(404, &message))).into_response()
}

fn conversation(request: &Value) -> Conversation {
    let mut conversation = Conversation::default();
    conversation.context(content_text(&request["systemInstruction"]["parts"]).len());
    for content in array(request, "contents") {
        let parts = array(content, "parts");
        if str_at(content, "role") == "model" {
            let said: String = parts
                .iter()
                .filter(|p| p["thought"] != true)
                .filter_map(|p| p["text"].as_str())
                .collect();
            let calls: usize = parts
                .iter()
                .map(|p| p["functionCall"]["args"].to_string().len())
                .sum();
            conversation.assistant(said.len() + calls, &said);
        } else {
            user_turn(&mut conversation, parts);
        }
    }
    for tools in array(request, "tools") {
        for declaration in array(tools, "functionDeclarations") {
            conversation
                .tools
                .push(str_at(declaration, "name").to_owned());
            conversation.context(declaration.to_string().len());
        }
    }
    conversation
}

/// A user turn holds function responses, text, or both; text with a second directive is a
/// second user message merged into the turn, as on the other endpoints.
fn user_turn(conversation: &mut Conversation, parts: &[Value]) {
    let mut texts: Vec<&str> = Vec::new();
    let mut answered = false;
    for part in parts {
        if let Some(response) = part.get("functionResponse") {
            answered = true;
            let output = match &response["response"]["output"] {
                Value::String(text) => text.clone(),
                Value::Null => response["response"].to_string(),
                other => other.to_string(),
            };
            let name = response["name"].as_str().map(str::to_owned);
            conversation.tool_result(name, output);
        } else if let Some(text) = part["text"].as_str() {
            let directive = crate::anthropic::has_directive(text);
            if directive && texts.iter().any(|t| crate::anthropic::has_directive(t)) {
                conversation.user(std::mem::take(&mut texts).join("\n"));
            }
            texts.push(text);
        }
    }
    if !answered || !texts.is_empty() {
        conversation.user(texts.join("\n"));
    }
}

fn finish_reason(reply: &Reply) -> &'static str {
    if !reply.refusal.is_empty() {
        return "SAFETY";
    }
    match reply.finish {
        Finish::Stop | Finish::ToolCalls | Finish::PauseTurn => "STOP",
        Finish::Length => "MAX_TOKENS",
        Finish::ContentFilter => "SAFETY",
    }
}

fn usage(reply: &Reply) -> Value {
    let u = reply.usage;
    let prompt = u.input + u.cache_read + u.cache_write;
    let candidates = u.output.saturating_sub(u.reasoning);
    let mut usage = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + u.output,
    });
    if u.reasoning > 0 {
        usage["thoughtsTokenCount"] = json!(u.reasoning);
    }
    if u.cache_read > 0 {
        usage["cachedContentTokenCount"] = json!(u.cache_read);
    }
    usage
}

/// Function call `index` as a part, signed when it is a Gemini model's first.
fn call_part(reply: &Reply, index: usize) -> Option<Value> {
    let call = reply.calls.get(index)?;
    let mut function = json!({
        "name": call.name,
        "args": serde_json::from_str::<Value>(&call.args).unwrap_or_else(|_| json!({})),
    });
    let pre_3 = reply.model.starts_with("gemini-1") || reply.model.starts_with("gemini-2");
    if !pre_3 {
        function["id"] = json!(reply.call_id(index, "call_"));
    }
    let mut part = json!({ "functionCall": function });
    if index == 0 && reply.model.starts_with("gemini-") {
        part["thoughtSignature"] = json!(signature(&part["functionCall"]));
    }
    Some(part)
}

fn response(reply: &Reply, parts: Vec<Value>, finish: bool) -> Value {
    let mut candidate = json!({"index": 0});
    if !parts.is_empty() {
        candidate["content"] = json!({"role": "model", "parts": parts});
    }
    let mut body = json!({
        "candidates": [candidate],
        "modelVersion": reply.model,
        "responseId": format!("mock-response-{}", reply.seq),
    });
    if finish {
        body["candidates"][0]["finishReason"] = json!(finish_reason(reply));
        if !reply.refusal.is_empty() {
            body["candidates"][0]["finishMessage"] = json!(reply.refusal());
        }
        body["usageMetadata"] = usage(reply);
    }
    body
}

fn whole(reply: &Reply, thoughts: bool) -> Value {
    let mut parts = Vec::new();
    if thoughts && !reply.reasoning.is_empty() {
        parts.push(json!({"text": reply.reasoning(), "thought": true}));
    }
    if !reply.text.is_empty() {
        parts.push(json!({"text": reply.text()}));
    }
    parts.extend((0..reply.calls.len()).filter_map(|i| call_part(reply, i)));
    response(reply, parts, true)
}

struct Chunks {
    /// The request asked for thoughts.
    thoughts: bool,
}

impl Encoder for Chunks {
    fn start(&mut self, _reply: &Reply) -> Vec<Bytes> {
        Vec::new()
    }

    fn piece(&mut self, reply: &Reply, piece: Piece<'_>) -> Vec<Bytes> {
        let part = match piece {
            Piece::ReasoningDelta(text) if self.thoughts => json!({"text": text, "thought": true}),
            Piece::TextDelta(text) => json!({"text": text}),
            Piece::ToolEnd(index) => match call_part(reply, index) {
                Some(part) => part,
                None => return Vec::new(),
            },
            _ => return Vec::new(),
        };
        vec![sse::data(&response(reply, vec![part], false))]
    }

    fn finish(&mut self, reply: &Reply) -> Vec<Bytes> {
        vec![sse::data(&response(reply, Vec::new(), true))]
    }

    /// Gemini sends no keep-alives; an SSE comment is what a proxy in front would add.
    fn keepalive(&mut self) -> Vec<Bytes> {
        vec![Bytes::from_static(b": keep-alive\n\n")]
    }

    fn error(&mut self, _reply: &Reply, fault: &StreamFault) -> Vec<Bytes> {
        let code = errors::status_for_type(Flavor::Google, &fault.error_type);
        vec![sse::data(&errors::google(code, &fault.message))]
    }
}
