//! The one error type of the store, with kinds the HTTP layer maps to status codes.

use uuid::Uuid;

use crate::status::{ChatStatus, Transition};

/// Why a store call failed. Every variant except [`StoreError::Database`] and
/// [`StoreError::Migrate`] is the caller's fault or a lost race, and leaves stored state
/// unchanged.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The chat, message, queued message or user does not exist.
    #[error("{what} not found")]
    NotFound { what: &'static str },
    /// The chat's status does not allow the transition.
    #[error("cannot {transition} while the chat is {status}")]
    Conflict {
        status: ChatStatus,
        transition: Transition,
    },
    /// The request is malformed: wrong tool call ids, oversize or empty content, editing a
    /// non-user message, an unusable URL.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The chat already holds the maximum number of queued messages.
    #[error("the queue is full ({limit} messages)")]
    QueueFull { limit: usize },
    /// The worker no longer owns the chat: its lease was taken over, released or cleared.
    #[error("worker {worker_id} no longer owns chat {chat_id}")]
    LostOwnership { chat_id: Uuid, worker_id: String },
    /// The chat's history changed (an edit) since the worker claimed it; its write would
    /// resurrect truncated history.
    #[error("chat {chat_id} history is at version {actual}, the write expected {expected}")]
    Fenced {
        chat_id: Uuid,
        expected: i64,
        actual: i64,
    },
    /// A concurrent request with the same idempotency key committed first and this one
    /// could not read its result; the caller may simply repeat the request.
    #[error("a concurrent request with the same idempotency key is in progress")]
    IdempotencyInProgress,
    /// Stored data that cannot be decoded (a corrupted row or an incompatible version).
    #[error("corrupt stored data in {what}: {source}")]
    Corrupt {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl StoreError {
    pub(crate) fn not_found(what: &'static str) -> Self {
        StoreError::NotFound { what }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        StoreError::InvalidInput(msg.into())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
