//! Chats and their messages: the API's transitions.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use keel_store::SendOutcome;

use crate::api::doc::IdempotencyKey;
use crate::api::dto::{
    ChatList, ChatView, ContentInput, CreateChatRequest, ListChatsQuery, ListMessagesQuery,
    MessageList, MessageView, SendMessageRequest, Sent, ToolResultsRequest, UpdateChatRequest,
};
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, Caller, parse_id, user_parts};
use crate::api::state::AppState;
use crate::api::usage::UsageView;
use crate::service::reads;
use crate::service::settings::{self, ChatChanges};
use crate::service::turns::{self, SendInput};
use crate::service::{self, ChatSettings, NewChatInput};

#[utoipa::path(post, path = "/chats", tag = "chats", summary = "Create a chat; its first message starts a run", params(IdempotencyKey), request_body = CreateChatRequest, responses((status = 201, description = "Created", body = ChatView)))]
pub(super) async fn create_chat(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CreateChatRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers, &caller)?;
    let parts = user_parts(request.text, request.parts)?;
    let input = NewChatInput {
        owner: caller.0,
        settings: ChatSettings {
            model: request.model,
            title: request.title,
            system: request.system,
            tools: request.tools,
            max_steps: request.max_steps,
        },
        history: Vec::new(),
        parts,
        idempotency_key: key,
    };
    let chat = service::create_chat(&state, input).await?;
    Ok((StatusCode::CREATED, Json(ChatView::from(&chat))).into_response())
}

/// The request's `Idempotency-Key`, checked and scoped to the caller.
fn idempotency_key(headers: &HeaderMap, caller: &Caller) -> Result<Option<String>, ApiError> {
    let raw = headers.get("idempotency-key").map(|value| value.as_bytes());
    Ok(service::chats::idempotency_key(&caller.0, raw)?)
}

#[utoipa::path(get, path = "/chats", tag = "chats", summary = "List chats, newest first", params(ListChatsQuery), responses((status = 200, description = "Chats", body = ChatList)))]
pub(super) async fn list_chats(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ListChatsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ChatList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let before = query.before.as_deref();
    let chats = reads::list_chats(&state, &caller.0, before, query.limit).await?;
    let chats = chats.iter().map(ChatView::from).collect();
    Ok(Json(ChatList { chats }))
}

#[utoipa::path(get, path = "/chats/{id}", tag = "chats", summary = "Get a chat", params(("id" = String, Path, description = "The chat's id")), responses((status = 200, description = "Chat", body = ChatView)))]
pub(super) async fn get_chat(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ChatView>, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let usage = reads::chat_usage(&state, &chat).await?;
    Ok(Json(ChatView {
        usage: Some(UsageView::from(&usage)),
        ..ChatView::from(&*chat)
    }))
}

/// Renames a chat and/or switches its model; the next model call of the chat uses the new
/// model. Every field is checked before anything is written.
#[utoipa::path(patch, path = "/chats/{id}", tag = "chats", summary = "Rename a chat or switch its model (the next model call uses it)", params(("id" = String, Path, description = "The chat's id")), request_body = UpdateChatRequest, responses((status = 200, description = "Chat", body = ChatView)))]
pub(super) async fn update_chat(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<UpdateChatRequest>,
) -> Result<Json<ChatView>, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let changes = ChatChanges {
        title: request.title,
        model: request.model,
        system: None,
    };
    let chat = settings::update_chat(&state, &chat, changes).await?;
    Ok(Json(ChatView::from(&chat)))
}

#[utoipa::path(delete, path = "/chats/{id}", tag = "chats", summary = "Delete a chat (an active run is stopped first)", params(("id" = String, Path, description = "The chat's id")), responses((status = 204, description = "Deleted")))]
pub(super) async fn delete_chat(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    settings::delete_chat(&state, chat).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_archived(
    state: AppState,
    caller: Caller,
    id: String,
    archived: bool,
) -> Result<Json<ChatView>, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let chat = settings::set_archived(&state, &chat, archived).await?;
    Ok(Json(ChatView::from(&chat)))
}

#[utoipa::path(post, path = "/chats/{id}/archive", tag = "chats", summary = "Archive", params(("id" = String, Path, description = "The chat's id")), responses((status = 200, description = "Chat", body = ChatView)))]
pub(super) async fn archive(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ChatView>, ApiError> {
    set_archived(state, caller, id, true).await
}

#[utoipa::path(post, path = "/chats/{id}/unarchive", tag = "chats", summary = "Unarchive", params(("id" = String, Path, description = "The chat's id")), responses((status = 200, description = "Chat", body = ChatView)))]
pub(super) async fn unarchive(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ChatView>, ApiError> {
    set_archived(state, caller, id, false).await
}

#[utoipa::path(get, path = "/chats/{id}/messages", tag = "chats", summary = "Committed messages of the current branch (or of `branch`) in order", params(("id" = String, Path, description = "The chat's id"), ListMessagesQuery), responses((status = 200, description = "Messages", body = MessageList)))]
pub(super) async fn list_messages(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<ListMessagesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<MessageList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let page = reads::messages_page(query.after, query.limit, query.branch)?;
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let messages = reads::messages(&state, &chat, page).await?;
    let messages = messages.iter().map(MessageView::from).collect();
    Ok(Json(MessageList { messages }))
}

#[utoipa::path(post, path = "/chats/{id}/messages", tag = "chats", summary = "Send a message", params(("id" = String, Path, description = "The chat's id"), IdempotencyKey), request_body = SendMessageRequest, responses((status = 202, description = "Started or queued", body = Sent)))]
pub(super) async fn send_message(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<SendMessageRequest>,
) -> Result<Response, ApiError> {
    let chat = parse_id(&id, "chat")?;
    let parts = user_parts(request.text, request.parts)?;
    let key = idempotency_key(&headers, &caller)?;
    let input = SendInput {
        chat,
        owner: Some(&caller.0),
        parts,
        busy: request.busy,
        idempotency_key: key.as_deref(),
    };
    let outcome = turns::send_message(&state, input).await?;
    let body = match outcome {
        SendOutcome::Started { message_id } => Sent {
            message_id: Some(message_id),
            queue_id: None,
        },
        SendOutcome::Queued { queue_id } => Sent {
            message_id: None,
            queue_id: Some(queue_id.to_string()),
        },
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

#[utoipa::path(put, path = "/chats/{id}/messages/{message_id}", tag = "chats", summary = "Edit a user message: the new version is a branch beside the old one, and a run starts on it", params(("id" = String, Path, description = "The chat's id"), ("message_id" = i64, Path, description = "The message's id")), request_body = ContentInput, responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn edit_message(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, message_id)): Path<(String, String)>,
    ApiJson(request): ApiJson<ContentInput>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let message = turns::message_id(&message_id)?;
    let parts = user_parts(request.text, request.parts)?;
    let chat = turns::edit_message(&state, &chat, message, parts).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}

#[utoipa::path(post, path = "/chats/{id}/interrupt", tag = "chats", summary = "Interrupt the active run (idempotent)", params(("id" = String, Path, description = "The chat's id")), responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn interrupt(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let chat = turns::interrupt(&state, &chat).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}

/// Asks for a compaction of an idle chat; the worker summarises it and it returns to
/// `waiting`.
#[utoipa::path(post, path = "/chats/{id}/compact", tag = "chats", summary = "Summarise older history now (the chat must be idle)", params(("id" = String, Path, description = "The chat's id")), responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn compact(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let chat = turns::compact(&state, &chat).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}

#[utoipa::path(post, path = "/chats/{id}/tool-results", tag = "chats", summary = "Answer pending client-side tool calls", params(("id" = String, Path, description = "The chat's id")), request_body = ToolResultsRequest, responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn tool_results(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<ToolResultsRequest>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let chat = turns::submit_tool_results(&state, &chat, request.results).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}

#[utoipa::path(delete, path = "/chats/{id}/queue/{queue_id}", tag = "chats", summary = "Delete a queued message", params(("id" = String, Path, description = "The chat's id"), ("queue_id" = String, Path, description = "The queued message's id")), responses((status = 204, description = "Deleted")))]
pub(super) async fn delete_queued(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, queue_id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let queued = parse_id(&queue_id, "queued message")?;
    turns::delete_queued(&state, &chat, queued).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/chats/{id}/queue/{queue_id}/promote", tag = "chats", summary = "Make a queued message next", params(("id" = String, Path, description = "The chat's id"), ("queue_id" = String, Path, description = "The queued message's id")), responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn promote_queued(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, queue_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let queued = parse_id(&queue_id, "queued message")?;
    let chat = turns::promote_queued(&state, &chat, queued).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}
