//! Health, readiness, metrics, models and the API description.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use crate::api::doc::Served;
use crate::api::dto::{ModelList, ModelView};
use crate::api::state::AppState;

#[utoipa::path(get, path = "/healthz", tag = "operations", summary = "Liveness", responses((status = 200, description = "Alive")))]
pub(super) async fn healthz() -> StatusCode {
    StatusCode::OK
}

/// How long `/readyz` waits for the database.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `200` when the database answers. Anyone who can reach the daemon may ask, so a failure
/// is answered with its kind and the request id only; the error itself goes to the log.
#[utoipa::path(get, path = "/readyz", tag = "operations", summary = "Readiness", responses((status = 200, description = "Ready", body = Object), (status = 503, description = "Not ready", body = Object)))]
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    // A database that does not answer is as unready as one that fails; the pool would
    // otherwise keep retrying for its whole acquire timeout.
    let database = match tokio::time::timeout(
        READY_TIMEOUT,
        state.store.list_chats(Some(""), None, 1),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {READY_TIMEOUT:?}")),
    };
    let dependencies = public_dependencies((state.dependencies)());
    let backend = state.store.backend();
    match database {
        Ok(_) => (
            StatusCode::OK,
            Json(json!({"status": "ready", "database": backend, "mcp_servers": dependencies})),
        )
            .into_response(),
        Err(error) => {
            let request_id = crate::net::request_id::current();
            tracing::error!(
                request_id = request_id.as_deref().unwrap_or("-"),
                %error,
                "readiness check: the database did not answer"
            );
            let body = json!({
                "status": "unavailable",
                "database": backend,
                "error": {"kind": "database_unavailable", "request_id": request_id},
                "mcp_servers": dependencies,
            });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

/// MCP servers' health without their error texts, which may hold a server's URL or
/// output: the log has them.
fn public_dependencies(mut dependencies: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    for dependency in &mut dependencies {
        if let Some(fields) = dependency.as_object_mut() {
            fields.remove("error");
        }
    }
    dependencies
}

#[utoipa::path(get, path = "/metrics", tag = "operations", summary = "Prometheus metrics", responses((status = 200, description = "Metrics", content_type = "text/plain", body = String)))]
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let channels = i64::try_from(state.hub.channel_count()).unwrap_or(i64::MAX);
    state.metrics.live_channels.set(channels);
    state.metrics.refresh_allocator();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/models", tag = "operations", summary = "Models", responses((status = 200, description = "Models", body = ModelList)))]
pub(super) async fn models(State(state): State<AppState>) -> Json<ModelList> {
    let default = state.models.default_id().to_owned();
    let models = state
        .models
        .list()
        .map(|m| ModelView {
            id: m.id.clone(),
            provider: m.provider.clone(),
            context_limit: m.context_limit,
            default: m.id == default,
        })
        .collect();
    Json(ModelList { models })
}

/// The document as this daemon serves it: a chat's `model` must be one of the configured
/// ids, which only the running daemon knows, so it fills them in as an enum.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", summary = "This document", responses((status = 200, description = "OpenAPI document", body = Object)))]
pub(super) async fn openapi(
    State(state): State<AppState>,
    Extension(Served(document)): Extension<Served>,
) -> Response {
    let ids: Vec<&str> = state.models.list().map(|m| m.id.as_str()).collect();
    let doc = document_for(&document, &ids);
    ([(header::CONTENT_TYPE, "application/json")], doc).into_response()
}

/// `doc` with `CreateChat.model` limited to `ids` (or null, the default model).
fn document_for(doc: &serde_json::Value, ids: &[&str]) -> String {
    let mut doc = doc.clone();
    if let Some(model) = doc
        .pointer_mut("/components/schemas/CreateChat/properties/model")
        .and_then(serde_json::Value::as_object_mut)
    {
        let mut values: Vec<serde_json::Value> = ids.iter().map(|id| json!(id)).collect();
        values.push(serde_json::Value::Null);
        model.insert("enum".to_owned(), serde_json::Value::Array(values));
    }
    doc.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_shows_no_dependency_error_text() {
        let shown = public_dependencies(vec![
            json!({"name": "files", "state": "failed", "error": "spawn https://u:tok@x failed"}),
            json!("odd"),
        ]);
        assert_eq!(
            shown,
            vec![json!({"name": "files", "state": "failed"}), json!("odd")]
        );
    }

    #[test]
    fn the_served_document_names_the_configured_models() {
        let (_, document) = crate::api::routes(crate::api::Doors::none());
        let document = serde_json::to_value(&document).unwrap();
        let doc: serde_json::Value =
            serde_json::from_str(&document_for(&document, &["demo", "gpt"])).unwrap();
        assert_eq!(
            doc["components"]["schemas"]["CreateChat"]["properties"]["model"]["enum"],
            json!(["demo", "gpt", null])
        );
    }
}
