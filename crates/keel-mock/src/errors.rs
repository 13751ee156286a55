//! HTTP error responses in each provider family's envelope.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::script::HttpError;

/// Which envelope errors use: OpenAI's `{"error": {...}}`, Anthropic's
/// `{"type": "error", "error": {...}}` or Google's `{"error": {code, message, status}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Anthropic,
    Google,
}

/// The error body of `flavor`.
pub(crate) fn envelope(
    flavor: Flavor,
    error_type: &str,
    code: Option<&str>,
    message: &str,
    param: Option<&str>,
) -> Value {
    match flavor {
        Flavor::OpenAi => json!({
            "error": {"message": message, "type": error_type, "param": param, "code": code}
        }),
        Flavor::Anthropic => json!({
            "type": "error",
            "error": {"type": error_type, "message": message}
        }),
        Flavor::Google => google(status_for_type(flavor, error_type), message),
    }
}

/// Google's error body: the HTTP status as `code` and its RPC status name
/// (<https://ai.google.dev/gemini-api/docs/troubleshooting#error-codes>).
pub(crate) fn google(code: u16, message: &str) -> Value {
    let status = match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    };
    json!({"error": {"code": code, "message": message, "status": status}})
}

/// A 400 for a request the mock cannot serve (bad JSON, bad directive).
pub(crate) fn invalid(flavor: Flavor, message: &str) -> Response {
    let body = envelope(flavor, "invalid_request_error", None, message, None);
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

/// A scripted HTTP error.
pub(crate) fn scripted(flavor: Flavor, error: &HttpError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let error_type = error
        .error_type
        .clone()
        .unwrap_or_else(|| type_for_status(status.as_u16()).to_owned());
    let code = error.code.clone().or_else(|| {
        // OpenAI puts the machine-readable reason of a 429 in `code`.
        (flavor == Flavor::OpenAi && status == StatusCode::TOO_MANY_REQUESTS)
            .then(|| "rate_limit_exceeded".to_owned())
    });
    let message = error
        .message
        .clone()
        .unwrap_or_else(|| message_for_type(&error_type).to_owned());
    let mut response = match &error.body {
        Some(raw) => (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            raw.clone(),
        )
            .into_response(),
        None if flavor == Flavor::Google => {
            (status, Json(google(status.as_u16(), &message))).into_response()
        }
        None => (
            status,
            Json(envelope(
                flavor,
                &error_type,
                code.as_deref(),
                &message,
                None,
            )),
        )
            .into_response(),
    };
    let headers = response.headers_mut();
    if let Some(value) = error
        .retry_after
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        headers.insert(header::RETRY_AFTER, value);
    }
    if let Some(ms) = error.retry_after_ms {
        headers.insert("retry-after-ms", HeaderValue::from(ms));
    }
    response
}

/// The provider error type a status usually comes with.
pub(crate) fn type_for_status(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The status a non-streaming response uses for an error type scripted as an in-stream
/// error (a non-streaming response has no stream to carry it).
pub(crate) fn status_for_type(flavor: Flavor, error_type: &str) -> u16 {
    match error_type {
        "overloaded_error" if flavor == Flavor::Anthropic => 529,
        "overloaded_error" => 503,
        "rate_limit_error" | "rate_limit_exceeded" => 429,
        "invalid_request_error" => 400,
        "not_found_error" => 404,
        "authentication_error" => 401,
        "permission_error" => 403,
        _ => 500,
    }
}

fn message_for_type(error_type: &str) -> &'static str {
    match error_type {
        "rate_limit_error" | "rate_limit_exceeded" => "Rate limit reached (mock)",
        "overloaded_error" => "Overloaded",
        "authentication_error" => "Invalid API key (mock)",
        "permission_error" => "Permission denied (mock)",
        "not_found_error" => "Not found (mock)",
        "invalid_request_error" => "Invalid request (mock)",
        "request_too_large" => "Request too large (mock)",
        _ => "Internal server error (mock)",
    }
}
