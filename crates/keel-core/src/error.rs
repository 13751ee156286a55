//! Provider failures and their kinds.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What kind of failure a provider error is. The kind decides retrying and recovery; see
/// [`ErrorKind::is_retryable`] and ARCHITECTURE.md's failure model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    RateLimit,
    UsageLimit,
    Overloaded,
    Server,
    Timeout,
    Connection,
    StartupTimeout,
    IdleStall,
    ChainBroken,
    Auth,
    InvalidRequest,
    ContextOverflow,
    ContentFilter,
    Cancelled,
    /// Nothing matched; treated as permanent.
    Unknown,
}

impl ErrorKind {
    /// Whether an identical request may succeed when tried again.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimit
                | ErrorKind::Overloaded
                | ErrorKind::Server
                | ErrorKind::Timeout
                | ErrorKind::Connection
                | ErrorKind::StartupTimeout
                | ErrorKind::IdleStall
                | ErrorKind::ChainBroken
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RateLimit => "rate_limit",
            ErrorKind::UsageLimit => "usage_limit",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Server => "server",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::StartupTimeout => "startup_timeout",
            ErrorKind::IdleStall => "idle_stall",
            ErrorKind::ChainBroken => "chain_broken",
            ErrorKind::Auth => "auth",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::ContextOverflow => "context_overflow",
            ErrorKind::ContentFilter => "content_filter",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure reported by (or on the way to) a model provider, with everything the
/// classifier and the user need: kind, HTTP status, provider error type/code, Retry-After.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{provider} {kind}: {message}")]
pub struct ProviderError {
    pub kind: ErrorKind,
    pub message: String,
    pub status: Option<u16>,
    /// The provider's own error type (`error.type`), e.g. `overloaded_error`.
    pub error_type: Option<String>,
    /// The provider's own error code (`error.code`), e.g. `insufficient_quota`.
    pub error_code: Option<String>,
    pub retry_after: Option<Duration>,
    pub provider: String,
    pub model: String,
}

impl ProviderError {
    /// An error of a known kind, without HTTP details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            error_type: None,
            error_code: None,
            retry_after: None,
            provider: String::new(),
            model: String::new(),
        }
    }

    pub fn retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    pub fn with_source(mut self, provider: impl Into<String>, model: impl Into<String>) -> Self {
        self.provider = provider.into();
        self.model = model.into();
        self
    }
}
