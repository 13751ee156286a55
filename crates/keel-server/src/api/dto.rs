//! The JSON shapes of the public contract, built from store records. Their schemas in the
//! OpenAPI document are derived from these types (`ToSchema`, named as the contract names them).

use chrono::{DateTime, SecondsFormat, Utc};
use keel_core::{Part, Usage};
use keel_store::{Chat, QueuedMessage, StoredMessage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

pub(crate) fn timestamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A chat, its queue and what it waits on.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Chat)]
pub(crate) struct ChatView {
    pub id: String,
    pub title: Option<String>,
    pub model: String,
    /// `idle`, `running`, `interrupting`, `requires_action` or `error`.
    pub status: &'static str,
    pub archived: bool,
    pub created_at: String,
    pub updated_at: String,
    pub last_error: Option<LastErrorView>,
    pub queued: Vec<QueuedView>,
    pub pending_tool_calls: Vec<PendingCallView>,
    /// Tokens and cost of every step the chat committed, on every branch (`GET /chats/{id}`
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::api::usage::UsageView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = LastError)]
pub(crate) struct LastErrorView {
    pub kind: String,
    pub message: String,
    /// The configured name of the provider whose request failed, when one did.
    pub provider: Option<String>,
    /// The address that request went to, without its query or credentials.
    pub url: Option<String>,
}

impl From<&keel_store::LastError> for LastErrorView {
    fn from(error: &keel_store::LastError) -> Self {
        Self {
            kind: error.kind.as_str().to_owned(),
            message: error.message.clone(),
            provider: error.provider.clone(),
            url: error.url.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = QueuedMessage)]
pub(crate) struct QueuedView {
    pub id: String,
    pub position: i64,
    pub parts: Vec<Part>,
    pub created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PendingToolCall)]
pub(crate) struct PendingCallView {
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
            last_error: chat.last_error.as_ref().map(LastErrorView::from),
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
            usage: None,
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

/// A committed message.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Message)]
pub struct MessageView {
    pub id: i64,
    /// `user`, `assistant`, `tool` or `system`.
    pub role: &'static str,
    pub parts: Vec<Part>,
    pub created_at: String,
    pub usage: Option<Usage>,
    pub interrupted: bool,
    /// The message before this one on its branch; `null` for a first message.
    pub parent_id: Option<i64>,
    /// The ids of the messages with the same parent, this one included, in creation
    /// order: the versions a client may switch between (`[id]` when there is one).
    pub siblings: Vec<i64>,
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
            parent_id: m.parent_id,
            siblings: if m.siblings.is_empty() {
                vec![m.id]
            } else {
                m.siblings.clone()
            },
        }
    }
}

/// `POST /api/v1/chats/{id}/branch`: the message whose branch becomes current.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = SwitchBranch, example = json!({"message_id": 3}))]
#[serde(deny_unknown_fields)]
pub(crate) struct SwitchBranchRequest {
    /// Any message of the chat; the branch through it, to its newest message, becomes
    /// current.
    pub message_id: i64,
}

/// A new message's content: `text` or `parts`, exactly one.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = Content, example = json!({"text": "Rename the file to notes.md"}))]
#[serde(deny_unknown_fields)]
pub(crate) struct ContentInput {
    pub text: Option<String>,
    #[serde(default, deserialize_with = "user_parts")]
    pub parts: Option<Vec<Part>>,
}

/// `PATCH /api/v1/chats/{id}`: what to change (at least one of the two).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = UpdateChat, example = json!({"title": "Trip to Lisbon"}))]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateChatRequest {
    /// The new title: trimmed, 1 to 200 characters, one line.
    #[schema(min_length = 1, max_length = 200)]
    pub title: Option<String>,
    /// The model the chat's next model call uses; one of `GET /models`.
    pub model: Option<String>,
}

/// `POST /api/v1/chats`: the first message (`text` or `parts`, exactly one) and the chat's
/// settings.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = CreateChat, example = json!({
    "text": "What is in the workspace?",
    "title": "Workspace tour",
    "tools": [{"name": "ask_user", "description": "Ask the user a question",
               "parameters": {"type": "object", "properties": {"question": {"type": "string"}}}}]
}))]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateChatRequest {
    pub text: Option<String>,
    #[serde(default, deserialize_with = "user_parts")]
    pub parts: Option<Vec<Part>>,
    pub model: Option<String>,
    pub title: Option<String>,
    pub system: Option<String>,
    #[serde(default)]
    pub tools: Vec<ClientTool>,
    #[serde(default, deserialize_with = "integral")]
    #[schema(minimum = 1)]
    pub max_steps: Option<i64>,
}

/// Parts as the contract writes them. serde would also take a variant's index as the `type`
/// tag (`"type": 0` for text), which the contract does not allow and no client should rely on.
fn user_parts<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<Part>>, D::Error> {
    use serde::de::Error;
    let Some(values) = Option::<Vec<Value>>::deserialize(deserializer)? else {
        return Ok(None);
    };
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            if !value.get("type").is_some_and(Value::is_string) {
                return Err(D::Error::custom(format!(
                    "parts[{i}]: `type` must be a string"
                )));
            }
            serde_json::from_value(value).map_err(|e| D::Error::custom(format!("parts[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// An optional integer that may be written as `24.0`: JSON has one number type, and clients
/// (JavaScript's among them) do not always keep the two spellings apart.
fn integral<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    if let Some(n) = number.as_i64() {
        return Ok(Some(n));
    }
    match number.as_f64() {
        // The bounds keep the cast exact: every f64 in them with no fraction is an i64.
        Some(f) if f.fract() == 0.0 && (-9.0e18..=9.0e18).contains(&f) => Ok(Some(f as i64)),
        _ => Err(D::Error::custom(format!(
            "expected an integer, found {number}"
        ))),
    }
}

/// A client-side tool given at chat creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Value,
}

/// `POST /api/v1/chats/{id}/messages`: `text` or `parts`, exactly one, and what to do when the
/// chat is busy.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = SendMessage, example = json!({"text": "And the tests?", "busy": "queue"}))]
#[serde(deny_unknown_fields)]
pub(crate) struct SendMessageRequest {
    pub text: Option<String>,
    #[serde(default, deserialize_with = "user_parts")]
    pub parts: Option<Vec<Part>>,
    #[serde(default)]
    pub busy: keel_store::Busy,
}

/// `POST /api/v1/chats/{id}/tool-results`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = ToolResults, example = json!({
    "results": [{"tool_call_id": "call_1", "result": {"answer": "yes"}}]
}))]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolResultsRequest {
    #[schema(min_items = 1)]
    pub results: Vec<keel_store::ToolResultInput>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListChatsQuery {
    /// At most this many chats (1 to 200; default 50; more is taken as 200).
    #[param(minimum = 0, maximum = 4294967295_u64, format = Int64)]
    pub limit: Option<u32>,
    /// Only chats older than this chat id (the last id of the previous page).
    #[param(format = "uuid")]
    pub before: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListMessagesQuery {
    /// Only messages with a greater id.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// At most this many messages (1 to 1000); absent: all after `after`.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// List the branch through this message (to its newest message) instead of the
    /// current one.
    #[param(minimum = 1)]
    pub branch: Option<i64>,
}

/// The largest page of messages one request may ask for.
pub(crate) const MAX_PAGE: i64 = 1000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Replay events with a greater sequence number first (as `Last-Event-ID`).
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

/// One Server-Sent Event as a client's parser reads it: the schema of every
/// `text/event-stream` answer (what each stream's events hold is in `docs/api.md` and
/// `docs/compat.md`).
#[derive(Debug, ToSchema)]
#[allow(
    dead_code,
    reason = "describes the events; the streams write them with axum's `Event`"
)]
pub struct SseEvent {
    /// The event type; absent means `message`.
    pub event: Option<String>,
    /// The event's data, JSON for every Keel stream.
    pub data: String,
    /// The event's id, for `Last-Event-ID`.
    pub id: Option<String>,
}

/// `GET /api/v1/chats`: newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChatList {
    pub chats: Vec<ChatView>,
}

/// `GET /api/v1/chats/{id}/messages`: in order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MessageList {
    pub messages: Vec<MessageView>,
}

/// What became of a sent message: it started a run (`message_id`) or was queued (`queue_id`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Sent {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
}

/// A configured model.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Model)]
pub(crate) struct ModelView {
    pub id: String,
    pub provider: String,
    pub context_limit: Option<u64>,
    pub default: bool,
}

/// `GET /api/v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ModelList {
    pub models: Vec<ModelView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_steps(body: &str) -> Result<Option<i64>, serde_json::Error> {
        serde_json::from_str::<CreateChatRequest>(body).map(|r| r.max_steps)
    }

    #[test]
    fn max_steps_takes_integral_numbers_in_either_spelling() {
        assert_eq!(max_steps(r#"{"text":"hi"}"#).unwrap(), None);
        assert_eq!(
            max_steps(r#"{"text":"hi","max_steps":null}"#).unwrap(),
            None
        );
        assert_eq!(
            max_steps(r#"{"text":"hi","max_steps":24}"#).unwrap(),
            Some(24)
        );
        assert_eq!(
            max_steps(r#"{"text":"hi","max_steps":24.0}"#).unwrap(),
            Some(24)
        );
        assert!(max_steps(r#"{"text":"hi","max_steps":24.5}"#).is_err());
        assert!(max_steps(r#"{"text":"hi","max_steps":1e300}"#).is_err());
        assert!(max_steps(r#"{"text":"hi","max_steps":"24"}"#).is_err());
    }

    #[test]
    fn a_part_type_is_a_string_not_a_variant_index() {
        let parts = |body: &str| serde_json::from_str::<SendMessageRequest>(body).map(|r| r.parts);
        assert!(parts(r#"{"parts":[{"type":0,"text":"0"}]}"#).is_err());
        assert!(parts(r#"{"parts":[{"text":"0"}]}"#).is_err());
        assert_eq!(
            parts(r#"{"parts":[{"type":"text","text":"0"}]}"#).unwrap(),
            Some(vec![Part::text("0")])
        );
        assert_eq!(parts(r#"{"parts":null}"#).unwrap(), None);
    }
}
