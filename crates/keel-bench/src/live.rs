//! One connection to a chat's live events, read event by event, with the position a
//! reconnect resumes from.

use std::borrow::Cow;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use eventsource_stream::Eventsource as _;
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
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

/// A live event: its name, and its data as sent, parsed only by what asks for it. The
/// load's clients read a part for its text alone; a whole JSON tree per part would make them
/// cost more than the daemon they measure.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    pub kind: String,
    raw: String,
}

/// The fields of a `part` event that the clients look at.
#[derive(Deserialize)]
struct PartEvent<'a> {
    #[serde(borrow)]
    part: Part<'a>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    complete: bool,
}

/// The fields of a `message` event that the clients look at.
#[derive(Deserialize)]
struct MessageEvent<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
}

impl LiveEvent {
    /// The event's data as a JSON value (`null` when it is not JSON).
    pub fn data(&self) -> Value {
        serde_json::from_str(&self.raw).unwrap_or(Value::Null)
    }

    fn part(&self) -> Option<Part<'_>> {
        (self.kind == "part")
            .then(|| serde_json::from_str::<PartEvent<'_>>(&self.raw).ok())
            .flatten()
            .map(|event| event.part)
    }

    /// Text of a `part` event carrying a text delta.
    pub fn text_delta(&self) -> Option<Cow<'_, str>> {
        self.part().filter(|part| part.kind == "text")?.text
    }

    /// A `part` event carrying a complete tool call.
    pub fn is_complete_tool_call(&self) -> bool {
        self.part()
            .is_some_and(|part| part.kind == "tool_call" && part.complete)
    }

    /// A committed assistant message.
    pub fn is_assistant_message(&self) -> bool {
        self.kind == "message"
            && serde_json::from_str::<MessageEvent<'_>>(&self.raw)
                .is_ok_and(|message| message.role == "assistant")
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
            raw: event.data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, raw: &str) -> LiveEvent {
        LiveEvent {
            kind: kind.to_owned(),
            raw: raw.to_owned(),
        }
    }

    #[test]
    fn a_part_is_read_for_its_text_or_its_complete_call() {
        let text = event(
            "part",
            r#"{"message_id":3,"part":{"type":"text","text":"a\"b"}}"#,
        );
        assert_eq!(text.text_delta().as_deref(), Some("a\"b"));
        assert!(!text.is_complete_tool_call());
        let call = event(
            "part",
            r#"{"part":{"type":"tool_call","id":"c","name":"n","complete":true}}"#,
        );
        assert_eq!(call.text_delta(), None);
        assert!(call.is_complete_tool_call());
        let reasoning = event("part", r#"{"part":{"type":"reasoning","text":"x"}}"#);
        assert_eq!(reasoning.text_delta(), None);
        assert_eq!(
            event("status", r#"{"part":{"type":"text","text":"x"}}"#).text_delta(),
            None
        );
    }

    #[test]
    fn only_an_assistant_message_is_one() {
        assert!(
            event("message", r#"{"id":1,"role":"assistant","parts":[]}"#).is_assistant_message()
        );
        assert!(!event("message", r#"{"id":1,"role":"user","parts":[]}"#).is_assistant_message());
        assert!(!event("part", r#"{"role":"assistant"}"#).is_assistant_message());
        assert_eq!(event("message", "not json").data(), Value::Null);
    }
}
