//! The column form of each record and its conversion to and from the domain types.
//!
//! Both backends store the same primitive columns (text, 64-bit integers, booleans;
//! timestamps as milliseconds since the epoch, JSON as text), so one conversion serves
//! both and the backend code only binds and fetches these structs.

use chrono::{DateTime, TimeZone, Utc};
use keel_core::FinishReason;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::error::{Result, StoreError};
use crate::status::ChatStatus;
use crate::tree::Node;
use crate::types::{
    Chat, LastError, MessageKind, QueuedMessage, StoredMessage, ToolRecord, ToolState,
};

pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_ms(v: i64) -> DateTime<Utc> {
    // Out-of-range values cannot come from `ms`; clamp rather than fail a whole read.
    Utc.timestamp_millis_opt(v)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

pub(crate) fn to_json<T: Serialize + ?Sized>(what: &'static str, v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|source| StoreError::Corrupt { what, source })
}

pub(crate) fn from_json<T: DeserializeOwned>(what: &'static str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|source| StoreError::Corrupt { what, source })
}

pub(crate) fn uuid(what: &'static str, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt {
        what,
        source: serde::de::Error::custom(e),
    })
}

fn status(s: &str) -> Result<ChatStatus> {
    s.parse().map_err(|e| StoreError::Corrupt {
        what: "chats.status",
        source: serde::de::Error::custom(e),
    })
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ChatCols {
    pub id: String,
    pub owner: String,
    pub title: Option<String>,
    pub model: String,
    pub status: String,
    pub archived: bool,
    pub max_steps: Option<i64>,
    pub system_prompt: Option<String>,
    pub tools: String,
    pub worker_id: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub version: i64,
    pub history_version: i64,
    pub event_seq: i64,
    pub last_message_id: i64,
    pub last_error_kind: Option<String>,
    pub last_error_message: Option<String>,
    pub retry_state: Option<String>,
    pub pending_tool_calls: String,
    pub pending_deadline: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub compact_requested: bool,
    pub last_error_provider: Option<String>,
    pub last_error_url: Option<String>,
    pub leaf_id: i64,
    pub branch_seq: i64,
}

impl ChatCols {
    pub(crate) fn from_chat(c: &Chat) -> Result<Self> {
        Ok(Self {
            id: c.id.to_string(),
            owner: c.owner.clone(),
            title: c.title.clone(),
            model: c.model.clone(),
            status: c.status.as_str().to_owned(),
            archived: c.archived,
            max_steps: c.max_steps,
            system_prompt: c.system.clone(),
            tools: to_json("chats.tools", &c.tools)?,
            worker_id: c.worker_id.clone(),
            lease_expires_at: c.lease_expires_at.map(ms),
            version: c.version,
            history_version: c.history_version,
            event_seq: c.event_seq,
            last_message_id: c.last_message_id,
            last_error_kind: c.last_error.as_ref().map(|e| e.kind.as_str().to_owned()),
            last_error_message: c.last_error.as_ref().map(|e| e.message.clone()),
            retry_state: c
                .retry_state
                .as_ref()
                .map(|v| to_json("chats.retry_state", v))
                .transpose()?,
            pending_tool_calls: to_json("chats.pending_tool_calls", &c.pending_tool_calls)?,
            pending_deadline: c.pending_deadline.map(ms),
            created_at: ms(c.created_at),
            updated_at: ms(c.updated_at),
            compact_requested: c.compact_requested,
            last_error_provider: c.last_error.as_ref().and_then(|e| e.provider.clone()),
            last_error_url: c.last_error.as_ref().and_then(|e| e.url.clone()),
            leaf_id: c.leaf_id,
            branch_seq: c.branch_seq,
        })
    }

    pub(crate) fn into_chat(self) -> Result<Chat> {
        let last_error = match (self.last_error_kind, self.last_error_message) {
            (Some(kind), message) => Some(LastError {
                kind: serde_json::from_value(serde_json::Value::String(kind)).map_err(
                    |source| StoreError::Corrupt {
                        what: "chats.last_error_kind",
                        source,
                    },
                )?,
                message: message.unwrap_or_default(),
                provider: self.last_error_provider,
                url: self.last_error_url,
            }),
            (None, _) => None,
        };
        Ok(Chat {
            id: uuid("chats.id", &self.id)?,
            owner: self.owner,
            title: self.title,
            model: self.model,
            status: status(&self.status)?,
            archived: self.archived,
            max_steps: self.max_steps,
            system: self.system_prompt,
            tools: from_json("chats.tools", &self.tools)?,
            worker_id: self.worker_id,
            lease_expires_at: self.lease_expires_at.map(from_ms),
            version: self.version,
            history_version: self.history_version,
            event_seq: self.event_seq,
            last_message_id: self.last_message_id,
            last_error,
            retry_state: self
                .retry_state
                .as_deref()
                .map(|s| from_json("chats.retry_state", s))
                .transpose()?,
            pending_tool_calls: from_json("chats.pending_tool_calls", &self.pending_tool_calls)?,
            pending_deadline: self.pending_deadline.map(from_ms),
            created_at: from_ms(self.created_at),
            updated_at: from_ms(self.updated_at),
            compact_requested: self.compact_requested,
            leaf_id: self.leaf_id,
            branch_seq: self.branch_seq,
            queued: Vec::new(),
        })
    }
}

/// The few chat columns a lease fence and a live-part notice need: a worker's hot-path
/// writes (log windows, lease renewals) read these instead of the whole row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct FenceCols {
    pub id: String,
    pub owner: String,
    pub status: String,
    pub worker_id: Option<String>,
    pub version: i64,
    pub history_version: i64,
    pub event_seq: i64,
}

/// A chat as a worker's fence sees it (see [`FenceCols`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatFence {
    pub id: crate::types::ChatId,
    pub owner: String,
    pub status: ChatStatus,
    pub worker_id: Option<String>,
    pub version: i64,
    pub history_version: i64,
    /// As stored in the chat's row: the live-part log may reach past it (the row catches
    /// up when a transition writes it), so only a lower bound of the chat's sequence.
    pub event_seq: i64,
}

impl FenceCols {
    pub(crate) fn into_fence(self) -> Result<ChatFence> {
        Ok(ChatFence {
            id: uuid("chats.id", &self.id)?,
            owner: self.owner,
            status: status(&self.status)?,
            worker_id: self.worker_id,
            version: self.version,
            history_version: self.history_version,
            event_seq: self.event_seq,
        })
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct MessageCols {
    pub chat_id: String,
    pub id: i64,
    pub role: String,
    pub parts: String,
    pub content_version: i64,
    pub usage: Option<String>,
    pub context_limit: Option<i64>,
    pub runtime_ms: Option<i64>,
    pub interrupted: bool,
    pub provider_response_id: Option<String>,
    pub event_seq: i64,
    pub created_at: i64,
    pub kind: String,
    pub finish_reason: Option<String>,
    pub parent_id: Option<i64>,
    /// The ids of the message's siblings as a JSON array, read only by the reads clients
    /// see (`message_siblings` in [`crate::sql`]); absent elsewhere.
    #[sqlx(default)]
    pub siblings: Option<String>,
}

/// A finish reason as its bare snake_case name (`pause_turn`), as the API spells it.
fn finish_name(reason: FinishReason) -> Result<String> {
    match serde_json::to_value(reason) {
        Ok(serde_json::Value::String(name)) => Ok(name),
        Ok(other) => Err(StoreError::Corrupt {
            what: "messages.finish_reason",
            source: serde::ser::Error::custom(format!("not a name: {other}")),
        }),
        Err(source) => Err(StoreError::Corrupt {
            what: "messages.finish_reason",
            source,
        }),
    }
}

fn parse_finish(name: String) -> Result<FinishReason> {
    serde_json::from_value(serde_json::Value::String(name)).map_err(|source| StoreError::Corrupt {
        what: "messages.finish_reason",
        source,
    })
}

impl MessageCols {
    pub(crate) fn from_message(m: &StoredMessage) -> Result<Self> {
        Ok(Self {
            chat_id: m.chat_id.to_string(),
            id: m.id,
            role: m.role.as_str().to_owned(),
            parts: to_json("messages.parts", &m.parts)?,
            content_version: m.content_version,
            usage: m
                .usage
                .as_ref()
                .map(|u| to_json("messages.usage", u))
                .transpose()?,
            context_limit: m.context_limit,
            runtime_ms: m.runtime_ms,
            interrupted: m.interrupted,
            provider_response_id: m.provider_response_id.clone(),
            event_seq: m.event_seq,
            created_at: ms(m.created_at),
            kind: m.kind.as_str().to_owned(),
            finish_reason: m.finish_reason.map(finish_name).transpose()?,
            parent_id: m.parent_id,
            siblings: None,
        })
    }

    pub(crate) fn into_message(self) -> Result<StoredMessage> {
        Ok(StoredMessage {
            id: self.id,
            chat_id: uuid("messages.chat_id", &self.chat_id)?,
            role: serde_json::from_value(serde_json::Value::String(self.role)).map_err(
                |source| StoreError::Corrupt {
                    what: "messages.role",
                    source,
                },
            )?,
            parts: from_json("messages.parts", &self.parts)?,
            content_version: self.content_version,
            usage: self
                .usage
                .as_deref()
                .map(|s| from_json("messages.usage", s))
                .transpose()?,
            context_limit: self.context_limit,
            runtime_ms: self.runtime_ms,
            interrupted: self.interrupted,
            provider_response_id: self.provider_response_id,
            event_seq: self.event_seq,
            created_at: from_ms(self.created_at),
            kind: MessageKind::parse(&self.kind).ok_or_else(|| StoreError::Corrupt {
                what: "messages.kind",
                source: serde::de::Error::custom(format!("unknown kind {:?}", self.kind)),
            })?,
            finish_reason: self.finish_reason.map(parse_finish).transpose()?,
            parent_id: self.parent_id,
            siblings: siblings(self.id, self.siblings.as_deref())?,
        })
    }
}

/// A message's siblings from its `siblings` column, in id order: itself alone when the
/// column lists none (a summary is no one's sibling), nothing when it was not read.
fn siblings(id: i64, column: Option<&str>) -> Result<Vec<i64>> {
    let Some(column) = column else {
        return Ok(Vec::new());
    };
    let mut ids: Vec<i64> = from_json("messages.siblings", column)?;
    if ids.is_empty() {
        ids.push(id);
    }
    ids.sort_unstable();
    Ok(ids)
}

/// One message of a chat's tree as stored: id, parent id, role and kind.
pub(crate) type TreeRow = (i64, Option<i64>, String, String);

/// One row of a chat's tree as [`crate::tree`] takes it.
pub(crate) fn tree_node((id, parent, role, kind): TreeRow) -> Result<Node> {
    Ok(Node {
        id,
        parent,
        role: serde_json::from_value(serde_json::Value::String(role)).map_err(|source| {
            StoreError::Corrupt {
                what: "messages.role",
                source,
            }
        })?,
        kind: MessageKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
            what: "messages.kind",
            source: serde::de::Error::custom(format!("unknown kind {kind:?}")),
        })?,
    })
}

/// A row of a chat joined with its queue: the chat's columns and one queued message, if
/// the chat has any.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ChatAndQueued {
    #[sqlx(flatten)]
    chat: ChatCols,
    q_id: Option<String>,
    q_position: Option<i64>,
    q_parts: Option<String>,
    q_created_at: Option<i64>,
}

/// A chat read with its queue, as the store hands it out.
pub(crate) fn chat_with_queue((chat, queue): (ChatCols, Vec<QueuedCols>)) -> Result<Chat> {
    let mut chat = chat.into_chat()?;
    chat.queued = queue
        .into_iter()
        .map(QueuedCols::into_queued)
        .collect::<Result<_>>()?;
    Ok(chat)
}

impl ChatAndQueued {
    /// The chat and its queue from the join's rows (none: no such chat).
    pub(crate) fn gather(rows: Vec<Self>) -> Option<(ChatCols, Vec<QueuedCols>)> {
        let mut queue = Vec::with_capacity(rows.len());
        let mut chat = None;
        for row in rows {
            if let (Some(id), Some(position), Some(parts), Some(created_at)) =
                (row.q_id, row.q_position, row.q_parts, row.q_created_at)
            {
                queue.push(QueuedCols {
                    id,
                    chat_id: row.chat.id.clone(),
                    position,
                    parts,
                    created_at,
                });
            }
            chat.get_or_insert(row.chat);
        }
        chat.map(|chat| (chat, queue))
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct QueuedCols {
    pub id: String,
    pub chat_id: String,
    pub position: i64,
    pub parts: String,
    pub created_at: i64,
}

impl QueuedCols {
    pub(crate) fn from_queued(q: &QueuedMessage) -> Result<Self> {
        Ok(Self {
            id: q.id.to_string(),
            chat_id: q.chat_id.to_string(),
            position: q.position,
            parts: to_json("queued_messages.parts", &q.parts)?,
            created_at: ms(q.created_at),
        })
    }

    pub(crate) fn into_queued(self) -> Result<QueuedMessage> {
        Ok(QueuedMessage {
            id: uuid("queued_messages.id", &self.id)?,
            chat_id: uuid("queued_messages.chat_id", &self.chat_id)?,
            position: self.position,
            parts: from_json("queued_messages.parts", &self.parts)?,
            created_at: from_ms(self.created_at),
        })
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ToolRecordCols {
    pub chat_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
    pub state: String,
    pub result: Option<String>,
    pub is_error: bool,
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

impl ToolRecordCols {
    pub(crate) fn from_record(r: &ToolRecord) -> Result<Self> {
        Ok(Self {
            chat_id: r.chat_id.to_string(),
            tool_call_id: r.tool_call_id.clone(),
            tool_name: r.tool_name.clone(),
            args: r.args.clone(),
            state: match r.state {
                ToolState::Started => "started",
                ToolState::Finished => "finished",
            }
            .to_owned(),
            result: r
                .result
                .as_ref()
                .map(|v| to_json("tool_records.result", v))
                .transpose()?,
            is_error: r.is_error,
            started_at: ms(r.started_at),
            finished_at: r.finished_at.map(ms),
        })
    }

    pub(crate) fn into_record(self) -> Result<ToolRecord> {
        Ok(ToolRecord {
            chat_id: uuid("tool_records.chat_id", &self.chat_id)?,
            tool_call_id: self.tool_call_id,
            tool_name: self.tool_name,
            args: self.args,
            state: if self.state == "finished" {
                ToolState::Finished
            } else {
                ToolState::Started
            },
            result: self
                .result
                .as_deref()
                .map(|s| from_json("tool_records.result", s))
                .transpose()?,
            is_error: self.is_error,
            started_at: from_ms(self.started_at),
            finished_at: self.finished_at.map(from_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_are_listed_in_id_order_and_a_message_alone_is_its_own() {
        assert_eq!(siblings(9, Some("[9,2]")).unwrap(), vec![2, 9]);
        assert_eq!(siblings(4, Some("[]")).unwrap(), vec![4]);
        assert_eq!(siblings(4, None).unwrap(), Vec::<i64>::new());
        assert!(siblings(4, Some("{")).is_err());
    }
}
