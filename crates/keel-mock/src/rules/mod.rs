//! Rules the real APIs enforce with a `400`, each a pure function over the request JSON.
//!
//! A request that breaks one gets the real API's error (status, type, code, message), so a
//! Keel bug shows up as a failing test against the mock instead of a production incident.
//! Every rule cites the public API reference page it comes from.

pub(crate) mod chain;
pub(crate) mod prefill;
pub(crate) mod thinking;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::errors::{Flavor, envelope};

/// A request the real API refuses with `400 invalid_request_error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub message: String,
    pub code: Option<&'static str>,
    pub param: Option<&'static str>,
}

impl Violation {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: None,
            param: None,
        }
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn param(mut self, param: &'static str) -> Self {
        self.param = Some(param);
        self
    }

    /// The `400` response in `flavor`'s envelope.
    pub fn response(&self, flavor: Flavor) -> Response {
        let body = envelope(
            flavor,
            "invalid_request_error",
            self.code,
            &self.message,
            self.param,
        );
        (StatusCode::BAD_REQUEST, Json(body)).into_response()
    }
}
