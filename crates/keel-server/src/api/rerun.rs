//! Running a chat's last turn again without a new message: continuing a reply the user
//! stopped, and retrying a run that failed. Both are store transitions (`continue reply`,
//! `retry run`); the worker that claims the chat sees what to do from its history.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::api::dto::ChatView;
use crate::api::error::ApiError;
use crate::api::extract::{Caller, parse_id};
use crate::api::state::AppState;
use crate::service::{self, turns};

/// Has the model carry on the reply the user stopped; the continuation is stored as the
/// next assistant message, holding only the new text.
#[utoipa::path(post, path = "/chats/{id}/continue", tag = "chats", summary = "Continue the reply the user stopped (the chat must be idle and end in it)", params(("id" = String, Path, description = "The chat's id")), responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn continue_reply(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let chat = turns::continue_reply(&state, &chat).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}

/// Runs the failed turn again, as the history stands.
#[utoipa::path(post, path = "/chats/{id}/retry", tag = "chats", summary = "Run a failed turn again (the chat must be in error)", params(("id" = String, Path, description = "The chat's id")), responses((status = 202, description = "Chat", body = ChatView)))]
pub(super) async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let chat = turns::retry(&state, &chat).await?;
    Ok((StatusCode::ACCEPTED, Json(ChatView::from(&chat))).into_response())
}
