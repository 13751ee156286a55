//! The chat export format: a chat's settings and its whole message tree as one JSON
//! document, versioned by `format`. An export read back by an import and exported again is
//! the same document but for the chat's `id`: message ids, links and timestamps are kept.

use chrono::{DateTime, Utc};
use keel_core::{FinishReason, Part, Role, Usage};
use keel_store::{ChatExport, ImportChat, MessageKind, StoredMessage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::dto::{ClientTool, timestamp};

/// The version of the format this daemon writes and reads.
pub(crate) const FORMAT: u64 = 1;

/// A chat with every branch: `GET /chats/{id}/export`, `POST /chats/import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ChatExport, example = json!({
    "format": 1,
    "title": "Moved chat",
    "tools": [],
    "archived": false,
    "created_at": "2026-01-02T03:04:05.000Z",
    "current_leaf": 3,
    "messages": [
        {"id": 1, "parent_id": null, "role": "user", "kind": "normal",
         "parts": [{"type": "text", "text": "Hello"}],
         "created_at": "2026-01-02T03:04:05.000Z"},
        {"id": 2, "parent_id": 1, "role": "assistant", "kind": "normal",
         "parts": [{"type": "text", "text": "Hi! How can I help?"}],
         "created_at": "2026-01-02T03:04:06.000Z", "finish_reason": "stop"},
        {"id": 3, "parent_id": 1, "role": "assistant", "kind": "normal",
         "parts": [{"type": "text", "text": "Hello again."}],
         "created_at": "2026-01-02T03:04:07.000Z", "finish_reason": "stop"}
    ]
}))]
#[serde(deny_unknown_fields)]
pub(crate) struct ChatFile {
    /// The version of this format; `1`.
    pub format: u64,
    /// The exported chat's id; an import ignores it (the new chat has its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub title: Option<String>,
    /// The model's id; on import, absent means the daemon's default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Client-side tool definitions.
    #[serde(default)]
    pub tools: Vec<ClientTool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<i64>,
    #[serde(default)]
    pub archived: bool,
    pub created_at: String,
    /// The last message of the current branch: the branch is the path to it.
    pub current_leaf: i64,
    /// Every message of every branch, in id order; summaries of compacted history too.
    pub messages: Vec<MessageFile>,
}

/// One message of the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageFile {
    pub id: i64,
    /// The message before this one on its branch; `null` for a first message.
    pub parent_id: Option<i64>,
    /// `user`, `assistant`, `tool` or `system`.
    pub role: String,
    /// `normal`; `summary` (compacted history, what later prompts start from; an
    /// assistant message) or `compaction_notice` (a system message clients show).
    #[serde(default = "normal")]
    pub kind: String,
    /// Text, reasoning (with its provider metadata: signatures, encrypted content), tool
    /// calls and results, as `GET /chats/{id}/messages` shows them.
    pub parts: Vec<Part>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The provider's id of the response (what a chained OpenAI Responses call continues).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_response_id: Option<String>,
    /// Why the model stopped: `stop`, `length`, `tool_calls`, `content_filter`,
    /// `pause_turn`, `error` or `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

fn normal() -> String {
    MessageKind::Normal.as_str().to_owned()
}

/// A value's serde name (`tool_calls`); a value with none has an empty one.
fn name_of<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => String::new(),
    }
}

fn parse_name<T: for<'de> Deserialize<'de>>(name: &str) -> Option<T> {
    serde_json::from_value(Value::String(name.to_owned())).ok()
}

impl ChatFile {
    /// The document of an exported chat; an error when its stored tool definitions are not
    /// the API's shape (a database written by something else).
    pub(crate) fn from_export(export: &ChatExport) -> Result<Self, serde_json::Error> {
        let chat = &export.chat;
        let tools = match &chat.tools {
            Value::Null => Vec::new(),
            tools => serde_json::from_value(tools.clone())?,
        };
        Ok(Self {
            format: FORMAT,
            id: Some(chat.id.to_string()),
            title: chat.title.clone(),
            model: Some(chat.model.clone()),
            system: chat.system.clone(),
            tools,
            max_steps: chat.max_steps,
            archived: chat.archived,
            created_at: timestamp(&chat.created_at),
            current_leaf: chat.leaf_id,
            messages: export.messages.iter().map(MessageFile::from).collect(),
        })
    }

    /// Reads a document, its version first: one of another version is refused as such,
    /// before its fields are looked at. The error names what is wrong.
    pub(crate) fn parse(value: Value) -> Result<Self, String> {
        match value.get("format") {
            Some(Value::Number(n)) if n.as_u64() == Some(FORMAT) => {}
            Some(other) => {
                return Err(format!(
                    "unsupported export format {other}: this daemon reads format {FORMAT}"
                ));
            }
            None => return Err("not a chat export: it has no `format` field".into()),
        }
        serde_json::from_value(value).map_err(|e| format!("invalid chat export: {e}"))
    }

    /// The store's request for this chat, owned by `owner`, with `model` (the file's, or
    /// the default the caller chose). Settings are checked by the caller; the tree by the
    /// store.
    pub(crate) fn into_import(self, owner: String, model: String) -> Result<ImportChat, String> {
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| m.into_stored().map_err(|e| format!("messages[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ImportChat {
            owner,
            title: self.title,
            model,
            system: self.system,
            tools: serde_json::to_value(&self.tools).map_err(|e| e.to_string())?,
            max_steps: self.max_steps,
            archived: self.archived,
            created_at: parse_time(&self.created_at).map_err(|e| format!("created_at: {e}"))?,
            leaf_id: self.current_leaf,
            messages,
        })
    }
}

fn parse_time(raw: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{raw:?} is not an RFC 3339 time ({e})"))
}

impl From<&StoredMessage> for MessageFile {
    fn from(m: &StoredMessage) -> Self {
        Self {
            id: m.id,
            parent_id: m.parent_id,
            role: m.role.as_str().to_owned(),
            kind: m.kind.as_str().to_owned(),
            parts: m.parts.clone(),
            created_at: timestamp(&m.created_at),
            usage: m.usage,
            context_limit: m.context_limit,
            runtime_ms: m.runtime_ms,
            interrupted: m.interrupted,
            provider_response_id: m.provider_response_id.clone(),
            finish_reason: m.finish_reason.as_ref().map(name_of),
        }
    }
}

impl MessageFile {
    fn into_stored(self) -> Result<StoredMessage, String> {
        let role: Role = parse_name(&self.role).ok_or_else(|| {
            format!(
                "role {:?} is not one of user, assistant, tool, system",
                self.role
            )
        })?;
        let kind = MessageKind::parse(&self.kind).ok_or_else(|| {
            format!(
                "kind {:?} is not one of normal, summary, compaction_notice",
                self.kind
            )
        })?;
        let finish_reason = match &self.finish_reason {
            Some(name) => Some(
                parse_name::<FinishReason>(name)
                    .ok_or_else(|| format!("finish_reason {name:?} is not a known reason"))?,
            ),
            None => None,
        };
        Ok(StoredMessage {
            id: self.id,
            // The store gives the new chat's id, numbers and siblings.
            chat_id: uuid::Uuid::nil(),
            role,
            parts: self.parts,
            content_version: 1,
            usage: self.usage,
            context_limit: self.context_limit,
            runtime_ms: self.runtime_ms,
            interrupted: self.interrupted,
            provider_response_id: self.provider_response_id,
            event_seq: 0,
            created_at: parse_time(&self.created_at).map_err(|e| format!("created_at: {e}"))?,
            kind,
            finish_reason,
            parent_id: self.parent_id,
            siblings: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn file() -> Value {
        json!({"format": 1, "title": null, "created_at": "2026-01-02T03:04:05.000Z",
            "current_leaf": 1, "messages": [{"id": 1, "parent_id": null, "role": "user",
            "parts": [{"type": "text", "text": "hi"}], "created_at": "2026-01-02T03:04:05.000Z"}]})
    }

    #[test]
    fn a_document_of_another_version_is_refused_by_its_version() {
        let mut v2 = file();
        v2["format"] = json!(2);
        v2["new_field"] = json!(true);
        let error = ChatFile::parse(v2).unwrap_err();
        assert!(error.contains("unsupported export format 2"), "{error}");
        let error = ChatFile::parse(json!({"messages": []})).unwrap_err();
        assert!(error.contains("no `format`"), "{error}");
    }

    #[test]
    fn unknown_fields_and_bad_values_are_named() {
        let mut extra = file();
        extra["colour"] = json!("red");
        assert!(ChatFile::parse(extra).unwrap_err().contains("colour"));
        let mut role = file();
        role["messages"][0]["role"] = json!("narrator");
        let parsed = ChatFile::parse(role).unwrap();
        let error = parsed.into_import("u".into(), "m".into()).unwrap_err();
        assert!(
            error.starts_with("messages[0]: role \"narrator\""),
            "{error}"
        );
        let mut time = file();
        time["messages"][0]["created_at"] = json!("yesterday");
        let error = ChatFile::parse(time)
            .unwrap()
            .into_import("u".into(), "m".into())
            .unwrap_err();
        assert!(error.contains("messages[0]: created_at"), "{error}");
    }

    #[test]
    fn a_message_reads_back_as_it_was_written() {
        let parsed = ChatFile::parse(file()).unwrap();
        let import = parsed.clone().into_import("u".into(), "m".into()).unwrap();
        let back = MessageFile::from(&import.messages[0]);
        assert_eq!(back, parsed.messages[0]);
    }
}
