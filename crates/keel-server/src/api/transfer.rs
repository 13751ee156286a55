//! Moving a chat between installations: `GET /chats/{id}/export` writes it with every
//! branch (`format`), or its current branch as Markdown (`markdown`); `POST /chats/import`
//! creates a chat of the caller's from such an export.

mod format;
mod markdown;

use axum::Json;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::ChatView;
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, Caller, parse_id};
use crate::api::state::AppState;
use crate::service::ServiceError;
use crate::service::chats::check_settings;
use crate::service::settings::checked_title;

pub(crate) use format::ChatFile;

/// The import route, whose body may hold a whole chat: it reads its body within
/// `runs.import_max_body_bytes` instead of the router's `runs.max_body_bytes`.
pub(super) fn import_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(import_chat))
        .route_layer(DefaultBodyLimit::disable())
}

/// `GET /chats/{id}/export?format=…`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExportQuery {
    /// `json` (the default: every branch, for `POST /chats/import`) or `markdown` (the
    /// current branch, for people).
    #[param(pattern = "^(json|markdown)$")]
    pub format: Option<String>,
}

#[utoipa::path(get, path = "/chats/{id}/export", tag = "chats", summary = "Export a chat: every branch as JSON, or the current branch as Markdown", params(("id" = String, Path, description = "The chat's id"), ExportQuery), responses((status = 200, description = "The chat", content((ChatFile = "application/json"), (String = "text/markdown")))))]
pub(super) async fn export_chat(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<ExportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let markdown = match query.format.as_deref() {
        None | Some("json") => false,
        Some("markdown") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "`format` must be json or markdown, not {other:?}"
            )));
        }
    };
    let id = parse_id(&id, "chat")?;
    let export = state
        .store
        .export_chat(id)
        .await
        .map_err(|error| ServiceError::of_chat(id, error))?;
    if export.chat.owner != caller.0 {
        return Err(ServiceError::chat_not_found(id).into());
    }
    if markdown {
        let headers = [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")];
        return Ok((headers, markdown::render(&export)).into_response());
    }
    let file = ChatFile::from_export(&export).map_err(|source| {
        ApiError::from(keel_store::StoreError::Corrupt {
            what: "chats.tools",
            source,
        })
    })?;
    Ok(Json(file).into_response())
}

#[utoipa::path(post, path = "/chats/import", tag = "chats", summary = "Import a chat from an export; it is the caller's and waits for a message", request_body = ChatFile, responses((status = 201, description = "Created", body = ChatView)))]
pub(super) async fn import_chat(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<Response, ApiError> {
    // The route has no default limit (a whole chat rides along): this is its limit.
    let limit = state.config.runs.import_max_body_bytes;
    let request = request.map(|body| Body::new(http_body_util::Limited::new(body, limit)));
    let ApiJson(value) = ApiJson::<serde_json::Value>::from_request(request, &state).await?;
    let file = ChatFile::parse(value).map_err(ApiError::invalid)?;
    let title = file
        .title
        .as_deref()
        .map(checked_title)
        .transpose()
        .map_err(|e| ApiError::invalid(format!("title: {e}")))?;
    let model = check_settings(&state, file.model.clone(), file.max_steps, &file.tools)?;
    let mut import = file
        .into_import(caller.0, model)
        .map_err(ApiError::invalid)?;
    import.title = title;
    let chat = state.store.import_chat(import).await?;
    Ok((StatusCode::CREATED, Json(ChatView::from(&chat))).into_response())
}
