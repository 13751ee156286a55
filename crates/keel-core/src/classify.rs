//! The one place that decides what kind of failure a provider error is.
//!
//! Adapters describe a failure as a [`Failure`] (HTTP status, body, Retry-After headers,
//! transport message) and [`classify`] turns it into a [`ProviderError`]. The order of the
//! checks matters: specific provider codes beat status codes, and status codes beat loose
//! message text, because messages are the least reliable signal. A transport failure is
//! described by its [`Transport`] class, read from the HTTP client's typed predicates, so
//! that no wording of an operating system or library decides whether Keel retries.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::error::{ErrorKind, ProviderError};

/// Raw facts about a failed provider call or stream.
#[derive(Debug, Clone, Default)]
pub struct Failure<'a> {
    pub status: Option<u16>,
    /// The response body (usually JSON), or the `error` object of an in-stream error event.
    pub body: Option<&'a str>,
    /// Value of the `retry-after-ms` header.
    pub retry_after_ms: Option<&'a str>,
    /// Value of the `retry-after` header: seconds or an HTTP date.
    pub retry_after: Option<&'a str>,
    /// A transport-level message (connection reset, timed out, ...).
    pub message: Option<&'a str>,
    /// What kind of transport failure this is, when the HTTP client says so.
    pub transport: Option<Transport>,
    pub provider: &'a str,
    pub model: &'a str,
}

/// A transport failure as the HTTP client's typed predicates describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The connection could not be made: refused, DNS failure, network unreachable.
    Connect,
    /// A connect, read or request timeout.
    Timeout,
    /// The request or response body failed mid-way (reset, closed early).
    Body,
    /// The response could not be decoded (a truncated chunked body, broken framing).
    Decode,
    /// Sending the request failed after the connection was made.
    Request,
}

/// Classifies a failure. `now` resolves HTTP-date Retry-After values.
pub fn classify(failure: &Failure<'_>, now: SystemTime) -> ProviderError {
    let details = failure.body.map(BodyDetails::parse).unwrap_or_default();
    let message = details
        .message
        .clone()
        .or_else(|| failure.message.map(str::to_owned))
        .or_else(|| {
            failure
                .body
                .filter(|b| !b.trim().is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| match failure.status {
            Some(status) => format!("HTTP status {status}"),
            None => "provider failure".to_owned(),
        });
    let text = format!(
        "{} {} {}",
        message,
        failure.message.unwrap_or_default(),
        failure.body.unwrap_or_default()
    )
    .to_lowercase();
    let kind = match failure.transport {
        Some(Transport::Timeout) => ErrorKind::Timeout,
        Some(Transport::Connect | Transport::Body | Transport::Decode | Transport::Request) => {
            ErrorKind::Connection
        }
        None => kind_of(failure.status, &details, &text),
    };
    ProviderError {
        kind,
        message,
        status: failure.status,
        error_type: details.error_type,
        error_code: details.error_code,
        retry_after: retry_after(failure, now),
        provider: failure.provider.to_owned(),
        model: failure.model.to_owned(),
        url: None,
    }
}

/// Classifies a bare message (e.g. a transport error) with no HTTP details.
pub fn classify_message(message: &str, provider: &str, model: &str) -> ProviderError {
    classify_transport(message, None, provider, model)
}

/// Classifies a transport failure: its class from the HTTP client when known, and its
/// message for the user (and as the last resort when the class is unknown).
pub fn classify_transport(
    message: &str,
    transport: Option<Transport>,
    provider: &str,
    model: &str,
) -> ProviderError {
    classify(
        &Failure {
            message: Some(message),
            transport,
            provider,
            model,
            ..Failure::default()
        },
        SystemTime::now(),
    )
}

fn kind_of(status: Option<u16>, details: &BodyDetails, text: &str) -> ErrorKind {
    let code = details.error_code.as_deref().unwrap_or_default();
    let ty = details.error_type.as_deref().unwrap_or_default();
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));

    if code == "insufficient_quota" || ty == "insufficient_quota" || has(&["insufficient_quota"]) {
        return ErrorKind::UsageLimit;
    }
    if code == "context_length_exceeded"
        || has(&[
            "context_length_exceeded",
            "context length",
            "maximum context",
            "context window",
            "prompt is too long",
            "too many tokens",
            "exceeds the context",
            "exceed context",
            "input is too long",
            // Gemini: "The input token count (N) exceeds the maximum number of tokens
            // allowed (M)."
            "exceeds the maximum number of tokens",
        ])
    {
        return ErrorKind::ContextOverflow;
    }
    if code == "previous_response_not_found"
        || (text.contains("previous response") && text.contains("not found"))
    {
        return ErrorKind::ChainBroken;
    }
    if matches!(code, "content_filter" | "content_policy_violation")
        || has(&[
            "content filter",
            "content_filter",
            "content management policy",
        ])
    {
        return ErrorKind::ContentFilter;
    }
    match status {
        Some(429) => return ErrorKind::RateLimit,
        Some(529) => return ErrorKind::Overloaded,
        Some(401 | 403) => return ErrorKind::Auth,
        Some(408) => return ErrorKind::Timeout,
        Some(503) if has(&["overloaded"]) => return ErrorKind::Overloaded,
        // Every 5xx but "not implemented" and "HTTP version not supported" is the server's
        // trouble, including Cloudflare's 520–528 in front of a provider.
        Some(500 | 502..=504 | 506..=599) => return ErrorKind::Server,
        Some(400 | 404 | 405 | 409 | 413 | 415 | 422) => return ErrorKind::InvalidRequest,
        _ => {}
    }
    // The type decides; a bare code (a Responses in-stream `error` event carries only
    // `code`, e.g. `server_error`) decides the same way.
    for name in [ty, code] {
        match name {
            "overloaded_error" => return ErrorKind::Overloaded,
            "rate_limit_error" | "rate_limit_exceeded" | "requests" | "tokens" => {
                return ErrorKind::RateLimit;
            }
            "authentication_error" | "permission_error" => return ErrorKind::Auth,
            "invalid_request_error" | "not_found_error" | "request_too_large" => {
                return ErrorKind::InvalidRequest;
            }
            "api_error" | "server_error" | "internal_server_error" => return ErrorKind::Server,
            _ => {}
        }
    }
    if has(&["overloaded"]) {
        return ErrorKind::Overloaded;
    }
    if has(&["rate limit", "rate_limit", "too many requests"]) {
        return ErrorKind::RateLimit;
    }
    if has(&[
        "invalid api key",
        "incorrect api key",
        "unauthorized",
        "authentication",
    ]) {
        return ErrorKind::Auth;
    }
    if has(&[
        "no tool call found",
        "orphan",
        "tool_use ids were found without",
    ]) {
        return ErrorKind::InvalidRequest;
    }
    if has(&["idle stall", "stalled"]) {
        return ErrorKind::IdleStall;
    }
    if has(&[
        "goaway",
        "connection reset",
        "reset by peer",
        "connection refused",
        "connection closed",
        "broken pipe",
        "unexpected eof",
        "end of file",
        "stream closed",
        "closed before",
        "ended before",
        "stream reset",
        "rst_stream",
        "error decoding response body",
        "incomplete message",
        "connection error",
        "dns error",
        "failed to lookup address",
        "name or service not known",
        "temporary failure in name resolution",
        "network is unreachable",
        "network unreachable",
        "host is unreachable",
        "no route to host",
    ]) {
        return ErrorKind::Connection;
    }
    if has(&["timed out", "timeout", "deadline exceeded"]) {
        return ErrorKind::Timeout;
    }
    if has(&[
        "internal server error",
        "bad gateway",
        "service unavailable",
        "gateway timeout",
        "server error",
    ]) {
        return ErrorKind::Server;
    }
    if has(&["cancelled", "canceled"]) {
        return ErrorKind::Cancelled;
    }
    ErrorKind::Unknown
}

/// Whether `error` is a provider refusing a request that ends in a partial assistant reply
/// (native prefill) because the model does not take one: Anthropic answers Claude 4.6 and
/// later with `400 invalid_request_error` "This model does not support assistant message
/// prefill. The conversation must end with a user message." (Bedrock and gateways pass the
/// same words on). The loop then continues that model by instruction instead.
pub fn is_prefill_refusal(error: &ProviderError) -> bool {
    if error.kind != ErrorKind::InvalidRequest || error.status.is_some_and(|s| s != 400) {
        return false;
    }
    let text = error.message.to_lowercase();
    text.contains("prefill")
        && [
            "not support",
            "no longer support",
            "unsupported",
            "not allowed",
            "must end with a user message",
        ]
        .iter()
        .any(|n| text.contains(n))
}

/// The wait a provider asks for: `retry-after-ms` first, then `retry-after` in seconds or as
/// an HTTP date. Negative, NaN and unparsable values are ignored; a wait too long to
/// represent (`1e20`) is [`Duration::MAX`], which the retry policy refuses to wait out.
fn retry_after(failure: &Failure<'_>, now: SystemTime) -> Option<Duration> {
    if let Some(wait) = failure
        .retry_after_ms
        .and_then(|v| seconds(v.trim(), 1000.0))
    {
        return Some(wait);
    }
    let raw = failure.retry_after?.trim();
    if raw.parse::<f64>().is_ok() {
        return seconds(raw, 1.0);
    }
    let when = httpdate::parse_http_date(raw).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `raw / per_second` seconds, for a finite, non-negative number.
fn seconds(raw: &str, per_second: f64) -> Option<Duration> {
    let value = raw.parse::<f64>().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(value / per_second).unwrap_or(Duration::MAX))
}

/// Type, code and message found in a provider error body. Both the nested
/// `{"error": {...}}` shape and a flat top-level object are understood.
#[derive(Debug, Default)]
struct BodyDetails {
    error_type: Option<String>,
    error_code: Option<String>,
    message: Option<String>,
}

impl BodyDetails {
    fn parse(body: &str) -> Self {
        let Ok(value) = serde_json::from_str::<Value>(body) else {
            return Self::default();
        };
        let nested = value.get("error").filter(|e| e.is_object());
        let field = |name: &str| -> Option<String> {
            let pick = |v: &Value| match v.get(name) {
                Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            nested.and_then(pick).or_else(|| pick(&value))
        };
        let error_type = field("type").filter(|t| t != "error");
        Self {
            error_type,
            error_code: field("code"),
            message: field("message").or_else(|| match value.get("error") {
                Some(Value::String(s)) => Some(s.clone()),
                _ => None,
            }),
        }
    }
}

#[cfg(test)]
mod tests;
