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
    /// The chat's owner reached the spending limit set for them (not a provider's failure).
    BudgetExceeded,
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
        crate::names::serde_name(&self)
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
    /// The address the failed request went to, without its query, fragment or
    /// credentials ([`public_url`]); `None` when the failure did not come from a request.
    pub url: Option<String>,
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
            url: None,
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

    /// The error of a request to `url`, which is kept only as [`public_url`] shows it.
    pub fn at(mut self, url: &str) -> Self {
        self.url = Some(public_url(url));
        self
    }
}

/// An address as it may be shown to users and stored: scheme, host, port and path, with
/// the user name, password, query (API keys ride there: `?key=`) and fragment dropped.
/// Something that is not an absolute URL is shown up to its first `?` or `#`.
pub fn public_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_url_keeps_no_credentials_query_or_fragment() {
        for (url, shown) in [
            (
                "https://api.openai.com/v1/chat/completions",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "https://gen.example.com/v1beta/models?key=SECRET",
                "https://gen.example.com/v1beta/models",
            ),
            (
                "https://user:pass@proxy.example:8443/v1/messages#x",
                "https://proxy.example:8443/v1/messages",
            ),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("http://a@b@host/p?q=@", "http://host/p"),
            ("not a url?token=1", "not a url"),
        ] {
            assert_eq!(public_url(url), shown, "{url}");
        }
    }
}
