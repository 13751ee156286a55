//! OpenAI Responses-compatible endpoints under `/v1`, for the official OpenAI SDKs with
//! `base_url = "<keel>/v1"` and a Keel token as the API key.
//!
//! * `POST /v1/responses` — without `previous_response_id`, a new chat holding the whole
//!   conversation of `input` ([`input`]); with it, the next turn after that response (a user
//!   message, or `function_call_output` items answering its client-side calls), a fork when
//!   that response is not the newest ([`ids`]); `stream`, `background`; `store` is always on
//!   (Keel keeps everything).
//! * `GET /v1/responses/{id}` — the response; with `stream=true` its events, after
//!   `starting_after` when given.
//! * `POST /v1/responses/{id}/cancel` — interrupts it.
//! * `GET /v1/responses/{id}/input_items` — what started it.
//!
//! A response is one run of one chat: its id names the chat and the input message that
//! started it, so nothing is stored besides the chat itself.
//!
//! Longer than most files: the handlers of the door's five routes, each short, and the
//! reads of stored responses they share; `input.rs` and `stream.rs` hold the rest.

mod ids;
mod input;
pub(crate) mod stream;

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use keel_core::{PartKind, Role};
use keel_server::api::dto::{ClientTool, MessageView};
use keel_server::api::error::ApiError;
use keel_server::api::extract::{ApiJson, Caller, user_parts};
use keel_server::api::state::AppState;
use keel_server::service::follow::{SseSlot, follow_spawned, stream_slot};
use keel_server::service::settings::{self, ChatChanges};
use keel_server::service::turns::{self, SendInput};
use keel_server::service::{self, ChatSettings, NewChatInput, Owned, ServiceError};
use keel_store::{
    Chat, ChatId, ChatStatus, NewMessage, SendOutcome, StoredMessage, ToolResultInput,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::reply::{End, Reply};
use crate::sse::{self, Translator};

use self::ids::{Anchor, parse_response_id, response_id};
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

impl From<ServiceError> for OpenAiError {
    fn from(error: ServiceError) -> Self {
        ApiError::from(error).into()
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
        // A used-up budget is not worth retrying within the second.
        if self.status == StatusCode::TOO_MANY_REQUESTS && self.code != "budget_exceeded" {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

type Result<T> = std::result::Result<T, OpenAiError>;

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
        Some(stream_slot(state, &caller.0)?)
    } else {
        None
    })
}

/// A response found by its id: its chat, its input message and, when that message is on
/// the chat's current branch, the input's event position there.
struct Located {
    chat: Owned,
    input: StoredMessage,
    position: Option<i64>,
}

fn bad_request(message: impl Into<String>) -> OpenAiError {
    OpenAiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
}

async fn locate(state: &AppState, caller: &Caller, id: &str) -> Result<Located> {
    let (chat_id, anchor) = parse_response_id(id).ok_or_else(|| OpenAiError::not_found(id))?;
    let chat = service::owned_chat(state, &caller.0, chat_id)
        .await
        .map_err(|e| {
            if e.is_not_found() {
                OpenAiError::not_found(id)
            } else {
                e.into()
            }
        })?;
    let message = match anchor {
        Anchor::Position(position) => {
            let found = state
                .store
                .messages_after_seq(chat.id, position - 1)
                .await?
                .into_iter()
                .next()
                .filter(|m| m.event_seq == position);
            let input = found.ok_or_else(|| OpenAiError::not_found(id))?;
            return Ok(Located {
                chat,
                input,
                position: Some(position),
            });
        }
        Anchor::Message(message) => message,
    };
    if let Some(input) = state
        .store
        .list_messages(chat.id, Some(message - 1))
        .await?
        .into_iter()
        .next()
        .filter(|m| m.id == message)
    {
        let position = Some(input.event_seq);
        return Ok(Located {
            chat,
            input,
            position,
        });
    }
    // On a branch that is not current (or nowhere: then not found).
    let branch = state
        .store
        .branch_messages(chat.id, message, Some(message - 1), Some(1))
        .await
        .map_err(|_| OpenAiError::not_found(id))?;
    let input = branch
        .into_iter()
        .next()
        .filter(|m| m.id == message)
        .ok_or_else(|| OpenAiError::not_found(id))?;
    Ok(Located {
        chat,
        input,
        position: None,
    })
}

/// The messages after a response's input on its branch, in order.
async fn messages_after(state: &AppState, located: &Located) -> Result<Vec<StoredMessage>> {
    Ok(match located.position {
        Some(position) => {
            state
                .store
                .messages_after_seq(located.chat.id, position)
                .await?
        }
        None => {
            let id = located.input.id;
            state
                .store
                .branch_messages(located.chat.id, id, Some(id), None)
                .await?
        }
    })
}

/// The reply of a response as stored now: messages after its input up to the next input,
/// and on the current branch the step in progress and the chat's status.
async fn stored_reply(state: &AppState, located: &Located) -> Result<Reply> {
    let chat = &located.chat;
    let mut reply = Reply::ending_at_answers_to(client_tool_names(chat));
    for message in messages_after(state, located).await? {
        let view = serde_json::to_value(MessageView::from(&message)).unwrap_or(Value::Null);
        reply.apply("message", &view);
        if reply.end.is_some() {
            return Ok(reply);
        }
    }
    let Some(position) = located.position else {
        // A branch nothing runs on: its reply is as it was left.
        reply.left();
        return Ok(reply);
    };
    for entry in state.store.live_parts_after(chat.id, position).await? {
        if let Some((event, data)) = keel_server::live::from_log(&entry.payload) {
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
    let mut events = follow_spawned(state.clone(), chat, position);
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

/// What a request for a new turn did: started a response, or queued the message.
enum Turned {
    Started(Box<Started>),
    Queued(keel_store::QueueId),
}

/// Where a new response starts: the chat, its input message and that input's position.
struct Started {
    chat: Chat,
    message: i64,
    position: i64,
}

#[utoipa::path(post, path = "/responses", tag = "responses", summary = "OpenAI Responses: create a response (a new chat from the whole conversation, or the next turn after previous_response_id, forking from an older one)", request_body = CreateResponse, responses((status = 200, description = "Response object, or its events with stream=true", content((Object = "application/json"), (keel_server::api::dto::SseEvent = "text/event-stream"))), (status = 429, description = "A response of the conversation is still in progress", body = Object)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateResponse>,
) -> Result<Response> {
    let conversation =
        input::parse(request.input.as_ref().unwrap_or(&Value::Null)).map_err(bad_request)?;
    let mut system: Vec<String> = request.instructions.iter().cloned().collect();
    system.extend(conversation.system.iter().cloned());
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    // A blocking request waits like a stream does: it holds a stream's slot, not a place
    // among the requests in flight. Taken before anything is stored.
    let slot = slot_for(&state, &caller, request.stream || !request.background)?;
    let created_at = chrono::Utc::now().timestamp();
    let turned = match &request.previous_response_id {
        None => Turned::Started(Box::new(
            start(&state, &caller, &request, conversation, system).await?,
        )),
        Some(previous) => {
            let turn = input::single_turn(conversation).map_err(bad_request)?;
            let located = locate(&state, &caller, previous).await?;
            next_turn(&state, located, turn, system).await?
        }
    };
    let started = match turned {
        Turned::Started(started) => *started,
        Turned::Queued(queue_id) => return Ok(queued(&request, queue_id, created_at)),
    };
    let Started {
        chat,
        message,
        position,
    } = started;
    let meta = Meta {
        previous_response_id: request.previous_response_id.clone(),
        ..meta(
            &chat,
            response_id(chat.id, message),
            created_at,
            request.background,
        )
    };
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

/// The request's function tools as client-side tools.
fn client_tools(tools: &[Value]) -> Result<Vec<ClientTool>> {
    let mut out = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad_request(format!(
                "tools[{i}]: only function tools are supported"
            )));
        }
        let text = |key: &str| {
            tool.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        out.push(ClientTool {
            name: text("name"),
            description: text("description"),
            parameters: tool.get("parameters").cloned().unwrap_or(Value::Null),
        });
    }
    Ok(out)
}

/// A new chat holding the whole conversation of the input: its earlier turns as history,
/// its last user message (or function outputs) as what the first run answers; the
/// instructions and leading system messages as its system prompt, function tools as
/// client-side tools. One transaction: a refusal stores nothing.
async fn start(
    state: &AppState,
    caller: &Caller,
    request: &CreateResponse,
    mut conversation: input::Conversation,
    system: Option<String>,
) -> Result<Started> {
    input::pair_calls(&mut conversation).map_err(bad_request)?;
    let tools = client_tools(&request.tools)?;
    let mut turns = conversation.turns;
    let parts = match turns.last() {
        Some(turn) if turn.role == Role::User => turns.pop().map(|t| t.parts).unwrap_or_default(),
        _ => Vec::new(),
    };
    let parts = if parts.is_empty() {
        parts
    } else {
        user_parts(None, Some(parts))?
    };
    let mut history = Vec::with_capacity(turns.len());
    for turn in turns {
        let parts = if turn.role == Role::User {
            user_parts(None, Some(turn.parts)).map_err(|e| {
                bad_request(format!(
                    "input[{}] (user message): {}",
                    turn.first, e.message
                ))
            })?
        } else {
            turn.parts
        };
        history.push(NewMessage::new(turn.role, parts));
    }
    let input = NewChatInput {
        owner: caller.0.clone(),
        settings: ChatSettings {
            model: request.model.clone(),
            system,
            tools,
            ..ChatSettings::default()
        },
        history,
        parts,
        idempotency_key: None,
    };
    let chat = service::create_chat(state, input).await?;
    #[cfg(debug_assertions)]
    keel_server::debug_pause::debug_settle(
        "KEEL_DEBUG_START_SETTLE",
        state.store.as_ref(),
        chat.id,
    )
    .await;
    // The first run answers the last message the chat was created with: its leaf as
    // created. Not the chat's newest message read now, which may already be the run's reply.
    let input = input_at(state, chat.id, chat.leaf_id).await?;
    Ok(Started {
        chat,
        message: input.id,
        position: input.event_seq,
    })
}

/// The turn after a response: the next one of its chat when it is the newest of its
/// branch, else a fork from it (the user message becomes a sibling of the input that
/// followed it). Per-request instructions become the chat's system prompt first.
async fn next_turn(
    state: &AppState,
    located: Located,
    turn: input::Turn,
    system: Option<String>,
) -> Result<Turned> {
    let chat = &located.chat;
    if turn.role == Role::User {
        user_parts(None, Some(turn.parts.clone()))?;
    }
    if matches!(chat.status, ChatStatus::Running | ChatStatus::Interrupting) {
        // Nothing is stored: the client retries the same request when the reply is done.
        return Err(OpenAiError::busy());
    }
    let after = messages_after(state, &located).await?;
    let next = ids::next_input(&after, &client_tool_names(chat)).cloned();
    let plan = next_move(
        turn.role,
        located.position.is_some(),
        next.as_ref().map(|m| m.role),
    )?;
    if system.is_some() {
        let changes = ChatChanges {
            system,
            ..ChatChanges::default()
        };
        settings::update_chat(state, chat, changes).await?;
    }
    let chat_id = chat.id;
    match (plan, next) {
        (Move::Fork, Some(next)) => {
            let chat = turns::edit_message(state, chat, next.id, turn.parts).await?;
            let input = input_at(state, chat_id, chat.leaf_id).await?;
            Ok(Turned::Started(Box::new(
                started(state, chat_id, &input).await?,
            )))
        }
        (Move::SwitchThenContinue, _) => {
            turns::switch_branch(state, chat, located.input.id).await?;
            let chat = service::owned_chat(state, &chat.owner, chat_id).await?;
            continue_chat(state, &chat, turn).await
        }
        _ => continue_chat(state, chat, turn).await,
    }
}

/// What a turn after a response does to the chat's message tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// The response is the newest of the current branch: the turn continues it.
    Continue,
    /// The newest of another branch: that branch becomes current, then the turn continues it.
    SwitchThenContinue,
    /// An older response: the turn's user message becomes a sibling of the next input.
    Fork,
}

/// Decides [`Move`] from the turn's kind, whether the response is on the current branch
/// and the input that followed it, if any.
fn next_move(turn: Role, current: bool, next: Option<Role>) -> Result<Move> {
    match (next, turn) {
        (None, _) if current => Ok(Move::Continue),
        (None, _) => Ok(Move::SwitchThenContinue),
        (Some(Role::User), Role::User) => Ok(Move::Fork),
        (Some(_), Role::Tool) => Err(bad_request(
            "function_call_output items answer the newest response of a conversation; the calls of this older response were answered already",
        )),
        (Some(_), _) => Err(bad_request(
            "this older response was followed by function outputs, not by a user message: Keel forks a conversation only at a user message",
        )),
    }
}

/// A message of the current branch by its id.
async fn input_at(state: &AppState, chat: ChatId, message: i64) -> Result<StoredMessage> {
    state
        .store
        .list_messages(chat, Some(message - 1))
        .await?
        .into_iter()
        .find(|m| m.id == message)
        .ok_or_else(|| OpenAiError::not_found("the new input"))
}

/// The response that `input` starts, with the chat as it is now: the follower announces
/// the status it is given first, so it must be the current one.
async fn started(state: &AppState, chat: ChatId, input: &StoredMessage) -> Result<Started> {
    Ok(Started {
        chat: state.store.get_chat(chat).await?,
        message: input.id,
        position: input.event_seq,
    })
}

/// The next turn of a chat's current branch.
async fn continue_chat(state: &AppState, chat: &Owned, turn: input::Turn) -> Result<Turned> {
    if turn.role == Role::Tool {
        if chat.status != ChatStatus::RequiresAction {
            return Err(bad_request(
                "no function call of this conversation is waiting for output",
            ));
        }
        let results = turn
            .parts
            .into_iter()
            .filter_map(|part| match part.kind {
                PartKind::ToolResult {
                    tool_call_id,
                    result,
                    ..
                } => Some(ToolResultInput {
                    tool_call_id,
                    result,
                    is_error: false,
                }),
                _ => None,
            })
            .collect();
        let before = chat.event_seq;
        turns::submit_tool_results(state, chat, results).await?;
        // The response starts at the stored results (its input).
        let after = state.store.messages_after_seq(chat.id, before).await?;
        let input = after
            .iter()
            .find(|m| m.role == Role::Tool)
            .ok_or_else(|| OpenAiError::not_found("the stored function outputs"))?;
        return Ok(Turned::Started(Box::new(
            started(state, chat.id, input).await?,
        )));
    }
    let busy = turns::busy_for_new_text(chat.status);
    let parts = user_parts(None, Some(turn.parts))?;
    let input = SendInput {
        chat: chat.id,
        owner: None,
        parts,
        busy,
        idempotency_key: None,
    };
    match turns::send_message(state, input).await? {
        SendOutcome::Started { message_id } => {
            let input = input_at(state, chat.id, message_id).await?;
            Ok(Turned::Started(Box::new(
                started(state, chat.id, &input).await?,
            )))
        }
        SendOutcome::Queued { queue_id } => Ok(Turned::Queued(queue_id)),
    }
}

/// A message queued behind others (a failed run left its queue): `202` with a response
/// object in status `queued` naming the queue entry, as the native API answers `202` with
/// its `queue_id`, so that a client does not send it again. It has no response id yet: its
/// reply is read through the chat (`GET /api/v1/chats/{id}`).
fn queued(request: &CreateResponse, queue_id: keel_store::QueueId, created_at: i64) -> Response {
    let body = json!({
        "id": null, "object": "response", "created_at": created_at, "status": "queued",
        "model": request.model, "output": [], "output_text": "", "error": null,
        "previous_response_id": request.previous_response_id,
        "metadata": {"queue_id": queue_id.to_string()},
    });
    (StatusCode::ACCEPTED, Json(body)).into_response()
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

#[utoipa::path(get, path = "/responses/{id}", tag = "responses", summary = "OpenAI Responses: retrieve a response, or stream its events after starting_after", params(("id" = String, Path, description = "The response's id"), RetrieveQuery), responses((status = 200, description = "Response object, or its events", content((Object = "application/json"), (keel_server::api::dto::SseEvent = "text/event-stream")))))]
pub(crate) async fn retrieve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: std::result::Result<Query<RetrieveQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(query) = query
        .map_err(|e| OpenAiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.body_text()))?;
    let located = locate(&state, &caller, &id).await?;
    let meta = meta(&located.chat, id, located.chat.created_at.timestamp(), true);
    if let Some(slot) = slot_for(&state, &caller, query.stream)? {
        let Some(position) = located.position else {
            return Err(OpenAiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this response is on a branch that is not current: retrieve it without stream",
            ));
        };
        return Ok(event_stream(
            state,
            located.chat.into_inner(),
            position,
            ResponsesStream::new(meta, query.starting_after),
            slot,
        ));
    }
    let reply = stored_reply(&state, &located).await?;
    Ok(Json(response_object(&meta, &reply)).into_response())
}

#[utoipa::path(post, path = "/responses/{id}/cancel", tag = "responses", summary = "OpenAI Responses: cancel a response (what was said is kept)", params(("id" = String, Path, description = "The response's id")), responses((status = 200, description = "Response object", body = Object)))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response> {
    let mut located = locate(&state, &caller, &id).await?;
    let reply = stored_reply(&state, &located).await?;
    let cancelling = reply.end.is_none();
    let chat_id = located.chat.id;
    if cancelling {
        turns::interrupt(&state, &located.chat).await?;
    }
    // The interrupted step is committed by its run; wait for it so the answer is final.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let chat = loop {
        let chat = service::owned_chat(&state, &caller.0, chat_id).await?;
        let settled = !matches!(chat.status, ChatStatus::Running | ChatStatus::Interrupting);
        if settled || tokio::time::Instant::now() > deadline {
            break chat;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let meta = meta(&chat, id, chat.created_at.timestamp(), true);
    located.chat = chat;
    let mut reply = stored_reply(&state, &located).await?;
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
    let input = locate(&state, &caller, &id).await?.input;
    let mut data = Vec::new();
    {
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
    fn a_turn_after_a_response_continues_switches_or_forks() {
        let user = Some(Role::User);
        assert_eq!(next_move(Role::User, true, None).unwrap(), Move::Continue);
        assert_eq!(next_move(Role::Tool, true, None).unwrap(), Move::Continue);
        assert_eq!(
            next_move(Role::User, false, None).unwrap(),
            Move::SwitchThenContinue
        );
        assert_eq!(next_move(Role::User, true, user).unwrap(), Move::Fork);
        assert_eq!(next_move(Role::User, false, user).unwrap(), Move::Fork);
        // Function outputs answer only the newest response; a fork starts at a user message.
        assert!(next_move(Role::Tool, true, user).is_err());
        assert!(next_move(Role::User, true, Some(Role::Tool)).is_err());
    }
}
