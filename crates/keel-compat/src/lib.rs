//! Keel's compatible doors: Keel spoken as other clients expect it, the AI SDK UI message
//! stream and the OpenAI Responses API, translated at the edge from a chat's live events and
//! keel-server's service layer (no run engine or storage of their own).
//!
//! [`doors`] is the whole public surface: the routes the `keel` binary hands to
//! `keel_server::serve::start`, which serves them behind the API's own layers and lists them
//! in its OpenAPI document.
//!
//! Module map:
//! * `reply` — one reply as Keel's events build it, which every protocol translates;
//! * `project` — the reply as a stream of parts followed by identity, which every protocol
//!   spells;
//! * `sse` — streaming a reply in a protocol's framing;
//! * `ai_sdk` — the AI SDK UI message stream (`useChat`, `DefaultChatTransport`);
//! * `responses` — the OpenAI Responses API (`/v1/responses`, the official OpenAI SDKs).
//!
//! The mapping tables are in `docs/compat.md` and in each module's documentation.

#![warn(unreachable_pub)]

mod ai_sdk;
mod project;
mod reply;
mod responses;
mod sse;

use axum::extract::DefaultBodyLimit;
use keel_server::api::Doors;
use keel_server::api::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Both doors: the AI SDK's routes under `/api/v1`, the Responses API's under `/v1`.
pub fn doors() -> Doors {
    Doors {
        api: api_routes(),
        v1: v1_routes(),
    }
}

/// Routes under `/api/v1` (authenticated like the rest of the API).
fn api_routes() -> OpenApiRouter<AppState> {
    // The transport posts a page's whole history: the handler reads its body within
    // `runs.ai_sdk_max_body_bytes` instead of the router's `runs.max_body_bytes`.
    let chat = OpenApiRouter::new()
        .routes(routes!(ai_sdk::chat))
        .route_layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .merge(chat)
        .routes(routes!(ai_sdk::resume))
        .routes(routes!(ai_sdk::history))
        .routes(routes!(ai_sdk::stop))
}

/// Routes under `/v1` (the OpenAI SDKs' base path), authenticated like `/api/v1`.
fn v1_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(responses::create))
        .routes(routes!(responses::retrieve))
        .routes(routes!(responses::cancel))
        .routes(routes!(responses::input_items))
}
