//! API errors: a status and the contract's `{"error": {"code", "message"}}` body.
//!
//! Every failure keeps its kind up to here, so a wrong id is a 404 and a wrong status a 409 —
//! never a 500. Only a genuine server fault (the database is down) is `internal`.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The contract's error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidRequest,
    Unauthorized,
    NotFound,
    Conflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    Internal,
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
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidRequest => "invalid_request",
            Code::Unauthorized => "unauthorized",
            Code::NotFound => "not_found",
            Code::Conflict => "conflict",
            Code::PayloadTooLarge => "payload_too_large",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::Internal => "internal",
        }
    }
}

/// An error answered to an API client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    pub code: Code,
    pub message: String,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
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

    pub fn unauthorized() -> Self {
        Self::new(
            Code::Unauthorized,
            "a valid `Authorization: Bearer <token>` header is required",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.code == Code::Internal {
            tracing::error!(message = %self.message, "internal error answered to a client");
        }
        let body = Json(json!({"error": {"code": self.code.as_str(), "message": self.message}}));
        (self.code.status(), body).into_response()
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
            E::Conflict { .. } | E::QueueFull { .. } | E::IdempotencyInProgress => {
                ApiError::conflict(error.to_string())
            }
            E::InvalidInput(_) => ApiError::invalid(error.to_string()),
            E::LostOwnership { .. } | E::Fenced { .. } => ApiError::conflict(error.to_string()),
            E::IllegalMove { .. } | E::Corrupt { .. } | E::Database(_) | E::Migrate(_) => {
                ApiError::new(Code::Internal, error.to_string())
            }
        }
    }
}
