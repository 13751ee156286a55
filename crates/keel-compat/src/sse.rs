//! One reply streamed in another protocol: follows the chat's Keel events from a position,
//! builds the [`Reply`] and writes what a [`Translator`] makes of each change, until the
//! reply ends, the client leaves or the process stops. The run never depends on the
//! connection: dropping it only stops the following.
//!
//! Each stream holds an [`SseSlot`] of the daemon's stream caps (taken by the handler
//! before it changes anything, so a refused stream is a `429` with nothing stored), like the
//! native event streams, and says `x-accel-buffering: no` so a proxy such as nginx passes
//! each event on at once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use keel_server::api::live_item::LiveItem;
use keel_server::api::state::AppState;
use keel_server::service::follow::{SseSlot, follow_spawned};
use keel_store::Chat;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::reply::Reply;

/// A comment line at least this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Turns a reply into a protocol's SSE text.
pub(crate) trait Translator: Send + 'static {
    /// The SSE text that brings the client from what it was sent to `reply`.
    fn update(&mut self, reply: &Reply) -> Vec<String>;
    /// True once the reply's end was written.
    fn finished(&self) -> bool;
    /// Written after the end (`data: [DONE]` in the AI SDK protocol).
    fn trailer(&self) -> Option<String> {
        None
    }
}

struct Feed<T> {
    events: mpsc::Receiver<LiveItem>,
    reply: Reply,
    translator: T,
    pending: VecDeque<String>,
    /// The first update (the stream's opening) was made.
    opened: bool,
    done: bool,
    /// Held as long as the stream is open.
    _slot: SseSlot,
}

/// The `text/event-stream` answer streaming a reply whose events come after `position`, with
/// a protocol's own `headers` besides the stream's, holding `slot` while it is open.
pub(crate) fn response<T: Translator>(
    state: AppState,
    chat: Chat,
    position: i64,
    (reply, translator): (Reply, T),
    slot: SseSlot,
    headers: &[(&'static str, &'static str)],
) -> Response {
    let mut response = (
        [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
            ("x-accel-buffering", "no"),
        ],
        body(state, chat, position, reply, translator, slot),
    )
        .into_response();
    for (name, value) in headers {
        response.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

/// The streamed body of a reply (empty so far) whose events come after `position`.
fn body<T: Translator>(
    state: AppState,
    chat: Chat,
    position: i64,
    reply: Reply,
    translator: T,
    slot: SseSlot,
) -> Body {
    let feed = Feed {
        events: follow_spawned(state, chat, position),
        reply,
        translator,
        pending: VecDeque::new(),
        opened: false,
        done: false,
        _slot: slot,
    };
    Body::from_stream(futures::stream::unfold(feed, next))
}

async fn next<T: Translator>(mut feed: Feed<T>) -> Option<(Result<String, Infallible>, Feed<T>)> {
    loop {
        if let Some(text) = feed.pending.pop_front() {
            return Some((Ok(text), feed));
        }
        if feed.done {
            return None;
        }
        if feed.opened {
            match tokio::time::timeout(KEEP_ALIVE, feed.events.recv()).await {
                Err(_) => return Some((Ok(": keep-alive\n\n".to_owned()), feed)),
                // The follower stopped (shutdown, deletion, too far behind): the client
                // reconnects and resumes.
                Ok(None) => return None,
                Ok(Some(item)) => apply(&mut feed.reply, &item),
            }
            // Take whatever else is already here, so a replay is translated at once.
            while let Ok(item) = feed.events.try_recv() {
                apply(&mut feed.reply, &item);
            }
        }
        feed.opened = true;
        let texts = feed.translator.update(&feed.reply);
        feed.pending.extend(texts);
        if feed.translator.finished() {
            feed.done = true;
            feed.pending.extend(feed.translator.trailer());
        }
    }
}

fn apply(reply: &mut Reply, item: &LiveItem) {
    let data: Value = serde_json::from_slice(&item.data).unwrap_or(Value::Null);
    reply.apply(item.event, &data);
}
