//! A client of a running daemon, through its public HTTP API and live events; shared by
//! `keel chat` and `keel bench`.

mod api;
mod follow;

pub use api::{Api, ChatSummary, ChatUsage};
pub use follow::{Feed, spawn as follow};

use serde::Deserialize;
use serde_json::Value;

/// One server-sent event as received.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub event: String,
    pub data: String,
}

/// A committed message as the API returns it.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    pub id: i64,
    pub role: String,
    #[serde(default)]
    pub parts: Vec<Value>,
    #[serde(default)]
    pub interrupted: bool,
    /// The versions of this message (same parent), itself included, oldest first.
    #[serde(default)]
    pub siblings: Vec<i64>,
}

impl Message {
    /// The concatenated text parts.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect()
    }
}
