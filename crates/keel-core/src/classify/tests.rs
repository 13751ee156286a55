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
    let orphan =
        r#"{"error":{"message":"messages.3: tool_use ids were found without tool_result blocks"}}"#;
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
