//! The Gemini decoder on recorded streams, chunked every way, and the adapter over HTTP:
//! its path, key header and error classes.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::server::{Reply, TestServer};
use common::{ctx, final_error, finish_of, replay, split, transcript};
use futures::StreamExt;
use keel_core::{
    Cancel, ErrorKind, FinishReason, LanguageModel, Message, ModelCall, StreamEvent, Usage,
};
use keel_providers::gemini::GeminiDecoder;
use keel_providers::{ProviderKind, ProviderSettings, build_model};
use serde_json::json;

const TRANSCRIPTS: &[&str] = &[
    "gemini_thinking_tools.sse",
    "gemini_error.sse",
    "gemini_safety.sse",
];

#[test]
fn any_chunking_yields_the_same_events() {
    common::any_chunking_yields_the_same_events(|| GeminiDecoder::new(ctx()), TRANSCRIPTS);
}

fn decode(name: &str) -> Vec<StreamEvent> {
    replay(GeminiDecoder::new(ctx()), &transcript(name))
}

#[test]
fn thoughts_text_and_parallel_calls_keep_their_signatures() {
    let events = decode("gemini_thinking_tools.sse");
    let text = |id: &str, delta: &str| StreamEvent::TextDelta {
        id: id.into(),
        delta: delta.into(),
    };
    let thought = |delta: &str| StreamEvent::ReasoningDelta {
        id: "reasoning-0".into(),
        delta: delta.into(),
        metadata: None,
    };
    let call = |id: &str, path: &str| {
        vec![
            StreamEvent::ToolInputStart {
                id: id.into(),
                tool_name: "read_file".into(),
                provider_executed: false,
            },
            StreamEvent::ToolInputDelta {
                id: id.into(),
                delta: format!("{{\"path\":\"{path}\"}}"),
            },
            StreamEvent::ToolInputEnd { id: id.into() },
            StreamEvent::ToolCall {
                id: id.into(),
                tool_name: "read_file".into(),
                args: format!("{{\"path\":\"{path}\"}}"),
                provider_executed: false,
            },
        ]
    };
    let mut expected = vec![
        StreamEvent::ReasoningStart {
            id: "reasoning-0".into(),
            metadata: None,
        },
        thought("The user wants "),
        thought("two files — señor."),
        StreamEvent::ReasoningEnd {
            id: "reasoning-0".into(),
            metadata: Some(json!({"gemini": {"thought_signature": "VGhvdWdodA=="}})),
        },
        StreamEvent::TextStart {
            id: "text-1".into(),
        },
        text("text-1", "Reading "),
        text("text-1", "both."),
        StreamEvent::TextEnd {
            id: "text-1".into(),
        },
    ];
    expected.extend(call("fc-a", "a.txt"));
    expected.push(StreamEvent::ToolCallMetadata {
        id: "fc-a".into(),
        metadata: json!({"gemini": {"thought_signature": "Q2FsbFNpZw=="}}),
    });
    expected.extend(call("fc-b", "b.txt"));
    expected.push(StreamEvent::Finish {
        reason: FinishReason::ToolCalls,
        usage: Usage {
            input_tokens: 40,
            output_tokens: 42,
            cache_read_tokens: 10,
            cache_write_tokens: 0,
            reasoning_tokens: 12,
        },
        provider_metadata: None,
    });
    assert_eq!(events, expected);
}

#[test]
fn an_error_chunk_mid_stream_is_classified_by_its_code() {
    let events = decode("gemini_error.sse");
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Overloaded);
    assert_eq!(error.status, Some(503));
    assert!(error.retryable());
    assert_eq!(common::text_of(&events), "Hel");
}

#[test]
fn a_safety_stop_is_a_refusal_after_the_text() {
    let events = decode("gemini_safety.sse");
    assert_eq!(finish_of(&events), Some(FinishReason::ContentFilter));
    assert!(events.contains(&StreamEvent::RefusalDelta {
        id: "refusal".into(),
        delta: "Gemini stopped the reply (SAFETY).".into(),
    }));
}

#[test]
fn a_stream_that_closes_before_a_finish_reason_is_a_retryable_cut() {
    let bytes = transcript("gemini_thinking_tools.sse");
    let text = String::from_utf8(bytes.clone()).unwrap();
    let last = text.rfind("data: ").unwrap();
    let events = replay(GeminiDecoder::new(ctx()), &bytes[..last]);
    let error = final_error(&events);
    assert_eq!(error.kind, ErrorKind::Connection);
    assert!(finish_of(&events).is_none());
}

const LIMIT: Duration = Duration::from_secs(10);

fn model(server: &TestServer) -> std::sync::Arc<dyn LanguageModel> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut settings = ProviderSettings::new("google", ProviderKind::Gemini);
    settings.base_url = Some(server.base_url.clone());
    settings.api_key = Some("g-key".into());
    build_model(&settings, "gemini-3-pro-preview", reqwest::Client::new()).unwrap()
}

fn call() -> ModelCall {
    ModelCall {
        messages: vec![Message::system("sys"), Message::user("hi")],
        ..ModelCall::default()
    }
}

#[tokio::test]
async fn the_adapter_streams_from_its_model_path_with_the_google_key_header() {
    let bytes = transcript("gemini_thinking_tools.sse");
    let server = TestServer::start(Reply::sse(split(&bytes, &[7, 300, 301]))).await;
    let model = model(&server);
    let stream = model.stream(call(), Cancel::new()).await.unwrap();
    let events: Vec<StreamEvent> = tokio::time::timeout(LIMIT, stream.collect()).await.unwrap();
    assert_eq!(events, replay(GeminiDecoder::new(ctx()), &bytes));
    let request = &server.requests()[0];
    // The query (`alt=sse`) is not captured here; the mock provider refuses a request
    // without it.
    assert_eq!(
        request.path,
        "/v1/models/gemini-3-pro-preview:streamGenerateContent"
    );
    assert_eq!(request.headers["x-goog-api-key"], "g-key");
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(
        request.body,
        json!({"systemInstruction": {"parts": [{"text": "sys"}]},
               "contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    );
}

async fn start_error(status: u16, body: &str) -> keel_core::ProviderError {
    let server = TestServer::start(Reply::error(status, body)).await;
    match model(&server).stream(call(), Cancel::new()).await {
        Ok(_) => panic!("expected the call to fail"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn googles_errors_are_classified_like_the_others() {
    let exhausted = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
    let error = start_error(429, exhausted).await;
    assert_eq!(error.kind, ErrorKind::RateLimit);
    assert!(error.retryable());
    let unavailable = r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;
    assert!(start_error(503, unavailable).await.retryable());
    let invalid = r#"{"error":{"code":400,"message":"Please use a valid role: user, model.","status":"INVALID_ARGUMENT"}}"#;
    let error = start_error(400, invalid).await;
    assert_eq!(error.kind, ErrorKind::InvalidRequest);
    assert!(!error.retryable());
    let long = r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
    assert_eq!(
        start_error(400, long).await.kind,
        ErrorKind::ContextOverflow
    );
}
