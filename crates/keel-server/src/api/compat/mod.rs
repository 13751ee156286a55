//! Compatible protocols: Keel spoken as other clients expect it, translated at the edge from
//! Keel's own events and store (no run engine or storage of their own).
//!
//! * [`reply`]: one reply as Keel's events build it, which every protocol translates;
//! * [`project`]: the reply as a stream of parts followed by identity, which every protocol spells;
//! * [`sse`]: streaming a reply in a protocol's framing;
//! * [`ai_sdk`]: the AI SDK UI message stream (`useChat`, `DefaultChatTransport`);
//! * [`responses`]: the OpenAI Responses API (`/v1/responses`, the official OpenAI SDKs).
//!
//! The mapping tables are in `docs/compat.md` and in each module's documentation.

pub(super) mod ai_sdk;
pub(super) mod project;
pub(super) mod reply;
pub(super) mod responses;
pub(super) mod sse;

use axum::extract::DefaultBodyLimit;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::state::AppState;

/// Routes under `/api/v1` (authenticated like the rest of the API).
pub(super) fn api_routes() -> OpenApiRouter<AppState> {
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
pub(super) fn v1_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(responses::create))
        .routes(routes!(responses::retrieve))
        .routes(routes!(responses::cancel))
        .routes(routes!(responses::input_items))
}
