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
//!
//! [`resume`] decides where a connection starts; [`follower`] catches it up from the store
//! and then forwards the hub's frames and answers the chat's change notices.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use keel_store::Chat;
use tokio::sync::mpsc;

use crate::api::dto::EventsQuery;
use crate::api::error::{ApiError, Code};
use crate::api::event_stream;
use crate::api::extract::{Caller, parse_id};
use crate::api::live_item::LiveItem;
use crate::api::state::AppState;
use crate::hub::Subscription;
use crate::net::sse_slots::{SlotRefusal, SseSlot};

mod follower;
mod resume;

use follower::feed;
use resume::Requested;

/// Events buffered for a client between the follower task and the socket.
const CLIENT_BUFFER: usize = 256;

#[utoipa::path(get, path = "/chats/{id}/events", tag = "chats", summary = "Live events (Server-Sent Events)", params(("id" = String, Path, description = "The chat's id"), EventsQuery, ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (as `after`)")), responses((status = 200, description = "Live events", content_type = "text/event-stream", body = crate::api::dto::SseEvent)))]
pub(super) async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let slot = stream_slot(&state, &caller)?;
    let chat = state.owned_chat(&caller, parse_id(&id, "chat")?).await?;
    // A malformed Last-Event-ID is no reason to refuse the stream: like a position the chat
    // never reached, it gets a `stream_reset` and the step in progress from its start.
    let header_position = headers.get("last-event-id").map(|value| {
        value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|v| *v >= 0)
    });
    if query.after.is_some_and(|a| a < 0) {
        return Err(ApiError::invalid("`after` must be a non-negative integer"));
    }
    let position = match header_position {
        Some(Some(position)) => Requested::At(position),
        Some(None) => Requested::Unknown,
        None => query.after.map_or(Requested::Start, Requested::At),
    };
    state.metrics.sse_connections.inc();
    if position != Requested::Start {
        state.metrics.sse_reconnects.inc();
    }
    let (tx, rx) = mpsc::channel::<LiveItem>(CLIENT_BUFFER);
    // The slot lives as long as the stream: dropping it (the client left) frees it. The
    // follower is dropped first, then the chat's hub entry it held may go.
    let prune = PruneOnDrop::new(&state, &chat);
    // Subscribed before the response goes out: a client that has its headers misses
    // nothing that happens next, however late the stream is first polled.
    let subscription = state.hub.subscribe(&chat.id.to_string());
    let write_interval = state.config.server.sse_write_interval();
    Ok(event_stream::response(
        rx,
        feed(state, chat, subscription, position, tx),
        (slot, prune),
        write_interval,
    ))
}

/// A slot for one more live event stream of `caller`, or the `429` that refuses it.
pub(crate) fn stream_slot(state: &AppState, caller: &Caller) -> Result<SseSlot, ApiError> {
    let user = state.auth.requires_tokens().then_some(caller.0.as_str());
    state.sse_slots.take(user).map_err(|refusal| {
        state.metrics.refused(refusal.reason());
        let message = match refusal {
            SlotRefusal::User => format!(
                "this user already has {} live event streams open ([server] sse_max_per_user)",
                state.config.server.sse_max_per_user
            ),
            SlotRefusal::Total => format!(
                "the daemon already has {} live event streams open ([server] sse_max_total)",
                state.config.server.sse_max_total
            ),
        };
        ApiError::refused(Code::TooManyRequests, refusal.reason(), message)
    })
}

/// Follows a chat's events after `position` (committed messages, the step in progress, then
/// live events) until the receiver is dropped, the client falls too far behind, the chat is
/// deleted or the process stops. A position the chat never reached opens with `stream_reset`
/// and the step in progress from its start, as on the SSE route.
pub(super) fn follow_chat(state: AppState, chat: Chat, position: i64) -> mpsc::Receiver<LiveItem> {
    let (tx, rx) = mpsc::channel::<LiveItem>(CLIENT_BUFFER);
    let requested = if position == 0 {
        Requested::Start
    } else {
        Requested::At(position)
    };
    let subscription = state.hub.subscribe(&chat.id.to_string());
    tokio::spawn(follow(state, chat, subscription, requested, tx));
    rx
}

/// Feeds one connection until the client leaves, falls behind, or the chat is deleted.
async fn follow(
    state: AppState,
    chat: Chat,
    subscription: Subscription,
    position: Requested,
    tx: mpsc::Sender<LiveItem>,
) {
    let prune = PruneOnDrop::new(&state, &chat);
    feed(state, chat, subscription, position, tx).await;
    // The connection's receiver is gone now; the chat's channel may be too.
    drop(prune);
}

/// Drops a chat's hub entry when nothing streams into it and nobody else follows it, once
/// a follower (and with it its subscription) is gone, so finished chats keep no channel.
struct PruneOnDrop {
    hub: Arc<crate::hub::Hub>,
    chat_key: String,
}

impl PruneOnDrop {
    fn new(state: &AppState, chat: &Chat) -> Self {
        Self {
            hub: state.hub.clone(),
            chat_key: chat.id.to_string(),
        }
    }
}

impl Drop for PruneOnDrop {
    fn drop(&mut self) {
        self.hub.prune(&self.chat_key);
    }
}
