//! AI SDK UI endpoints: what the `ai` package's `DefaultChatTransport` calls when a front
//! end sets `api: "<keel>/api/v1/ai-sdk/chat"`.
//!
//! * `POST /api/v1/ai-sdk/chat` — the transport's body (`id`, `messages`, `trigger`,
//!   `messageId`, plus `model`, `system`, `tools` a front end may add through the transport's
//!   `body`); answers with the UI message stream of the reply.
//! * `GET /api/v1/ai-sdk/chat/{id}/stream` — the reply in progress from its start, `204`
//!   when there is none (`useChat({ resume: true })`).
//! * `GET /api/v1/ai-sdk/chat/{id}/messages` — the history as `UIMessage[]`.
//! * `POST /api/v1/ai-sdk/chat/{id}/stop` — interrupts the reply.
//!
//! The chat id is the client's: the store maps it to a Keel chat per user on first use. A
//! dropped connection never stops a run; only `stop` does.

pub(crate) mod messages;
pub(crate) mod stream;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use keel_store::{Busy, ChatStatus, SendOutcome};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::chats;
use crate::api::compat::reply::Reply;
use crate::api::compat::sse::{self, Translator};
use crate::api::dto::{ClientTool, CreateChatRequest};
use crate::api::error::ApiError;
use crate::api::events::stream_slot;
use crate::api::extract::{ApiJson, Caller, user_parts};
use crate::api::state::AppState;
use crate::net::sse_slots::SseSlot;

use self::stream::UiStream;

/// The header that tells the AI SDK the body is a UI message stream.
const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");

/// The transport's request body. Unknown fields are allowed: front ends add their own.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = AiSdkChatRequest, example = json!({
    "id": "chat-1", "trigger": "submit-message", "messageId": "m1",
    "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hello"}]}]
}))]
pub(crate) struct ChatRequest {
    pub id: String,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    pub trigger: Option<String>,
    /// The transport's `messageId`.
    #[serde(rename = "messageId")]
    #[allow(
        dead_code,
        reason = "part of the transport's body, documented; not needed to act"
    )]
    pub message_id: Option<String>,
    pub model: Option<String>,
    pub system: Option<String>,
    #[serde(default)]
    pub tools: Vec<ClientTool>,
}

impl Translator for UiStream {
    fn update(&mut self, reply: &Reply) -> Vec<String> {
        UiStream::update(self, reply)
            .into_iter()
            .map(|chunk| format!("data: {chunk}\n\n"))
            .collect()
    }

    fn finished(&self) -> bool {
        UiStream::finished(self)
    }

    fn trailer(&self) -> Option<String> {
        Some("data: [DONE]\n\n".to_owned())
    }
}

fn valid_alias(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "`id` must be 1 to 256 characters without control characters",
        ));
    }
    Ok(())
}

async fn aliased(
    state: &AppState,
    caller: &Caller,
    alias: &str,
) -> Result<Option<keel_store::Chat>, ApiError> {
    let Some(id) = state.store.chat_by_alias(&caller.0, alias).await? else {
        return Ok(None);
    };
    match state.owned_chat(caller, id).await {
        Ok(chat) => Ok(Some(chat)),
        Err(error) if error.code == crate::api::error::Code::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// The event position of a chat's message: its reply's events come after it.
async fn position_of(
    state: &AppState,
    chat: keel_store::ChatId,
    message: i64,
) -> Result<i64, ApiError> {
    let messages = state.store.list_messages(chat, Some(message - 1)).await?;
    messages
        .iter()
        .find(|m| m.id == message)
        .map(|m| m.event_seq)
        .ok_or_else(|| ApiError::not_found(format!("message {message} not found")))
}

/// The UI message stream of the reply after `position`, in `slot`. Calls of the chat's
/// client-side tools are announced with their answer when they have one (see
/// [`UiStream::holding`]).
fn ui_stream(
    state: AppState,
    chat: keel_store::Chat,
    position: i64,
    message_id: String,
    slot: SseSlot,
) -> Response {
    let client_tools = chat
        .tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let stream = UiStream::holding(message_id, client_tools);
    sse::response(
        state,
        chat,
        position,
        (Reply::default(), stream),
        slot,
        &[STREAM_HEADER],
    )
}

/// `POST /api/v1/ai-sdk/chat`.
#[utoipa::path(post, path = "/ai-sdk/chat", tag = "ai-sdk", summary = "AI SDK UI: send a message (or tool results, or regenerate) and stream the reply as a UI message stream", request_body = ChatRequest, responses((status = 200, description = "UI message stream (`x-vercel-ai-ui-message-stream: v1`)", content_type = "text/event-stream", body = crate::api::dto::SseEvent)))]
pub(crate) async fn chat(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    valid_alias(&request.id)?;
    // Before anything is stored: a refused stream leaves nothing to resend twice.
    let slot = stream_slot(&state, &caller)?;
    let last = request
        .messages
        .last()
        .ok_or_else(|| ApiError::invalid("`messages` must not be empty"))?;
    let existing = aliased(&state, &caller, &request.id).await?;
    let trigger = request.trigger.as_deref().unwrap_or("submit-message");
    match (trigger, last.get("role").and_then(Value::as_str)) {
        ("submit-message", Some("user")) => {
            let parts = messages::user_message_parts(last).map_err(ApiError::invalid)?;
            let parts = user_parts(None, Some(parts))?;
            let Some(chat) = existing else {
                return start_chat(state, caller, headers, request, parts, slot).await;
            };
            let busy = match chat.status {
                ChatStatus::Running | ChatStatus::Interrupting => {
                    return Err(ApiError::conflict(
                        "a reply is still streaming; stop it or wait for it to finish",
                    ));
                }
                // New text while client-side calls wait answers them with errors.
                ChatStatus::RequiresAction => Busy::Interrupt,
                _ => Busy::Queue,
            };
            let outcome = state
                .store
                .send_message(chat.id, None, parts, busy, None)
                .await?;
            let SendOutcome::Started { message_id } = outcome else {
                return Err(ApiError::conflict(
                    "the chat is busy; the message was queued",
                ));
            };
            let position = position_of(&state, chat.id, message_id).await?;
            // The follower announces the status it is given first: it must be the current one.
            let chat = state.store.get_chat(chat.id).await?;
            Ok(ui_stream(
                state,
                chat,
                position,
                messages::reply_id(message_id),
                slot,
            ))
        }
        ("submit-message", Some("assistant")) => {
            let chat = existing
                .ok_or_else(|| ApiError::not_found(format!("chat {} not found", request.id)))?;
            let pending: Vec<String> = chat
                .pending_tool_calls
                .iter()
                .map(|c| c.tool_call_id.clone())
                .collect();
            let results = messages::tool_results(last, &pending);
            if results.is_empty() {
                return Err(ApiError::conflict(
                    "the last message answers no pending tool call",
                ));
            }
            let position = chat.event_seq;
            let chat = state.store.submit_tool_results(chat.id, results).await?;
            // The front end continues its own assistant message.
            let message_id = last
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Ok(ui_stream(state, chat, position, message_id, slot))
        }
        ("regenerate-message", _) => {
            let chat = existing
                .ok_or_else(|| ApiError::not_found(format!("chat {} not found", request.id)))?;
            let history = state.store.list_messages(chat.id, None).await?;
            let user = history
                .iter()
                .rev()
                .find(|m| m.role == keel_core::Role::User)
                .ok_or_else(|| ApiError::invalid("there is no user message to answer again"))?;
            let user_id = user.id;
            // A new reply beside the old one, to the same user message: the reply keeps
            // the id the front end knows it by.
            let chat = state.store.regenerate(chat.id, user_id).await?;
            let position = position_of(&state, chat.id, user_id).await?;
            Ok(ui_stream(
                state,
                chat,
                position,
                messages::reply_id(user_id),
                slot,
            ))
        }
        (other, _) if other != "submit-message" => Err(ApiError::invalid(format!(
            "unknown trigger `{other}`; expected submit-message or regenerate-message"
        ))),
        _ => Err(ApiError::invalid(
            "the last message must be a user message or an assistant message with tool results",
        )),
    }
}

/// Creates the Keel chat behind a new client chat id, through the API's own validation.
async fn start_chat(
    state: AppState,
    caller: Caller,
    headers: HeaderMap,
    request: ChatRequest,
    parts: Vec<keel_core::Part>,
    slot: SseSlot,
) -> Result<Response, ApiError> {
    let create = CreateChatRequest {
        text: None,
        parts: Some(parts),
        model: request.model,
        title: None,
        system: request.system,
        tools: request.tools,
        max_steps: None,
    };
    let mut headers = headers;
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
        .map_err(|e| ApiError::new(crate::api::error::Code::Internal, e.to_string()))?;
    let id = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .and_then(|id| uuid::Uuid::parse_str(&id).ok())
        .ok_or_else(|| {
            ApiError::new(crate::api::error::Code::Internal, "created chat has no id")
        })?;
    let named = state.store.claim_alias(&caller.0, &request.id, id).await?;
    if named != id {
        // A concurrent first message named another chat first: this one goes.
        state.store.delete_chat(id).await?;
        return Err(ApiError::conflict(
            "another request started this chat at the same time",
        ));
    }
    let chat = state.owned_chat(&caller, id).await?;
    let first = state
        .store
        .list_messages(id, None)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found("the chat's first message"))?;
    Ok(ui_stream(
        state,
        chat,
        first.event_seq,
        messages::reply_id(first.id),
        slot,
    ))
}

/// `GET /api/v1/ai-sdk/chat/{id}/stream`: the reply in progress, replayed from its start.
#[utoipa::path(get, path = "/ai-sdk/chat/{id}/stream", tag = "ai-sdk", summary = "AI SDK UI: resume the reply in progress from its start", params(("id" = String, Path, description = "The client's chat id")), responses((status = 200, description = "UI message stream", content_type = "text/event-stream", body = crate::api::dto::SseEvent), (status = 204, description = "No reply in progress")))]
pub(crate) async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(chat) = aliased(&state, &caller, &id).await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    if !matches!(chat.status, ChatStatus::Running | ChatStatus::Interrupting) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let history = state.store.list_messages(chat.id, None).await?;
    let Some(user) = history
        .iter()
        .rev()
        .find(|m| m.role == keel_core::Role::User)
    else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let (position, message_id) = (user.event_seq, messages::reply_id(user.id));
    let slot = stream_slot(&state, &caller)?;
    Ok(ui_stream(state, chat, position, message_id, slot))
}

/// `GET /api/v1/ai-sdk/chat/{id}/messages`: the history as `UIMessage[]` (empty for a chat
/// id Keel has not seen).
#[utoipa::path(get, path = "/ai-sdk/chat/{id}/messages", tag = "ai-sdk", summary = "AI SDK UI: the history as UIMessage[]", params(("id" = String, Path, description = "The client's chat id")), responses((status = 200, description = "UIMessage[]", body = Vec<Object>)))]
pub(crate) async fn history(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let Some(chat) = aliased(&state, &caller, &id).await? else {
        return Ok(Json(json!([])));
    };
    let history = state.store.list_messages(chat.id, None).await?;
    Ok(Json(Value::Array(messages::ui_messages(&history))))
}

/// `POST /api/v1/ai-sdk/chat/{id}/stop`: interrupts the reply; what was said is kept.
#[utoipa::path(post, path = "/ai-sdk/chat/{id}/stop", tag = "ai-sdk", summary = "AI SDK UI: stop the reply (what was said is kept)", params(("id" = String, Path, description = "The client's chat id")), responses((status = 202, description = "Interrupt requested")))]
pub(crate) async fn stop(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let chat = aliased(&state, &caller, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("chat {id} not found")))?;
    state.store.interrupt(chat.id).await?;
    Ok(StatusCode::ACCEPTED)
}
