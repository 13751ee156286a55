//! The JSON shapes of the public contract, built from store records.

use chrono::{DateTime, SecondsFormat, Utc};
use keel_core::{Part, Usage};
use keel_store::{Chat, QueuedMessage, StoredMessage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub fn timestamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[derive(Debug, Serialize)]
pub struct ChatView {
    pub id: String,
    pub title: Option<String>,
    pub model: String,
    pub status: &'static str,
    pub archived: bool,
    pub created_at: String,
    pub updated_at: String,
    pub last_error: Option<LastErrorView>,
    pub queued: Vec<QueuedView>,
    pub pending_tool_calls: Vec<PendingCallView>,
}

#[derive(Debug, Serialize)]
pub struct LastErrorView {
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
pub struct QueuedView {
    pub id: String,
    pub position: i64,
    pub parts: Vec<Part>,
    pub created_at: String,
}

#[derive(Debug, Serialize)]
pub struct PendingCallView {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
}

impl From<&Chat> for ChatView {
    fn from(chat: &Chat) -> Self {
        Self {
            id: chat.id.to_string(),
            title: chat.title.clone(),
            model: chat.model.clone(),
            status: chat.status.as_str(),
            archived: chat.archived,
            created_at: timestamp(&chat.created_at),
            updated_at: timestamp(&chat.updated_at),
            last_error: chat.last_error.as_ref().map(|e| LastErrorView {
                kind: e.kind.as_str().to_owned(),
                message: e.message.clone(),
            }),
            queued: chat.queued.iter().map(QueuedView::from).collect(),
            pending_tool_calls: chat
                .pending_tool_calls
                .iter()
                .map(|c| PendingCallView {
                    tool_call_id: c.tool_call_id.clone(),
                    tool_name: c.tool_name.clone(),
                    args: c.args.clone(),
                })
                .collect(),
        }
    }
}

impl From<&QueuedMessage> for QueuedView {
    fn from(q: &QueuedMessage) -> Self {
        Self {
            id: q.id.to_string(),
            position: q.position,
            parts: q.parts.clone(),
            created_at: timestamp(&q.created_at),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct MessageView {
    pub id: i64,
    pub role: &'static str,
    pub parts: Vec<Part>,
    pub created_at: String,
    pub usage: Option<Usage>,
    pub interrupted: bool,
}

impl From<&StoredMessage> for MessageView {
    fn from(m: &StoredMessage) -> Self {
        Self {
            id: m.id,
            role: m.role.as_str(),
            parts: m.parts.clone(),
            created_at: timestamp(&m.created_at),
            usage: m.usage,
            interrupted: m.interrupted,
        }
    }
}

/// A new message's content: `text` or `parts`, exactly one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentInput {
    pub text: Option<String>,
    pub parts: Option<Vec<Part>>,
}

/// `POST /api/v1/chats`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateChatRequest {
    pub text: Option<String>,
    pub parts: Option<Vec<Part>>,
    pub model: Option<String>,
    pub title: Option<String>,
    pub system: Option<String>,
    #[serde(default)]
    pub tools: Vec<ClientTool>,
    pub max_steps: Option<i64>,
}

/// A client-side tool given at chat creation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Value,
}

/// `POST /api/v1/chats/{id}/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessageRequest {
    pub text: Option<String>,
    pub parts: Option<Vec<Part>>,
    #[serde(default)]
    pub busy: keel_store::Busy,
}

/// `POST /api/v1/chats/{id}/tool-results`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResultsRequest {
    pub results: Vec<keel_store::ToolResultInput>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListChatsQuery {
    pub limit: Option<u32>,
    pub before: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListMessagesQuery {
    pub after: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    pub after: Option<i64>,
}
