//! Request plumbing shared by the adapters, and the mapping of every failure onto
//! [`keel_core::classify`].
//!
//! An [`Endpoint`] is one configured provider for one upstream model: base URL, the headers
//! every request carries (authentication included) and the shared [`reqwest::Client`].
//! [`ErrorContext`] turns HTTP statuses, bodies, Retry-After headers, transport errors and
//! cancellation into [`ProviderError`]s.

use std::error::Error as StdError;
use std::time::SystemTime;

use keel_core::classify::{Failure, Transport, classify, classify_message, classify_transport};
use keel_core::{Cancel, ErrorKind, ProviderError};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

/// Provider and model names attached to every error of one adapter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorContext {
    pub provider: String,
    pub model: String,
}

impl ErrorContext {
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            model: model.into(),
        }
    }

    /// An error reported as a body: an HTTP error response, or the JSON of an in-stream
    /// error event.
    pub fn body(&self, status: Option<u16>, body: &str) -> ProviderError {
        classify(
            &Failure {
                status,
                body: Some(body),
                provider: &self.provider,
                model: &self.model,
                ..Failure::default()
            },
            SystemTime::now(),
        )
    }

    /// An error known only by its message.
    pub fn message(&self, message: &str) -> ProviderError {
        classify_message(message, &self.provider, &self.model)
    }

    /// A transport error. Its kind comes from the HTTP client's typed predicates (connect,
    /// timeout, body, decode, request), never from wording; the whole source chain becomes
    /// the message, since the outermost one ("error decoding response body") says little.
    pub fn transport(&self, err: &(dyn StdError + 'static)) -> ProviderError {
        classify_transport(
            &error_chain(err),
            transport_class(err),
            &self.provider,
            &self.model,
        )
    }

    pub fn cancelled(&self) -> ProviderError {
        ProviderError::new(ErrorKind::Cancelled, "request cancelled")
            .with_source(&self.provider, &self.model)
    }

    /// A non-success HTTP response.
    pub fn http(&self, status: u16, headers: &HeaderMap, body: Option<&str>) -> ProviderError {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        classify(
            &Failure {
                status: Some(status),
                body,
                retry_after_ms: header("retry-after-ms"),
                retry_after: header("retry-after"),
                message: None,
                transport: None,
                provider: &self.provider,
                model: &self.model,
            },
            SystemTime::now(),
        )
    }
}

/// The class of a transport failure, from the first [`reqwest::Error`] in its chain.
pub fn transport_class(err: &(dyn StdError + 'static)) -> Option<Transport> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(e) = e.downcast_ref::<reqwest::Error>() {
            // Timeout first: a connect timeout is both.
            return if e.is_timeout() {
                Some(Transport::Timeout)
            } else if e.is_connect() {
                Some(Transport::Connect)
            } else if e.is_body() {
                Some(Transport::Body)
            } else if e.is_decode() {
                Some(Transport::Decode)
            } else if e.is_request() {
                Some(Transport::Request)
            } else {
                None
            };
        }
        current = e.source();
    }
    None
}

/// Joins an error's `Display` with those of its sources, skipping a source whose text the
/// outer message already contains.
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = inner.source();
    }
    message
}

/// One provider endpoint for one upstream model.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub ctx: ErrorContext,
    pub base_url: String,
    /// Authentication and configured extra headers, sent with every request.
    pub headers: HeaderMap,
    pub http: reqwest::Client,
}

impl Endpoint {
    pub fn provider(&self) -> &str {
        &self.ctx.provider
    }

    pub fn model(&self) -> &str {
        &self.ctx.model
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base_url.trim_end_matches('/'), path)
    }

    /// POSTs a JSON body and returns the response once its status is a success. Fails with
    /// a classified error otherwise, or with `Cancelled` as soon as `cancel` fires.
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        cancel: &Cancel,
    ) -> Result<reqwest::Response, ProviderError> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| self.ctx.message(&format!("cannot encode request: {e}")))?;
        let request = self
            .http
            .post(self.url(path))
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
            .body(bytes);
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(self.ctx.cancelled()),
            // The client's own message names the URL, query included; the error keeps the
            // address without it.
            sent = request.send() => sent
                .map_err(|e| self.ctx.transport(&e.without_url()).at(&self.url(path)))?,
        };
        let status = response.status();
        // A JSON body where an event stream was asked for is an error report, e.g. from a
        // gateway in front of the provider; reading it as a stream would hide it.
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if status.is_success() && !is_json {
            return Ok(response);
        }
        let headers = response.headers().clone();
        let body = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(self.ctx.cancelled()),
            body = response.text() => body.ok(),
        };
        let body = body.as_deref().map(clip).filter(|b| !b.is_empty());
        // A bare status, or a 404 (a wrong base URL or model path, usually), says little
        // without the address that answered it: every such error carries it.
        Err(self
            .ctx
            .http(status.as_u16(), &headers, body)
            .at(&self.url(path)))
    }
}

/// Error bodies become error messages; an HTML error page from a proxy can be megabytes.
const MAX_ERROR_BODY: usize = 8 * 1024;

fn clip(body: &str) -> &str {
    if body.len() <= MAX_ERROR_BODY {
        return body;
    }
    let mut end = MAX_ERROR_BODY;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    &body[..end]
}
