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
mod tests {
    use super::*;

    fn kind(status: Option<u16>, body: Option<&str>, message: Option<&str>) -> ErrorKind {
        classify(
            &Failure {
                status,
                body,
                message,
                ..Failure::default()
            },
            SystemTime::now(),
        )
        .kind
    }

    #[test]
    fn status_codes() {
        assert_eq!(kind(Some(429), None, None), ErrorKind::RateLimit);
        assert_eq!(kind(Some(529), None, None), ErrorKind::Overloaded);
        assert_eq!(kind(Some(401), None, None), ErrorKind::Auth);
        assert_eq!(kind(Some(403), None, None), ErrorKind::Auth);
        for s in [
            500, 502, 503, 504, 507, 520, 521, 522, 523, 524, 525, 526, 527, 528,
        ] {
            assert_eq!(kind(Some(s), None, None), ErrorKind::Server, "{s}");
        }
        assert_eq!(kind(Some(501), None, None), ErrorKind::Unknown);
        assert_eq!(kind(Some(400), None, None), ErrorKind::InvalidRequest);
    }

    #[test]
    fn insufficient_quota_is_a_usage_limit_not_a_rate_limit() {
        let body = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        let k = kind(Some(429), Some(body), None);
        assert_eq!(k, ErrorKind::UsageLimit);
        assert!(!k.is_retryable());
    }

    #[test]
    fn anthropic_overloaded_body() {
        let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let e = classify(
            &Failure {
                body: Some(body),
                ..Failure::default()
            },
            SystemTime::now(),
        );
        assert_eq!(e.kind, ErrorKind::Overloaded);
        assert_eq!(e.message, "Overloaded");
        assert_eq!(e.error_type.as_deref(), Some("overloaded_error"));
    }

    #[test]
    fn transport_messages() {
        for m in [
            "http2 error: connection error received: GOAWAY",
            "connection reset by peer",
            "Connection refused (os error 111)",
            "broken pipe",
            "unexpected EOF during chunk",
            "stream closed before message_stop",
            "stream error received: stream reset by peer (RST_STREAM)",
        ] {
            assert_eq!(kind(None, None, Some(m)), ErrorKind::Connection, "{m}");
        }
        assert_eq!(
            kind(None, None, Some("operation timed out")),
            ErrorKind::Timeout
        );
        assert_eq!(
            kind(None, None, Some("503 Service Unavailable")),
            ErrorKind::Server
        );
    }

    #[test]
    fn deterministic_request_errors_are_permanent() {
        let overflow = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#;
        assert_eq!(
            kind(Some(400), Some(overflow), None),
            ErrorKind::ContextOverflow
        );
        let gemini = r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(
            kind(Some(400), Some(gemini), None),
            ErrorKind::ContextOverflow
        );
        let gemini = r#"{"error":{"code":400,"message":"Please use a valid role: user, model.","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(
            kind(Some(400), Some(gemini), None),
            ErrorKind::InvalidRequest
        );
        let gemini = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
        assert_eq!(kind(Some(429), Some(gemini), None), ErrorKind::RateLimit);
        let gemini = r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;
        assert!(kind(Some(503), Some(gemini), None).is_retryable());
        let orphan = r#"{"error":{"message":"messages.3: tool_use ids were found without tool_result blocks"}}"#;
        assert_eq!(
            kind(Some(400), Some(orphan), None),
            ErrorKind::InvalidRequest
        );
        assert!(!ErrorKind::InvalidRequest.is_retryable());
        assert!(!ErrorKind::ContextOverflow.is_retryable());
        assert!(!ErrorKind::Auth.is_retryable());
        assert!(!ErrorKind::ContentFilter.is_retryable());
    }

    #[test]
    fn chain_broken_is_retryable() {
        let body = r#"{"error":{"message":"Previous response with id 'resp_abc' not found.","type":"invalid_request_error","param":"previous_response_id"}}"#;
        let k = kind(Some(400), Some(body), None);
        assert_eq!(k, ErrorKind::ChainBroken);
        assert!(k.is_retryable());
    }

    #[test]
    fn top_level_message_and_code() {
        let e = classify(
            &Failure {
                body: Some(r#"{"message":"slow down","code":"rate_limit_exceeded"}"#),
                ..Failure::default()
            },
            SystemTime::now(),
        );
        assert_eq!(e.kind, ErrorKind::RateLimit);
        assert_eq!(e.message, "slow down");
    }

    #[test]
    fn retry_after_prefers_milliseconds_and_reads_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let both = Failure {
            status: Some(429),
            retry_after_ms: Some("1500"),
            retry_after: Some("9"),
            ..Failure::default()
        };
        assert_eq!(
            classify(&both, now).retry_after,
            Some(Duration::from_millis(1500))
        );
        let secs = Failure {
            retry_after: Some("7"),
            ..Failure::default()
        };
        assert_eq!(
            classify(&secs, now).retry_after,
            Some(Duration::from_secs(7))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        let dated = Failure {
            retry_after: Some(&date),
            ..Failure::default()
        };
        assert_eq!(
            classify(&dated, now).retry_after,
            Some(Duration::from_secs(30))
        );
        let garbage = Failure {
            retry_after: Some("soon"),
            ..Failure::default()
        };
        assert_eq!(classify(&garbage, now).retry_after, None);
    }

    #[test]
    fn retry_after_never_panics_and_saturates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let wait = |ms: Option<&str>, secs: Option<&str>| {
            classify(
                &Failure {
                    status: Some(429),
                    retry_after_ms: ms,
                    retry_after: secs,
                    ..Failure::default()
                },
                now,
            )
            .retry_after
        };
        assert_eq!(wait(None, Some("1e20")), Some(Duration::MAX));
        assert_eq!(wait(Some("1e300"), None), Some(Duration::MAX));
        assert_eq!(wait(None, Some("inf")), None);
        assert_eq!(wait(None, Some("-5")), None);
        assert_eq!(wait(None, Some("NaN")), None);
        assert_eq!(wait(Some("-1"), Some("3")), Some(Duration::from_secs(3)));
        assert_eq!(wait(None, Some("0.25")), Some(Duration::from_millis(250)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(60));
        assert_eq!(wait(None, Some(&past)), Some(Duration::ZERO));
        assert_eq!(
            wait(None, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn transport_classes_decide_before_any_text() {
        let with = |transport, message| {
            classify(
                &Failure {
                    transport: Some(transport),
                    message: Some(message),
                    ..Failure::default()
                },
                SystemTime::now(),
            )
            .kind
        };
        // The wording says nothing a text match would know; the class decides.
        assert_eq!(
            with(Transport::Connect, "error sending request"),
            ErrorKind::Connection
        );
        assert_eq!(
            with(
                Transport::Connect,
                "dns error: failed to lookup address information"
            ),
            ErrorKind::Connection
        );
        assert_eq!(
            with(Transport::Timeout, "error sending request"),
            ErrorKind::Timeout
        );
        assert_eq!(
            with(Transport::Body, "unauthorized body"),
            ErrorKind::Connection
        );
        assert_eq!(
            with(Transport::Decode, "error decoding"),
            ErrorKind::Connection
        );
        assert!(ErrorKind::Connection.is_retryable());
        for m in [
            "dns error: failed to lookup address information: Name or service not known",
            "Network is unreachable (os error 101)",
        ] {
            assert_eq!(kind(None, None, Some(m)), ErrorKind::Connection, "{m}");
        }
    }

    #[test]
    fn a_responses_in_stream_server_error_is_retryable() {
        let event = r#"{"type":"error","code":"server_error","message":"The server had an error while processing your request.","param":null,"sequence_number":4}"#;
        let k = kind(None, Some(event), None);
        assert_eq!(k, ErrorKind::Server);
        assert!(k.is_retryable());
    }

    fn failed(status: u16, body: &str) -> ProviderError {
        classify(
            &Failure {
                status: Some(status),
                body: Some(body),
                ..Failure::default()
            },
            SystemTime::now(),
        )
    }

    #[test]
    fn a_refused_prefill_is_told_from_other_invalid_requests() {
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."},"request_id":"req_011CcmtaL3xq"}"#;
        let refused = failed(400, anthropic);
        assert_eq!(refused.kind, ErrorKind::InvalidRequest);
        assert!(is_prefill_refusal(&refused));
        for body in [
            // Bedrock passes the words on with its own suffix.
            r#"{"message":"This model does not support assistant message prefill. The conversation must end with a user message. (Service: BedrockRuntime)"}"#,
            r#"{"error":{"message":"Prefilling assistant messages is no longer supported"}}"#,
        ] {
            assert!(is_prefill_refusal(&failed(400, body)), "{body}");
        }
        for (status, body) in [
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after"}}"#,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"final assistant content cannot end with trailing whitespace"}}"#,
            ),
            // A server failure that mentions prefill is still the server's trouble.
            (
                500,
                r#"{"type":"error","error":{"type":"api_error","message":"prefill not supported right now"}}"#,
            ),
            (
                429,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"prefill unsupported"}}"#,
            ),
        ] {
            assert!(!is_prefill_refusal(&failed(status, body)), "{body}");
        }
    }
}
