//! What a service operation fails with: its kind is kept to the HTTP edge, where `From`
//! turns it into the contract's [`ApiError`] (status, code and body).

use keel_store::{ChatId, StoreError};

use crate::api::error::{ApiError, Code};

/// A refused operation, by kind.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// What the caller named does not exist for them (`404`).
    #[error("{0}")]
    NotFound(String),
    /// The input is wrong (`400`).
    #[error("{0}")]
    Invalid(String),
    /// The chat is not in a state that allows it, or another request won (`409`).
    #[error("{0}")]
    Conflict(String),
    /// A cap is reached (`429`), with its reason's stable name.
    #[error("{message}")]
    TooMany {
        reason: &'static str,
        message: String,
    },
    /// The store refused or failed; its own kind says which (budget exceeded, queue full,
    /// not found, a database fault …).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ServiceError {
    /// The answer for a chat that does not exist or is another's: the same either way, so
    /// it tells no one whether someone else's chat id exists.
    pub(crate) fn chat_not_found(id: ChatId) -> Self {
        Self::NotFound(format!("chat {id} not found"))
    }

    /// A store error of an operation on the chat `id`: its not-found as
    /// [`ServiceError::chat_not_found`].
    pub(crate) fn of_chat(id: ChatId, error: StoreError) -> Self {
        match error {
            StoreError::NotFound { what: "chat" } => Self::chat_not_found(id),
            other => Self::Store(other),
        }
    }

    /// Whether this is a not-found (of the service or of the store).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Self::NotFound(_) | Self::Store(StoreError::NotFound { .. })
        )
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        match error {
            ServiceError::NotFound(message) => ApiError::not_found(message),
            ServiceError::Invalid(message) => ApiError::invalid(message),
            ServiceError::Conflict(message) => ApiError::conflict(message),
            ServiceError::TooMany { reason, message } => {
                ApiError::refused(Code::TooManyRequests, reason, message)
            }
            ServiceError::Store(error) => error.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_keeps_its_code() {
        let id = ChatId::nil();
        let api = |e: ServiceError| ApiError::from(e).code;
        assert_eq!(api(ServiceError::chat_not_found(id)), Code::NotFound);
        assert_eq!(api(ServiceError::Invalid("x".into())), Code::InvalidRequest);
        assert_eq!(api(ServiceError::Conflict("x".into())), Code::Conflict);
        let too_many = ServiceError::TooMany {
            reason: "sse_user_cap",
            message: "x".into(),
        };
        assert_eq!(ApiError::from(too_many).reason, Some("sse_user_cap"));
        let budget = StoreError::BudgetExceeded("spent".into());
        assert_eq!(api(budget.into()), Code::BudgetExceeded);
        let gone = ServiceError::of_chat(id, StoreError::NotFound { what: "chat" });
        assert_eq!(ApiError::from(gone).message, format!("chat {id} not found"));
    }
}
