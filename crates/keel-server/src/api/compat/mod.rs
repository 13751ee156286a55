//! Compatible protocols: Keel spoken as other clients expect it, translated at the edge from
//! Keel's own events and store (no run engine or storage of their own).
//!
//! * [`reply`]: one reply as Keel's events build it, which every protocol translates;
//! * [`sse`]: streaming a reply in a protocol's framing;
//! * [`ai_sdk`]: the AI SDK UI message stream (`useChat`, `DefaultChatTransport`);
//! * [`responses`]: the OpenAI Responses API (`/v1/responses`, the official OpenAI SDKs).
//!
//! The mapping tables are in `docs/compat.md` and in each module's documentation.

pub mod ai_sdk;
pub mod reply;
pub mod responses;
pub mod sse;

use axum::Router;
use axum::routing::{get, post};

use crate::api::state::AppState;

/// Routes under `/api/v1` (authenticated like the rest of the API).
pub fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/ai-sdk/chat", post(ai_sdk::chat))
        .route("/ai-sdk/chat/{id}/stream", get(ai_sdk::resume))
        .route("/ai-sdk/chat/{id}/messages", get(ai_sdk::history))
        .route("/ai-sdk/chat/{id}/stop", post(ai_sdk::stop))
}

/// Routes under `/v1` (the OpenAI SDKs' base path), authenticated like `/api/v1`.
pub fn v1_routes() -> Router<AppState> {
    Router::new()
        .route("/responses", post(responses::create))
        .route("/responses/{id}", get(responses::retrieve))
        .route("/responses/{id}/cancel", post(responses::cancel))
        .route("/responses/{id}/input_items", get(responses::input_items))
}
