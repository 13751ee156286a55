//! Following a chat's events: the live subscription behind the native event stream and
//! both compatible protocols, and the caller's slot for one more open stream.
//!
//! A follower sends every committed message after the client's position, then the live
//! parts of the step in progress after it, then live events as they happen, until the
//! receiver is dropped, the client falls too far behind, the chat is deleted or the process
//! stops. `resume` decides where it starts; `follower` catches it up from the store and
//! then forwards the hub's frames and answers the chat's change notices.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use keel_store::Chat;
use tokio::sync::mpsc;

use crate::api::live_item::LiveItem;
use crate::api::state::AppState;
use crate::net::sse_slots::SlotRefusal;
pub use crate::net::sse_slots::SseSlot;
use crate::service::error::ServiceError;

mod follower;
mod resume;

pub(crate) use resume::Requested;

/// Events buffered for a client between the follower and the socket.
const CLIENT_BUFFER: usize = 256;

/// A slot for one more live event stream of `owner`, or the refusal naming the cap.
pub fn stream_slot(state: &AppState, owner: &str) -> Result<SseSlot, ServiceError> {
    let user = state.auth.requires_tokens().then_some(owner);
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
        ServiceError::TooMany {
            reason: refusal.reason(),
            message,
        }
    })
}

/// Where a client asked to resume: `header` is the `Last-Event-ID` when sent (`None` inside
/// when it is no event id), `after` the query's position. The header wins; a malformed one
/// is no reason to refuse the stream: like a position the chat never reached, it gets a
/// `stream_reset` and the step in progress from its start.
pub(crate) fn requested(
    header: Option<Option<i64>>,
    after: Option<i64>,
) -> Result<Requested, ServiceError> {
    if after.is_some_and(|a| a < 0) {
        return Err(ServiceError::Invalid(
            "`after` must be a non-negative integer".into(),
        ));
    }
    Ok(match header {
        Some(Some(position)) if position >= 0 => Requested::At(position),
        Some(_) => Requested::Unknown,
        None => after.map_or(Requested::Start, Requested::At),
    })
}

/// A chat followed: its events, and the follower that feeds them, to be run as long as the
/// events are read.
pub(crate) struct Following {
    pub events: mpsc::Receiver<LiveItem>,
    pub follower: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Drops the chat's hub entry when nothing else uses it; to be dropped after the
    /// follower (its subscription ends first).
    pub hub_entry: PruneOnDrop,
}

/// Follows a chat's events after `position`. The subscription is made now: whoever holds
/// the events misses nothing that happens next, however late the follower is first run.
pub(crate) fn follow(state: AppState, chat: Chat, position: Requested) -> Following {
    let (tx, rx) = mpsc::channel::<LiveItem>(CLIENT_BUFFER);
    let hub_entry = PruneOnDrop::new(&state, &chat);
    let subscription = state.hub.subscribe(&chat.id.to_string());
    Following {
        events: rx,
        follower: Box::pin(follower::feed(state, chat, subscription, position, tx)),
        hub_entry,
    }
}

/// Follows a chat's events after `position` (0: from the start) in a task of its own, until
/// the receiver is dropped or the follower stops. A position the chat never reached opens
/// with `stream_reset` and the step in progress from its start, as on the SSE route.
pub fn follow_spawned(state: AppState, chat: Chat, position: i64) -> mpsc::Receiver<LiveItem> {
    let requested = if position == 0 {
        Requested::Start
    } else {
        Requested::At(position)
    };
    let Following {
        events,
        follower,
        hub_entry,
    } = follow(state, chat, requested);
    tokio::spawn(async move {
        follower.await;
        // The connection's receiver is gone now; the chat's channel may be too.
        drop(hub_entry);
    });
    events
}

/// Drops a chat's hub entry when nothing streams into it and nobody else follows it, once
/// a follower (and with it its subscription) is gone, so finished chats keep no channel.
pub(crate) struct PruneOnDrop {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_wins_over_the_query_and_a_bad_one_is_unknown() {
        assert_eq!(requested(None, None).unwrap(), Requested::Start);
        assert_eq!(requested(None, Some(7)).unwrap(), Requested::At(7));
        assert_eq!(requested(Some(Some(3)), Some(7)).unwrap(), Requested::At(3));
        assert_eq!(requested(Some(None), None).unwrap(), Requested::Unknown);
        assert_eq!(requested(Some(Some(-1)), None).unwrap(), Requested::Unknown);
        assert!(matches!(
            requested(Some(Some(3)), Some(-1)),
            Err(ServiceError::Invalid(_))
        ));
    }
}
