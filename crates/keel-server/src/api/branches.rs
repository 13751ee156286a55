//! A chat's branches: switching the current one and regenerating a reply. Edits, which
//! also make a branch, stay with the other message routes in `chats`; listing a branch is
//! `GET .../messages?branch=`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::api::dto::{ChatView, SwitchBranchRequest};
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, Caller, parse_id};
use crate::api::state::AppState;
use crate::service::{self, turns};

/// Makes the branch through a message (to its newest message) the chat's current one. Open
/// event streams get a `branch` event and the whole branch after it.
#[utoipa::path(post, path = "/chats/{id}/branch", tag = "chats", summary = "Make the branch through a message current (the chat must be idle)", params(("id" = String, Path, description = "The chat's id")), request_body = SwitchBranchRequest, responses((status = 200, description = "Chat", body = ChatView)))]
pub(super) async fn switch_branch(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<SwitchBranchRequest>,
) -> Result<Json<ChatView>, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let chat = turns::switch_branch(&state, &chat, request.message_id).await?;
    Ok(Json(ChatView::from(&chat)))
}

/// Writes a new reply beside a reply (named by the reply or by the user message before
/// it), as a new run on the branch that ends at that user message.
#[utoipa::path(post, path = "/chats/{id}/messages/{message_id}/regenerate", tag = "chats", summary = "Write a new version of a reply (the chat must be idle)", params(("id" = String, Path, description = "The chat's id"), ("message_id" = i64, Path, description = "An assistant reply, or the user message it answers")), responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn regenerate(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, message_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let message = turns::message_id(&message_id)?;
    let chat = turns::regenerate(&state, &chat, message).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}
