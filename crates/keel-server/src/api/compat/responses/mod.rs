//! OpenAI Responses-compatible endpoints under `/v1`, for the official OpenAI SDKs with
//! `base_url = "<keel>/v1"` and a Keel token as the API key.
//!
//! * `POST /v1/responses` — a new chat, or the next turn of the chat behind
//!   `previous_response_id` (a user message, or `function_call_output` items answering its
//!   client-side calls); `stream`, `background`; `store` is always on (Keel keeps everything).
//! * `GET /v1/responses/{id}` — the response; with `stream=true` its events, after
//!   `starting_after` when given.
//! * `POST /v1/responses/{id}/cancel` — interrupts it.
//! * `GET /v1/responses/{id}/input_items` — what started it.
//!
//! A response is one run of one chat: its id names the chat and the event position of the
//! input that started it, so nothing is stored besides the chat itself.

pub(crate) mod stream;

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use keel_core::Role;
use keel_store::{Busy, Chat, ChatId, ChatStatus, SendOutcome, ToolResultInput};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::chats;
use crate::api::compat::reply::{End, Reply};
use crate::api::compat::sse::{self, Translator};
use crate::api::dto::{ClientTool, CreateChatRequest, MessageView};
use crate::api::error::{ApiError, Code};
use crate::api::events::stream_slot;
use crate::api::extract::{ApiJson, Caller, user_parts};
use crate::api::state::AppState;
use crate::net::sse_slots::SseSlot;

use self::stream::{Meta, ResponsesStream, response_object};

/// How long a blocking (neither streamed nor background) request or a cancel waits.
const WAIT: Duration = Duration::from_secs(600);

/// An error as the OpenAI SDKs read it (`{"error": {"message", "type", "param", "code"}}`),
/// with the status that picks their exception class.
#[derive(Debug)]
pub(crate) struct OpenAiError {
    status: StatusCode,
    message: String,
    code: &'static str,
}

impl OpenAiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("No response found with id '{id}'."),
        )
    }

    fn busy() -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "conversation_busy",
            "a response of this conversation is still in progress; retry when it completes",
        )
    }
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        let code = error.code.as_str();
        Self::new(error.code.status(), code, error.message)
    }
}

impl From<keel_store::StoreError> for OpenAiError {
    fn from(error: keel_store::StoreError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let kind = match self.status.as_u16() {
            400 | 413 | 415 => "invalid_request_error",
            401 => "authentication_error",
            404 => "not_found_error",
            409 => "conflict_error",
            429 => "rate_limit_error",
            _ => "server_error",
        };
        let body = json!({"error": {"message": self.message, "type": kind, "param": null, "code": self.code}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

type Result<T> = std::result::Result<T, OpenAiError>;

/// `resp_` + the chat id (32 hex digits) + the input's event position (16 hex digits).
pub(crate) fn response_id(chat: ChatId, position: i64) -> String {
    format!("resp_{}{:016x}", chat.simple(), position)
}

/// The chat and position a response id names.
pub(crate) fn parse_response_id(id: &str) -> Option<(ChatId, i64)> {
    let hex = id.strip_prefix("resp_")?;
    if hex.len() != 48 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let chat = ChatId::parse_str(&hex[..32]).ok()?;
    let position = i64::from_str_radix(&hex[32..], 16).ok()?;
    Some((chat, position))
}

/// `POST /v1/responses`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"model": "demo", "input": "Hello", "stream": false}))]
pub(crate) struct CreateResponse {
    pub model: Option<String>,
    pub input: Option<Value>,
    pub instructions: Option<String>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub background: bool,
}

/// What `input` asks for: a user message and/or answers to client-side calls.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Input {
    pub text: String,
    pub system: Vec<String>,
    pub outputs: Vec<ToolResultInput>,
}

/// Reads `input`: a string, or a list of messages and `function_call_output` items
/// (`function_call` and other output items echoed back are skipped).
pub(crate) fn parse_input(input: &Value) -> std::result::Result<Input, String> {
    let mut out = Input::default();
    let items = match input {
        Value::String(text) => {
            out.text = text.clone();
            return Ok(out);
        }
        Value::Array(items) => items,
        _ => return Err("`input` must be a string or a list of items".to_owned()),
    };
    let mut texts = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str);
        match (kind, item.get("role").and_then(Value::as_str)) {
            (Some("function_call_output"), _) => {
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .ok_or(format!("input[{i}].call_id is required"))?;
                let output = item.get("output").cloned().unwrap_or(Value::Null);
                out.outputs.push(ToolResultInput {
                    tool_call_id: call_id.to_owned(),
                    result: output,
                    is_error: false,
                });
            }
            (None | Some("message"), Some(role)) => {
                let text = content_text(item.get("content")).ok_or(format!(
                    "input[{i}].content must be a string or a list of text parts"
                ))?;
                match role {
                    "user" => texts.push(text),
                    "system" | "developer" => out.system.push(text),
                    // Earlier assistant turns are Keel's own history already.
                    _ => {}
                }
            }
            _ => {}
        }
    }
    out.text = texts.join("\n\n");
    Ok(out)
}

fn content_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

fn client_tool_names(chat: &Chat) -> Vec<String> {
    chat.tools
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn meta(chat: &Chat, id: String, created_at: i64, background: bool) -> Meta {
    Meta {
        id,
        model: chat.model.clone(),
        created_at,
        previous_response_id: None,
        background,
        client_tools: client_tool_names(chat),
    }
}

impl Translator for ResponsesStream {
    fn update(&mut self, reply: &Reply) -> Vec<String> {
        ResponsesStream::update(self, reply)
            .into_iter()
            .map(|event| {
                let kind = event["type"].as_str().unwrap_or_default().to_owned();
                format!("event: {kind}\ndata: {event}\n\n")
            })
            .collect()
    }

    fn finished(&self) -> bool {
        ResponsesStream::finished(self)
    }
}

fn event_stream(
    state: AppState,
    chat: Chat,
    position: i64,
    stream: ResponsesStream,
    slot: SseSlot,
) -> Response {
    let reply = Reply::ending_at_answers_to(client_tool_names(&chat));
    sse::response(state, chat, position, (reply, stream), slot, &[])
}

/// A slot for the event stream a request asks for, taken before anything is stored.
fn slot_for(state: &AppState, caller: &Caller, stream: bool) -> Result<Option<SseSlot>> {
    Ok(if stream {
        Some(stream_slot(state, caller)?)
    } else {
        None
    })
}

async fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<(Chat, i64)> {
    let (chat_id, position) = parse_response_id(id).ok_or_else(|| OpenAiError::not_found(id))?;
    let chat = state
        .owned_chat(caller, chat_id)
        .await
        .map_err(|e| match e.code {
            Code::NotFound => OpenAiError::not_found(id),
            _ => e.into(),
        })?;
    if position > chat.event_seq {
        return Err(OpenAiError::not_found(id));
    }
    Ok((chat, position))
}

/// The reply of the response starting at `position`, as stored now: messages after it up to
/// the next input, the step in progress, and the chat's status.
async fn stored_reply(state: &AppState, chat: &Chat, position: i64) -> Result<Reply> {
    let mut reply = Reply::ending_at_answers_to(client_tool_names(chat));
    for message in state.store.messages_after_seq(chat.id, position).await? {
        let view = serde_json::to_value(MessageView::from(&message)).unwrap_or(Value::Null);
        reply.apply("message", &view);
        if reply.end.is_some() {
            return Ok(reply);
        }
    }
    for entry in state.store.live_parts_after(chat.id, position).await? {
        if let Some((event, data)) = crate::live::from_log(&entry.payload) {
            reply.apply(event, &data);
        }
    }
    let status = chat.status.as_str();
    let last_error = chat
        .last_error
        .as_ref()
        .map(|e| json!({"kind": e.kind.as_str(), "message": e.message}));
    reply.apply(
        "status",
        &json!({"status": status, "last_error": last_error}),
    );
    Ok(reply)
}

/// Follows a reply until it ends (a request that is neither streamed nor in the background).
async fn wait_for_end(state: &AppState, chat: Chat, position: i64) -> Reply {
    let mut reply = Reply::ending_at_answers_to(client_tool_names(&chat));
    let mut events = crate::api::events::follow_chat(state.clone(), chat, position);
    let deadline = tokio::time::Instant::now() + WAIT;
    while reply.end.is_none() {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(item)) => {
                let data: Value = serde_json::from_slice(&item.data).unwrap_or(Value::Null);
                reply.apply(item.event, &data);
            }
            _ => break,
        }
    }
    reply
}

#[utoipa::path(post, path = "/responses", tag = "responses", summary = "OpenAI Responses: create a response (a new chat, or the next turn after previous_response_id)", request_body = CreateResponse, responses((status = 200, description = "Response object, or its events with stream=true", content((Object = "application/json"), (crate::api::dto::SseEvent = "text/event-stream"))), (status = 429, description = "A response of the conversation is still in progress", body = Object)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CreateResponse>,
) -> Result<Response> {
    let input = parse_input(request.input.as_ref().unwrap_or(&Value::Null))
        .map_err(|m| OpenAiError::new(StatusCode::BAD_REQUEST, "invalid_request", m))?;
    // A blocking request waits like a stream does: it holds a stream's slot, not a place
    // among the requests in flight.
    let slot = slot_for(&state, &caller, request.stream || !request.background)?;
    let created_at = chrono::Utc::now().timestamp();
    let (chat, position, previous) = match &request.previous_response_id {
        None => {
            let (chat, position) = start(&state, &caller, headers, &request, &input).await?;
            (chat, position, None)
        }
        Some(previous) => {
            let (chat, _) = owned(&state, &caller, previous).await?;
            let position = continue_chat(&state, &chat, input).await?;
            (
                state.store.get_chat(chat.id).await?,
                position,
                Some(previous.clone()),
            )
        }
    };
    let mut meta = meta(
        &chat,
        response_id(chat.id, position),
        created_at,
        request.background,
    );
    meta.previous_response_id = previous;
    match slot {
        Some(slot) if request.stream => Ok(event_stream(
            state,
            chat,
            position,
            ResponsesStream::new(meta, None),
            slot,
        )),
        Some(slot) => Ok(blocking(state, chat, position, meta, slot)),
        None => {
            let mut object = response_object(&meta, &Reply::default());
            object["status"] = json!("queued");
            Ok(Json(object).into_response())
        }
    }
}

/// The answer of a request that is neither streamed nor in the background: its headers at
/// once (which frees its place among the requests in flight), its body, the Response
/// object, once the reply ended (or [`WAIT`] passed).
fn blocking(state: AppState, chat: Chat, position: i64, meta: Meta, slot: SseSlot) -> Response {
    let body = futures::stream::once(async move {
        let _slot = slot;
        let reply = wait_for_end(&state, chat, position).await;
        serde_json::to_vec(&response_object(&meta, &reply))
    });
    (
        [("content-type", "application/json")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// A new chat: the input's user text, `instructions` as its system prompt, function tools
/// as client-side tools.
async fn start(
    state: &AppState,
    caller: &Caller,
    mut headers: HeaderMap,
    request: &CreateResponse,
    input: &Input,
) -> Result<(Chat, i64)> {
    if !input.outputs.is_empty() {
        return Err(OpenAiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "function_call_output items need previous_response_id",
        ));
    }
    let parts = user_parts(Some(input.text.clone()), None)?;
    let mut tools = Vec::new();
    for (i, tool) in request.tools.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(OpenAiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("tools[{i}]: only function tools are supported"),
            ));
        }
        tools.push(ClientTool {
            name: tool
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            parameters: tool.get("parameters").cloned().unwrap_or(Value::Null),
        });
    }
    let mut system: Vec<String> = request.instructions.iter().cloned().collect();
    system.extend(input.system.iter().cloned());
    let create = CreateChatRequest {
        text: None,
        parts: Some(parts),
        model: request.model.clone(),
        title: None,
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        tools,
        max_steps: None,
    };
    headers.remove("idempotency-key");
    let response = chats::create_chat(
        State(state.clone()),
        caller.clone(),
        headers,
        ApiJson(create),
    )
    .await?;
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| {
            OpenAiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?;
    let id = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .and_then(|id| ChatId::parse_str(&id).ok())
        .ok_or_else(|| {
            OpenAiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "created chat has no id",
            )
        })?;
    let chat = state.store.get_chat(id).await?;
    let first = state
        .store
        .list_messages(id, None)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| {
            OpenAiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "no first message",
            )
        })?;
    Ok((chat, first.event_seq))
}

/// The next turn of an existing chat; returns the position its reply follows.
async fn continue_chat(state: &AppState, chat: &Chat, input: Input) -> Result<i64> {
    if !input.outputs.is_empty() {
        if chat.status != ChatStatus::RequiresAction {
            return Err(OpenAiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "no function call of this conversation is waiting for output",
            ));
        }
        let before = chat.event_seq;
        state
            .store
            .submit_tool_results(chat.id, input.outputs)
            .await?;
        // The response starts at the stored results (its input).
        let after = state.store.messages_after_seq(chat.id, before).await?;
        return Ok(after
            .iter()
            .find(|m| m.role == Role::Tool)
            .map_or(before, |m| m.event_seq));
    }
    let busy = match chat.status {
        ChatStatus::Running | ChatStatus::Interrupting => return Err(OpenAiError::busy()),
        ChatStatus::RequiresAction => Busy::Interrupt,
        _ => Busy::Queue,
    };
    let parts = user_parts(Some(input.text), None)?;
    match state
        .store
        .send_message(chat.id, None, parts, busy, None)
        .await?
    {
        SendOutcome::Started { message_id } => {
            let messages = state
                .store
                .list_messages(chat.id, Some(message_id - 1))
                .await?;
            messages
                .iter()
                .find(|m| m.id == message_id)
                .map(|m| m.event_seq)
                .ok_or_else(|| OpenAiError::not_found("the new message"))
        }
        SendOutcome::Queued { .. } => Err(OpenAiError::busy()),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RetrieveQuery {
    #[serde(default)]
    pub stream: bool,
    /// Stream only the events after this sequence number.
    #[param(schema_with = any_unsigned)]
    pub starting_after: Option<u64>,
}

/// Any non-negative integer a `u64` holds: the `int64` format would cap it at `i64::MAX`.
fn any_unsigned() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Integer)
        .minimum(Some(0))
        .build()
}

#[utoipa::path(get, path = "/responses/{id}", tag = "responses", summary = "OpenAI Responses: retrieve a response, or stream its events after starting_after", params(("id" = String, Path, description = "The response's id"), RetrieveQuery), responses((status = 200, description = "Response object, or its events", content((Object = "application/json"), (crate::api::dto::SseEvent = "text/event-stream")))))]
pub(crate) async fn retrieve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: std::result::Result<Query<RetrieveQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(query) = query
        .map_err(|e| OpenAiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.body_text()))?;
    let (chat, position) = owned(&state, &caller, &id).await?;
    let meta = meta(&chat, id, chat.created_at.timestamp(), true);
    if let Some(slot) = slot_for(&state, &caller, query.stream)? {
        return Ok(event_stream(
            state,
            chat,
            position,
            ResponsesStream::new(meta, query.starting_after),
            slot,
        ));
    }
    let reply = stored_reply(&state, &chat, position).await?;
    Ok(Json(response_object(&meta, &reply)).into_response())
}

#[utoipa::path(post, path = "/responses/{id}/cancel", tag = "responses", summary = "OpenAI Responses: cancel a response (what was said is kept)", params(("id" = String, Path, description = "The response's id")), responses((status = 200, description = "Response object", body = Object)))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response> {
    let (chat, position) = owned(&state, &caller, &id).await?;
    let reply = stored_reply(&state, &chat, position).await?;
    let cancelling = reply.end.is_none();
    if cancelling {
        state.store.interrupt(chat.id).await?;
    }
    // The interrupted step is committed by its run; wait for it so the answer is final.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let chat = loop {
        let chat = state.store.get_chat(chat.id).await?;
        let settled = !matches!(chat.status, ChatStatus::Running | ChatStatus::Interrupting);
        if settled || tokio::time::Instant::now() > deadline {
            break chat;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let meta = meta(&chat, id, chat.created_at.timestamp(), true);
    let mut reply = stored_reply(&state, &chat, position).await?;
    if cancelling && reply.end == Some(End::Done) {
        // Stopped before it said anything: nothing was stored to show the interrupt.
        reply.end = Some(End::Interrupted);
    }
    Ok(Json(response_object(&meta, &reply)).into_response())
}

#[utoipa::path(get, path = "/responses/{id}/input_items", tag = "responses", summary = "OpenAI Responses: the input items that started a response", params(("id" = String, Path, description = "The response's id")), responses((status = 200, description = "List of input items", body = Object)))]
pub(crate) async fn input_items(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response> {
    let (chat, position) = owned(&state, &caller, &id).await?;
    let messages = state
        .store
        .messages_after_seq(chat.id, position - 1)
        .await?;
    let mut data = Vec::new();
    if let Some(input) = messages.first().filter(|m| m.event_seq == position) {
        for (i, part) in input.parts.iter().enumerate() {
            let item_id = format!("in_{}_{i}", id.trim_start_matches("resp_"));
            match &part.kind {
                keel_core::PartKind::Text { text } => data.push(json!({
                    "id": item_id, "type": "message", "role": "user", "status": "completed",
                    "content": [{"type": "input_text", "text": text}]})),
                keel_core::PartKind::ToolResult {
                    tool_call_id,
                    result,
                    ..
                } => data.push(json!({
                    "id": item_id, "type": "function_call_output", "call_id": tool_call_id,
                    "output": match result { Value::String(s) => s.clone(), other => other.to_string() },
                    "status": "completed"})),
                _ => {}
            }
        }
    }
    let first = data
        .first()
        .and_then(|d| d["id"].as_str())
        .map(str::to_owned);
    let last = data
        .last()
        .and_then(|d| d["id"].as_str())
        .map(str::to_owned);
    Ok(Json(json!({"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": false}))
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_ids_name_a_chat_and_a_position() {
        let chat = uuid::Uuid::new_v4();
        let id = response_id(chat, 42);
        assert!(id.starts_with("resp_"));
        assert_eq!(parse_response_id(&id), Some((chat, 42)));
        for bad in ["resp_", "resp_xyz", "nope", &id[..id.len() - 1]] {
            assert_eq!(parse_response_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn input_is_a_string_or_messages_and_function_outputs() {
        assert_eq!(parse_input(&json!("hi")).unwrap().text, "hi");
        let input = parse_input(&json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "42"}
        ]))
        .unwrap();
        assert_eq!(input.text, "ab");
        assert_eq!(input.system, vec!["be brief".to_owned()]);
        assert_eq!(input.outputs[0].tool_call_id, "c");
        assert_eq!(input.outputs[0].result, json!("42"));
        assert!(parse_input(&json!(3)).is_err());
        assert!(parse_input(&json!([{"type": "function_call_output"}])).is_err());
    }
}
