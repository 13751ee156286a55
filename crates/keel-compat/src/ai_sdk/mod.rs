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
use axum::body::Body;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use keel_server::api::dto::ClientTool;
use keel_server::api::error::ApiError;
use keel_server::api::extract::{ApiJson, Caller, user_parts};
use keel_server::api::state::AppState;
use keel_server::service::follow::{SseSlot, stream_slot};
use keel_server::service::turns::{self, SendInput};
use keel_server::service::{self, ChatSettings, NewChatInput, Owned};
use keel_store::{ChatStatus, SendOutcome};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::reply::Reply;
use crate::sse::{self, Translator};

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
    /// The transport's `messageId`: the user message an edit replaces
    /// (`sendMessage({ messageId })`), or the reply to regenerate.
    #[serde(rename = "messageId")]
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
) -> Result<Option<Owned>, ApiError> {
    let Some(id) = state.store.chat_by_alias(&caller.0, alias).await? else {
        return Ok(None);
    };
    match service::owned_chat(state, &caller.0, id).await {
        Ok(chat) => Ok(Some(chat)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error.into()),
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
#[utoipa::path(post, path = "/ai-sdk/chat", tag = "ai-sdk", summary = "AI SDK UI: send a message (or an edit, tool results, a regeneration) and stream the reply as a UI message stream", request_body = ChatRequest, responses((status = 200, description = "UI message stream (`x-vercel-ai-ui-message-stream: v1`)", content_type = "text/event-stream", body = keel_server::api::dto::SseEvent), (status = 202, description = "The chat is busy: the message was queued (a UI message stream with one transient `data-queued` part)", content_type = "text/event-stream", body = keel_server::api::dto::SseEvent)))]
pub(crate) async fn chat(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<Response, ApiError> {
    // The route has no default limit (a whole history rides along): this is its limit.
    let limit = state.config.runs.ai_sdk_max_body_bytes;
    let request = request.map(|body| Body::new(http_body_util::Limited::new(body, limit)));
    let ApiJson(request) = ApiJson::<ChatRequest>::from_request(request, &state).await?;
    valid_alias(&request.id)?;
    // Before anything is stored: a refused stream leaves nothing to resend twice.
    let slot = stream_slot(&state, &caller.0)?;
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
                return start_chat(state, caller, request, parts, slot).await;
            };
            let edited = match request.message_id.as_deref() {
                // `sendMessage({ messageId })`: the last message replaces the one of that id.
                Some(id) if last.get("id").and_then(Value::as_str) == Some(id) => {
                    let users = user_ids(&state, &chat).await?;
                    messages::stored_user(&request.messages, request.messages.len() - 1, &users)
                }
                _ => None,
            };
            if let Some(original) = edited {
                let chat = turns::edit_message(&state, &chat, original, parts).await?;
                let input = chat.leaf_id;
                return reply_to(state, chat.id, input, slot).await;
            }
            // New text while client-side calls wait answers them with errors.
            let busy = turns::busy_for_new_text(chat.status);
            let input = SendInput {
                chat: chat.id,
                owner: None,
                parts,
                busy,
                idempotency_key: None,
            };
            let outcome = turns::send_message(&state, input).await?;
            match outcome {
                SendOutcome::Started { message_id } => {
                    reply_to(state, chat.id, message_id, slot).await
                }
                SendOutcome::Queued { queue_id } => Ok(queued(queue_id)),
            }
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
            let chat = turns::submit_tool_results(&state, &chat, results).await?;
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
            let users = user_ids(&state, &chat).await?;
            // The reply named by `messageId` (or, as the body ends with the user message it
            // answers, that message) is answered again; without one, the last reply.
            let user = request
                .message_id
                .as_deref()
                .and_then(|id| messages::reply_of(id, &users))
                .or_else(|| {
                    let index = request
                        .messages
                        .iter()
                        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
                    messages::stored_user(&request.messages, index, &users)
                })
                .ok_or_else(|| {
                    ApiError::invalid("no stored user message matches the reply to regenerate")
                })?;
            // A new reply beside the old one, to the same user message: the reply keeps
            // the id the front end knows it by.
            let chat = turns::regenerate(&state, &chat, user).await?;
            let position = position_of(&state, chat.id, user).await?;
            Ok(ui_stream(
                state,
                chat,
                position,
                messages::reply_id(user),
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

/// The ids of the user messages of a chat's current branch, in order.
async fn user_ids(state: &AppState, chat: &keel_store::Chat) -> Result<Vec<i64>, ApiError> {
    Ok(state
        .store
        .list_messages(chat.id, None)
        .await?
        .iter()
        .filter(|m| m.role == keel_core::Role::User)
        .map(|m| m.id)
        .collect())
}

/// The stream of the reply to user message `message`, with the chat as it is now: the
/// follower announces the status it is given first, so it must be the current one.
async fn reply_to(
    state: AppState,
    chat: keel_store::ChatId,
    message: i64,
    slot: SseSlot,
) -> Result<Response, ApiError> {
    let position = position_of(&state, chat, message).await?;
    let chat = state.store.get_chat(chat).await?;
    Ok(ui_stream(
        state,
        chat,
        position,
        messages::reply_id(message),
        slot,
    ))
}

/// A message queued behind the reply in progress, answered as the native API answers it:
/// `202`, naming the queue entry (header `x-keel-queue-id`, and a transient `data-queued`
/// part a page receives in `onData`), so a client does not send it again. Its reply is
/// followed through `GET .../stream` once it starts.
fn queued(queue_id: keel_store::QueueId) -> Response {
    let part = json!({"type": "data-queued", "data": {"queueId": queue_id.to_string()}, "transient": true});
    let body = format!("data: {part}\n\ndata: [DONE]\n\n");
    let mut response = (StatusCode::ACCEPTED, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(STREAM_HEADER.0, HeaderValue::from_static(STREAM_HEADER.1));
    if let Ok(value) = HeaderValue::from_str(&queue_id.to_string()) {
        headers.insert("x-keel-queue-id", value);
    }
    response
}

/// Creates the Keel chat behind a new client chat id, through the API's own validation.
async fn start_chat(
    state: AppState,
    caller: Caller,
    request: ChatRequest,
    parts: Vec<keel_core::Part>,
    slot: SseSlot,
) -> Result<Response, ApiError> {
    let input = NewChatInput {
        owner: caller.0.clone(),
        settings: ChatSettings {
            model: request.model,
            system: request.system,
            tools: request.tools,
            ..ChatSettings::default()
        },
        history: Vec::new(),
        parts,
        idempotency_key: None,
    };
    let id = service::chats::create_aliased_chat(&state, input, &request.id)
        .await?
        .id;
    let first = state
        .store
        .list_messages(id, None)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found("the chat's first message"))?;
    reply_to(state, id, first.id, slot).await
}

/// `GET /api/v1/ai-sdk/chat/{id}/stream`: the reply in progress, replayed from its start.
#[utoipa::path(get, path = "/ai-sdk/chat/{id}/stream", tag = "ai-sdk", summary = "AI SDK UI: resume the reply in progress from its start", params(("id" = String, Path, description = "The client's chat id")), responses((status = 200, description = "UI message stream", content_type = "text/event-stream", body = keel_server::api::dto::SseEvent), (status = 204, description = "No reply in progress")))]
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
    let slot = stream_slot(&state, &caller.0)?;
    Ok(ui_stream(
        state,
        chat.into_inner(),
        position,
        message_id,
        slot,
    ))
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
    turns::interrupt(&state, &chat).await?;
    Ok(StatusCode::ACCEPTED)
}
