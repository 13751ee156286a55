//! Follows one chat's live events, reconnecting with `Last-Event-ID` when the connection
//! drops, and hands every event to its consumer.

use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Api, SseEvent};

/// What the follower reports.
#[derive(Debug)]
pub enum Feed {
    Event(SseEvent),
    /// The connection dropped; it is being re-established.
    Lost(String),
    /// The connection is back after a loss.
    Restored,
    /// The chat cannot be followed any more.
    Failed(String),
}

const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Starts following `chat` from the beginning of its history.
pub fn spawn(api: Api, chat: String, tx: mpsc::UnboundedSender<Feed>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_id: Option<i64> = None;
        let mut backoff = Duration::from_millis(250);
        let mut lost = false;
        loop {
            let response = match api.events(&chat, last_id).await {
                Ok(response) => response,
                Err(error) => {
                    let message = format!("{error:#}");
                    // An answer from the server (not a network failure) will not change.
                    if message.contains("the server") {
                        let _ = tx.send(Feed::Failed(message));
                        return;
                    }
                    if !lost {
                        lost = true;
                        let _ = tx.send(Feed::Lost(message));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            if std::mem::take(&mut lost) {
                let _ = tx.send(Feed::Restored);
            }
            backoff = Duration::from_millis(250);
            let mut stream = response.bytes_stream().eventsource();
            let reason = loop {
                match stream.next().await {
                    Some(Ok(event)) => {
                        let id = event.id.trim().parse::<i64>().ok();
                        if id.is_some() {
                            last_id = id;
                        }
                        let event = SseEvent {
                            id,
                            event: event.event,
                            data: event.data,
                        };
                        if tx.send(Feed::Event(event)).is_err() {
                            return;
                        }
                    }
                    Some(Err(error)) => break error.to_string(),
                    None => break "the server closed the event stream".to_owned(),
                }
            };
            lost = true;
            if tx.send(Feed::Lost(reason)).is_err() {
                return;
            }
            tokio::time::sleep(backoff).await;
        }
    })
}
