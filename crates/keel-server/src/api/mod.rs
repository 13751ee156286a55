//! HTTP API v1 (described for users in `docs/api.md`): routes, authentication, body limits
//! and error mapping. `chats` holds the API's transitions of a chat and its messages,
//! `rerun` continuing a stopped reply and retrying a failed run, `transfer` a chat's export
//! and import.
//!
//! [`Doors`] are routes served beside the API's own by code outside this crate (the
//! compatible protocols). What they build on is public: [`state`], the contract's shapes
//! ([`dto`]), errors ([`error`]) and extractors ([`extract`]), a live event on its way to a
//! stream ([`live_item`]), and the service layer ([`crate::service`]).

mod branches;
mod chats;
mod doc;
pub mod dto;
pub mod error;
mod event_stream;
mod events;
pub mod extract;
mod feed;
pub mod live_item;
mod ops;
mod rerun;
pub mod state;
mod transfer;
mod usage;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::error::{ApiError, Code};
use crate::api::extract::Caller;
use crate::api::state::{AppState, AuthMode, LOCAL_USER};
use crate::auth::bearer;
use crate::net::guard::{self, Guard};
use crate::net::request_id;
use crate::net::server::{body_timeout, limit_in_flight};

/// Routes served beside the API's own, described in the same OpenAPI document and behind the
/// same layers: `api` under `/api/v1`, `v1` under `/v1` (the OpenAI SDKs' base path), both
/// authenticated like the rest of the API.
#[derive(Default)]
pub struct Doors {
    pub api: OpenApiRouter<AppState>,
    pub v1: OpenApiRouter<AppState>,
}

impl Doors {
    /// The API alone.
    pub fn none() -> Self {
        Self::default()
    }
}

/// Every route and the OpenAPI document describing it, from the same `#[utoipa::path]`
/// attributes. `authenticate` layers the routes that need a caller (the served router adds the
/// bearer check; [`routes`] passes them through unchanged).
fn routes_with(
    doors: Doors,
    authenticate: impl Fn(OpenApiRouter<AppState>) -> OpenApiRouter<AppState>,
) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let api = OpenApiRouter::new()
        .routes(routes!(chats::create_chat, chats::list_chats))
        .routes(routes!(
            chats::get_chat,
            chats::delete_chat,
            chats::update_chat
        ))
        .routes(routes!(feed::events))
        .routes(routes!(chats::archive))
        .routes(routes!(chats::unarchive))
        .routes(routes!(chats::list_messages, chats::send_message))
        .routes(routes!(chats::edit_message))
        .routes(routes!(branches::regenerate))
        .routes(routes!(branches::switch_branch))
        .routes(routes!(chats::interrupt))
        .routes(routes!(chats::compact))
        .routes(routes!(rerun::continue_reply))
        .routes(routes!(rerun::retry))
        .routes(routes!(chats::tool_results))
        .routes(routes!(chats::delete_queued))
        .routes(routes!(chats::promote_queued))
        .routes(routes!(events::events))
        .routes(routes!(transfer::export_chat))
        .routes(routes!(ops::models))
        .routes(routes!(usage::usage))
        .merge(doors.api)
        .merge(transfer::import_routes());
    let api = authenticate(api).routes(routes!(ops::openapi));
    let v1 = authenticate(doors.v1);
    let (router, mut document) = OpenApiRouter::with_openapi(doc::ApiDoc::openapi())
        .nest("/api/v1", api)
        .nest("/v1", v1)
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .split_for_parts();
    doc::add_error_answers(&mut document);
    (router, document)
}

/// The routes with `doors` and their document, unlayered: what [`router`] serves and
/// describes, for checking one against the other.
pub fn routes(doors: Doors) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    routes_with(doors, |routes| routes)
}

/// The application's router, serving `doors` beside the API. Layers, outermost first: a
/// request id; the `Host`/`Origin` guard; the limit on requests in flight; the body-read
/// timeout; the body limit; then the routes.
pub fn router(state: AppState, doors: Doors) -> Router {
    let body_limit = state.config.runs.max_body_bytes;
    let guard = Guard {
        hosts: state.allowed_hosts.clone(),
        metrics: state.metrics.clone(),
    };
    let in_flight = state.config.server.max_requests_in_flight;
    let metrics = state.metrics.clone();
    let auth_state = state.clone();
    let (api, document) = routes_with(doors, |routes| {
        routes.route_layer(middleware::from_fn_with_state(
            auth_state.clone(),
            authenticate,
        ))
    });
    let routes = api
        .merge(crate::web::router())
        .layer(Extension(doc::Served::of(&document)))
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
