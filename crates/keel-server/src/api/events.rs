//! `GET /api/v1/chats/{id}/events`: live events with lossless resume.
//!
//! On connect: every committed message after the client's position, then the live parts of
//! the step in progress after it, then live events as they happen. Durable events carry their
//! sequence number as SSE id and are never sent twice (anything at or below the position
//! already sent is skipped); ephemeral ones (`status`, `queue`, `retry`) repeat the current
//! position. A client that falls too far behind is disconnected and resumes with its last id.
//!
//! A change of the chat's current branch (an edit, a regenerate, a switch) is the durable
//! `branch` event at the chat's `branch_seq`; the new branch's messages are numbered above
//! it, so a client behind it gets the event, then the whole branch.
//!
//! Each open stream holds a slot of [`crate::net::sse_slots`]; a connection beyond the
//! user's or the daemon's cap is answered `429` before anything is read from the store.
//! Where a connection starts and what it is sent are [`crate::service::follow`]'s.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::api::dto::EventsQuery;
use crate::api::error::ApiError;
use crate::api::event_stream;
use crate::api::extract::{Caller, parse_id};
use crate::api::state::AppState;
use crate::service::{self, follow};

#[utoipa::path(get, path = "/chats/{id}/events", tag = "chats", summary = "Live events (Server-Sent Events)", params(("id" = String, Path, description = "The chat's id"), EventsQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (as `after`)")), responses((status = 200, description = "Live events", content_type = "text/event-stream", body = crate::api::dto::SseEvent)))]
pub(super) async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let slot = follow::stream_slot(&state, &caller.0)?;
    let chat = service::owned_chat(&state, &caller.0, parse_id(&id, "chat")?).await?;
    let header_position = headers.get("last-event-id").map(|value| {
        value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
    });
    let position = follow::requested(header_position, query.after)?;
    state.metrics.sse_connections.inc();
    if position != follow::Requested::Start {
        state.metrics.sse_reconnects.inc();
    }
    let write_interval = state.config.server.sse_write_interval();
    let following = follow::follow(state, chat.into_inner(), position);
    // The slot lives as long as the stream: dropping it (the client left) frees it. The
    // follower is dropped first, then the chat's hub entry it held may go.
    Ok(event_stream::response(
        following.events,
        following.follower,
        (slot, following.hub_entry),
        write_interval,
    ))
}
