//! `GET /v1/models`: the configured model ids.

use std::sync::Arc;

use axum::Json;
use axum::extract::State as Extract;
use serde_json::{Value, json};

use crate::state::State;

/// Each entry carries both OpenAI's fields (`object`, `created`, `owned_by`) and
/// Anthropic's (`type`, `display_name`, `created_at`), so either family's client can list
/// the models.
pub(crate) async fn list(Extract(state): Extract<Arc<State>>) -> Json<Value> {
    let data: Vec<Value> = state
        .config
        .models
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "object": "model",
                "created": 0,
                "owned_by": "keel-mock",
                "type": "model",
                "display_name": id,
                "created_at": "1970-01-01T00:00:00Z",
            })
        })
        .collect();
    let first = data
        .first()
        .and_then(|m| m["id"].as_str())
        .map(str::to_owned);
    let last = data
        .last()
        .and_then(|m| m["id"].as_str())
        .map(str::to_owned);
    Json(json!({
        "object": "list",
        "data": data,
        "has_more": false,
        "first_id": first,
        "last_id": last,
    }))
}
