//! `GET /api/v1/events`: the caller's chat list as live events.
//!
//! One stream per open page: a `chat` event (the chat as `GET /chats/{id}` shows it) when
//! one of the caller's chats is created, renamed, archived or unarchived, switches model or
//! changes status, and `{"id": …, "deleted": true}` when it is deleted. It follows the
//! store's change notices (every replica's, on PostgreSQL) and reads a chat only for the
//! notices that change a list ([`keel_store::ChangeNotice::listing`]) of the caller's own
//! chats. When notices were lost it sends `resync`: the client reloads the list. The events
//! carry no ids: the list is state, not a log, and a reconnecting client reloads it.
//!
//! Each open stream holds a slot of [`crate::net::sse_slots`], as chat event streams do.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use futures::stream::BoxStream;
use keel_store::{ChangeNotice, RemoteNotice};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::api::dto::ChatView;
use crate::api::error::ApiError;
use crate::api::extract::Caller;
use crate::api::state::AppState;
use crate::service::follow::stream_slot;

/// Events buffered for a client between the follower task and the socket.
const CLIENT_BUFFER: usize = 64;

/// One event of the feed: its name and JSON data.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FeedItem {
    event: &'static str,
    data: String,
}

#[utoipa::path(get, path = "/events", tag = "chats", summary = "The caller's chat list as live events (Server-Sent Events): `chat` when a chat is created, renamed, archived, deleted or changes status or model; `resync` when changes may have been missed", responses((status = 200, description = "Live events of the chat list", content_type = "text/event-stream", body = crate::api::dto::SseEvent)))]
pub(super) async fn events(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let slot = stream_slot(&state, &caller.0)?;
    // Subscribed before the answer goes out: a page that loads the list once the stream
    // is open misses no change made after its read (a change between the read and a later
    // subscription would show the old status until the chat's next notice).
    let notices = subscribe(&state).await;
    let (tx, rx) = mpsc::channel::<FeedItem>(CLIENT_BUFFER);
    tokio::spawn(follow(state, caller.0, notices, tx));
    let stream = futures::stream::unfold((rx, slot), |(mut rx, slot)| async move {
        rx.recv().await.map(|item| {
            let event = Event::default().event(item.event).data(item.data);
            (Ok(event), (rx, slot))
        })
    });
    Ok(Sse::new(stream).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(15))
            .text(" keep-alive"),
    ))
}

/// Whether a notice is one the owner's list shows.
fn concerns(notice: &ChangeNotice, owner: &str) -> bool {
    notice.listing && notice.owner == owner
}

/// The store's change notices: this process's, and on PostgreSQL every replica's.
struct Notices {
    local: broadcast::Receiver<ChangeNotice>,
    remote: Option<BoxStream<'static, RemoteNotice>>,
}

async fn subscribe(state: &AppState) -> Notices {
    let local = state.store.subscribe();
    let remote = if state.store.backend() == "postgres" {
        state.store.subscribe_remote().await.ok()
    } else {
        None
    };
    Notices { local, remote }
}

async fn follow(state: AppState, owner: String, notices: Notices, tx: mpsc::Sender<FeedItem>) {
    let Notices {
        mut local,
        mut remote,
    } = notices;
    #[cfg(debug_assertions)]
    crate::debug_pause::debug_pause("KEEL_DEBUG_FEED_PAUSE_MS").await;
    loop {
        let notice = tokio::select! {
            _ = tx.closed() => return,
            _ = state.shutdown.cancelled() => return,
            notice = local.recv() => match notice {
                Ok(notice) => Some(notice),
                Err(broadcast::error::RecvError::Lagged(_)) => None,
                Err(broadcast::error::RecvError::Closed) => return,
            },
            Some(notice) = async {
                match remote.as_mut() {
                    Some(stream) => futures::StreamExt::next(stream).await,
                    None => std::future::pending().await,
                }
            } => match notice {
                RemoteNotice::Changed(notice) => Some(notice),
                RemoteNotice::Missed => None,
            },
        };
        let item = match notice {
            None => Some(FeedItem {
                event: "resync",
                data: "{}".to_owned(),
            }),
            Some(notice) if !concerns(&notice, &owner) => continue,
            Some(notice) => item_for(&state, &notice).await,
        };
        if let Some(item) = item
            && tx.send(item).await.is_err()
        {
            return;
        }
    }
}

/// The `chat` event for a notice: the chat as it is now, or its deletion.
async fn item_for(state: &AppState, notice: &ChangeNotice) -> Option<FeedItem> {
    let deleted = || FeedItem {
        event: "chat",
        data: json!({ "id": notice.chat_id.to_string(), "deleted": true }).to_string(),
    };
    if notice.deleted {
        return Some(deleted());
    }
    match state.store.get_chat(notice.chat_id).await {
        Ok(chat) => Some(FeedItem {
            event: "chat",
            data: serde_json::to_string(&ChatView::from(&chat)).ok()?,
        }),
        // Deleted since: the delete's own notice follows; saying so now is harmless.
        Err(keel_store::StoreError::NotFound { .. }) => Some(deleted()),
        Err(error) => {
            tracing::warn!(chat = %notice.chat_id, %error, "reading a chat for the list feed failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_store::ChatStatus;

    fn notice(owner: &str, listing: bool) -> ChangeNotice {
        ChangeNotice {
            chat_id: uuid::Uuid::nil(),
            version: 1,
            status: ChatStatus::Waiting,
            history_version: 1,
            event_seq: 1,
            deleted: false,
            owner: owner.to_owned(),
            listing,
            unowned: false,
            unnumbered_change: true,
        }
    }

    #[test]
    fn only_list_changes_of_the_callers_own_chats_are_sent() {
        assert!(concerns(&notice("alice", true), "alice"));
        assert!(!concerns(&notice("bob", true), "alice"));
        assert!(!concerns(&notice("alice", false), "alice"));
    }
}
