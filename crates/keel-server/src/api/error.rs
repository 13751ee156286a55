//! API errors: a status and the contract's `{"error": {"code", "message"}}` body.
//!
//! Every failure keeps its kind up to here, so a wrong id is a 404 and a wrong status a 409 —
//! never a 500. Only a genuine server fault (the database is down) is `internal`, and its
//! details go to the log under the request's id: the client gets the id, never the text.
//!
//! Beyond the contract's codes: `forbidden` (403, a foreign `Host` or `Origin`, with a
//! `reason`), `too_many_requests` (429, a cap), `budget_exceeded` (429, the caller's budget
//! is used up) and `unavailable` (503, overloaded).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The contract's error codes, serialised as [`Code::as_str`] spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    InvalidRequest,
    Unauthorized,
    NotFound,
    Conflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    Forbidden,
    TooManyRequests,
    /// The caller's budget is used up (429).
    BudgetExceeded,
    Internal,
    Unavailable,
}

impl Code {
    pub fn status(self) -> StatusCode {
        match self {
            Code::InvalidRequest => StatusCode::BAD_REQUEST,
            Code::Unauthorized => StatusCode::UNAUTHORIZED,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::Conflict => StatusCode::CONFLICT,
            Code::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::Forbidden => StatusCode::FORBIDDEN,
            Code::TooManyRequests | Code::BudgetExceeded => StatusCode::TOO_MANY_REQUESTS,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn as_str(self) -> &'static str {
        keel_core::names::serde_name(&self)
    }
}

/// An error answered to an API client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    /// A stable name for why a request was refused (`forbidden`, `too_many_requests`).
    pub reason: Option<&'static str>,
}

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    pub code: Code,
    pub message: String,
    /// Why a request was refused (403, 429, 503): `foreign_host`, `foreign_origin`,
    /// `cross_site`, `missing_host`, `sse_user_cap`, `sse_total_cap`, `overloaded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The request's id, also in the `x-request-id` header; the daemon's log names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// What a client is told about an internal error instead of its text.
pub(crate) const INTERNAL_MESSAGE: &str =
    "internal error; the daemon's log holds the details under this request's id";

impl ApiError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            reason: None,
        }
    }

    /// A refusal with its reason's stable name.
    pub(crate) fn refused(code: Code, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason: Some(reason),
            ..Self::new(code, message)
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidRequest, message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(Code::NotFound, what)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Code::Conflict, message)
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(
            Code::Unauthorized,
            "a valid `Authorization: Bearer <token>` header is required",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let request_id = crate::net::request_id::current();
        let message = if self.code == Code::Internal {
            tracing::error!(
                request_id = request_id.as_deref().unwrap_or("-"),
                error = %self.message,
                "internal error"
            );
            INTERNAL_MESSAGE.to_owned()
        } else {
            self.message
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message,
                reason: self.reason,
                request_id,
            },
        };
        (self.code.status(), Json(body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                Code::UnsupportedMediaType,
                "expected a body with `Content-Type: application/json`",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::new(Code::PayloadTooLarge, "request body is too large")
            }
            JsonRejection::JsonSyntaxError(e) => {
                ApiError::invalid(format!("malformed JSON: {}", e.body_text()))
            }
            JsonRejection::JsonDataError(e) => {
                ApiError::invalid(format!("invalid request body: {}", e.body_text()))
            }
            other => ApiError::invalid(other.body_text()),
        }
    }
}

impl From<keel_store::StoreError> for ApiError {
    fn from(error: keel_store::StoreError) -> Self {
        use keel_store::StoreError as E;
        match &error {
            E::NotFound { .. } => ApiError::not_found(error.to_string()),
            E::Conflict { .. }
            | E::QueueFull { .. }
            | E::IdempotencyInProgress
            | E::NothingToContinue => ApiError::conflict(error.to_string()),
            E::InvalidInput(_) => ApiError::invalid(error.to_string()),
            E::BudgetExceeded(message) => ApiError::new(Code::BudgetExceeded, message.clone()),
            E::LostOwnership { .. } | E::Fenced { .. } => ApiError::conflict(error.to_string()),
            E::IllegalMove { .. } | E::Corrupt { .. } | E::Database(_) | E::Migrate(_) => {
                ApiError::new(Code::Internal, error.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(error: ApiError) -> (StatusCode, serde_json::Value) {
        let response =
            crate::net::request_id::scope("req-1".to_owned(), async move { error.into_response() })
                .await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn an_internal_error_shows_a_request_id_and_never_its_text() {
        let error = ApiError::new(
            Code::Internal,
            "error returned from database: password authentication failed for user \"keel\"",
        );
        let (status, body) = body_of(error).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "internal");
        assert_eq!(body["error"]["message"], INTERNAL_MESSAGE);
        assert_eq!(body["error"]["request_id"], "req-1");
        assert!(!body.to_string().contains("password"));
    }

    #[tokio::test]
    async fn a_refusal_names_its_reason() {
        let error = ApiError::refused(Code::Forbidden, "foreign_origin", "no");
        let (status, body) = body_of(error).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(body["error"]["code"], "forbidden");
        assert_eq!(body["error"]["reason"], "foreign_origin");
        assert_eq!(body["error"]["message"], "no");
    }
}
