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
    /// A transition tried to leave the chat in a status the state machine does not allow
    /// from where it started: a bug, and nothing was written.
    #[error("{transition} may not move a chat from {from} to {to}")]
    IllegalMove {
        transition: Transition,
        from: ChatStatus,
        to: ChatStatus,
    },
    /// Continuing was asked of a chat whose last message is not a reply the user stopped
    /// ([`crate::stopped_reply`]).
    #[error("the chat's last message is not a stopped reply that can be continued")]
    NothingToContinue,
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
    /// The chat's owner has used up their budget: no run may start.
    #[error("budget exceeded: {0}")]
    BudgetExceeded(String),
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

    /// A failure of the database or the way to it that may pass if the call is repeated
    /// later: no free connection, a dropped connection, a busy SQLite file, a PostgreSQL
    /// serialization failure, deadlock or server restart. Nothing was written.
    pub fn is_transient(&self) -> bool {
        let StoreError::Database(error) = self else {
            return false;
        };
        match error {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|code| transient_code(&code)),
            _ => false,
        }
    }
}

/// SQLite result codes and PostgreSQL SQLSTATEs of failures worth repeating.
fn transient_code(code: &str) -> bool {
    matches!(
        code,
        // SQLite: SQLITE_BUSY, SQLITE_LOCKED (and their extended codes end in the same byte).
        "5" | "6" | "261" | "262" | "517" | "773"
        // PostgreSQL: serialization failure, deadlock, admin/crash shutdown, cannot connect now.
        | "40001" | "40P01" | "57P01" | "57P02" | "57P03"
    ) || code.starts_with("08")
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_worth_repeating_are_transient() {
        assert!(StoreError::Database(sqlx::Error::PoolTimedOut).is_transient());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(StoreError::Database(sqlx::Error::Io(io)).is_transient());
        assert!(!StoreError::Database(sqlx::Error::RowNotFound).is_transient());
        assert!(!StoreError::not_found("chat").is_transient());
        assert!(transient_code("40001") && transient_code("08006") && transient_code("5"));
        assert!(!transient_code("23505") && !transient_code("42P01"));
    }
}
