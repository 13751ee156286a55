//! One connection to a chat's live events, read event by event, with the position a
//! reconnect resumes from.

use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use eventsource_stream::Eventsource as _;
use futures::{Stream, StreamExt as _};
use serde_json::Value;

use keel_client::Api;

type RawEvents = Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

/// A parsed live event.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    pub kind: String,
    pub data: Value,
}

impl LiveEvent {
    /// Text of a `part` event carrying a text delta.
    pub fn text_delta(&self) -> Option<&str> {
        (self.kind == "part" && self.data["part"]["type"] == "text")
            .then(|| self.data["part"]["text"].as_str())
            .flatten()
    }

    /// A committed assistant message.
    pub fn is_assistant_message(&self) -> bool {
        self.kind == "message" && self.data["role"] == "assistant"
    }
}

/// An open event stream of one chat.
pub struct Live {
    events: RawEvents,
    /// The id of the last event read: where a reconnect continues.
    pub last_id: Option<i64>,
}

impl Live {
    pub async fn open(api: &Api, chat: &str, after: Option<i64>) -> anyhow::Result<Self> {
        let response = api.events(chat, after).await?;
        Ok(Self {
            events: Box::pin(response.bytes_stream().eventsource()),
            last_id: after,
        })
    }

    /// The next event; an error when the stream ends or stays silent for `patience`.
    pub async fn next(&mut self, patience: Duration) -> anyhow::Result<LiveEvent> {
        let event = tokio::time::timeout(patience, self.events.next())
            .await
            .context("no live event arrived in time")?
            .ok_or_else(|| anyhow!("the event stream ended"))?
            .context("the event stream broke")?;
        if let Ok(id) = event.id.trim().parse::<i64>() {
            self.last_id = Some(id);
        }
        Ok(LiveEvent {
            kind: event.event,
            data: serde_json::from_str(&event.data).unwrap_or(Value::Null),
        })
    }
}
