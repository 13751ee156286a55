//! HTTP API v1 (described for users in `docs/api.md`): routes, authentication, body limits
//! and error mapping.

pub mod chats;
pub mod compat;
pub mod dto;
pub mod error;
pub mod events;
pub mod extract;
pub mod feed;
pub mod ops;
pub mod state;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};

use crate::api::error::{ApiError, Code};
use crate::api::extract::Caller;
use crate::api::state::{AppState, AuthMode, LOCAL_USER};
use crate::auth::bearer;
use crate::net::guard::{self, Guard};
use crate::net::request_id;
use crate::net::server::{body_timeout, limit_in_flight};

/// Every route of the API, as (method, path) pairs; the OpenAPI test checks each is described.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v1/chats"),
    ("get", "/api/v1/chats"),
    ("get", "/api/v1/chats/{id}"),
    ("delete", "/api/v1/chats/{id}"),
    ("patch", "/api/v1/chats/{id}"),
    ("get", "/api/v1/events"),
    ("post", "/api/v1/chats/{id}/archive"),
    ("post", "/api/v1/chats/{id}/unarchive"),
    ("get", "/api/v1/chats/{id}/messages"),
    ("post", "/api/v1/chats/{id}/messages"),
    ("put", "/api/v1/chats/{id}/messages/{message_id}"),
    ("post", "/api/v1/chats/{id}/interrupt"),
    ("post", "/api/v1/chats/{id}/compact"),
    ("post", "/api/v1/chats/{id}/tool-results"),
    ("delete", "/api/v1/chats/{id}/queue/{queue_id}"),
    ("post", "/api/v1/chats/{id}/queue/{queue_id}/promote"),
    ("get", "/api/v1/chats/{id}/events"),
    ("get", "/api/v1/models"),
    ("post", "/api/v1/ai-sdk/chat"),
    ("get", "/api/v1/ai-sdk/chat/{id}/stream"),
    ("get", "/api/v1/ai-sdk/chat/{id}/messages"),
    ("post", "/api/v1/ai-sdk/chat/{id}/stop"),
    ("post", "/v1/responses"),
    ("get", "/v1/responses/{id}"),
    ("post", "/v1/responses/{id}/cancel"),
    ("get", "/v1/responses/{id}/input_items"),
    ("get", "/api/v1/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];

/// The application's router. Layers, outermost first: a request id; the `Host`/`Origin`
/// guard; the limit on requests in flight; the body-read timeout; the body limit; then the
/// routes.
pub fn router(state: AppState) -> Router {
    let body_limit = state.config.runs.max_body_bytes;
    let guard = Guard {
        hosts: state.allowed_hosts.clone(),
        metrics: state.metrics.clone(),
    };
    let in_flight = state.config.server.max_requests_in_flight;
    let metrics = state.metrics.clone();
    let api = Router::new()
        .route("/chats", post(chats::create_chat).get(chats::list_chats))
        .route(
            "/chats/{id}",
            get(chats::get_chat)
                .delete(chats::delete_chat)
                .patch(chats::update_chat),
        )
        .route("/events", get(feed::events))
        .route("/chats/{id}/archive", post(chats::archive))
        .route("/chats/{id}/unarchive", post(chats::unarchive))
        .route(
            "/chats/{id}/messages",
            get(chats::list_messages).post(chats::send_message),
        )
        .route(
            "/chats/{id}/messages/{message_id}",
            put(chats::edit_message),
        )
        .route("/chats/{id}/interrupt", post(chats::interrupt))
        .route("/chats/{id}/compact", post(chats::compact))
        .route("/chats/{id}/tool-results", post(chats::tool_results))
        .route("/chats/{id}/queue/{queue_id}", delete(chats::delete_queued))
        .route(
            "/chats/{id}/queue/{queue_id}/promote",
            post(chats::promote_queued),
        )
        .route("/chats/{id}/events", get(events::events))
        .route("/models", get(ops::models))
        .merge(compat::api_routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .route("/openapi.json", get(ops::openapi));
    let v1 = compat::v1_routes()
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let routes = Router::new()
        .nest("/api/v1", api)
        .nest("/v1", v1)
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .merge(crate::web::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(
            state.config.server.header_read_timeout(),
            body_timeout,
        ))
        .with_state(state);
    limit_in_flight(routes, in_flight, metrics)
        .layer(middleware::from_fn_with_state(guard, guard::guard))
        .layer(middleware::from_fn(request_id::assign))
}

/// Identifies the caller: the local user, or the owner of a valid bearer token.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let mode = match state.auth.mode(state.store.as_ref()).await {
        Ok(mode) => mode,
        Err(error) => return ApiError::from(error).into_response(),
    };
    let caller = match mode {
        AuthMode::SingleUser => Some(LOCAL_USER.to_owned()),
        AuthMode::Tokens => {
            let token = request
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer);
            match token {
                Some(token) => match state.store.user_by_token(token).await {
                    Ok(Some(user)) => Some(user.name),
                    Ok(None) => None,
                    Err(error) => return ApiError::from(error).into_response(),
                },
                None => None,
            }
        }
    };
    match caller {
        Some(name) => {
            request.extensions_mut().insert(Caller(name));
            next.run(request).await
        }
        None => ApiError::unauthorized().into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

async fn method_not_allowed() -> Response {
    let error = ApiError::new(Code::InvalidRequest, "method not allowed on this endpoint");
    let mut response = error.into_response();
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
}
