//! The Chat Completions adapter against a real third-party server: llama-cpp-python's
//! OpenAI-compatible server with a tiny model, started by `scripts/llama-cpp-compat.sh`.
//!
//! The tests read the server's base URL (including `/v1`) from `KEEL_TEST_LLAMA_CPP_URL`
//! and its context size from `KEEL_TEST_LLAMA_CPP_N_CTX`. They are ignored in the ordinary
//! test run, which needs no Python or model, and the script runs them with `--ignored`; run
//! without the URL, they fail. Replies are sampled
//! at temperature 0 with a fixed seed, and the assertions are about the shape of the
//! stream, never the model's wording. The server runs one reply at a time, so the script
//! runs the tests one at a time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use keel_core::classify::{Failure, classify};
use keel_core::{
    CallOptions, Cancel, CancelCause, ErrorKind, FinishReason, LanguageModel, Message, ModelCall,
    ProviderError, StreamEvent, Usage,
};
use keel_providers::{ProviderKind, ProviderSettings, build_model, http_client};
use serde_json::json;

/// The process's rustls crypto provider, which the `keel` binary installs in `main`.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

const URL_VAR: &str = "KEEL_TEST_LLAMA_CPP_URL";
const N_CTX_VAR: &str = "KEEL_TEST_LLAMA_CPP_N_CTX";

/// Bounds every whole reply: a tiny model on two CPU cores answers in seconds, so
/// two minutes mean a hang, not a slow machine.
const LIMIT: Duration = Duration::from_secs(120);

/// How long a cancelled stream may take to end. Cancellation drops the connection without
/// waiting for the server, so this is generous.
const CANCEL_LIMIT: Duration = Duration::from_secs(2);

fn base_url() -> String {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            panic!("{URL_VAR} is unset; scripts/llama-cpp-compat.sh starts the server and sets it")
        }
    }
}

fn n_ctx() -> usize {
    std::env::var(N_CTX_VAR)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(512)
}

fn model(base_url: &str) -> Arc<dyn LanguageModel> {
    let mut settings = ProviderSettings::new("llama-cpp", ProviderKind::OpenAiChat);
    settings.base_url = Some(base_url.to_owned());
    // llama-cpp-python reads only the older output-limit field.
    settings.output_limit_field = keel_providers::OutputLimitField::MaxTokens;
    install_crypto_provider();
    build_model(&settings, "smollm2", http_client().unwrap()).unwrap()
}

/// A deterministic call: temperature 0 and a fixed seed (llama-cpp-python reads `seed`).
fn call(prompt: &str, max_output_tokens: u32) -> ModelCall {
    let mut provider_options = serde_json::Map::new();
    provider_options.insert("seed".into(), json!(42));
    ModelCall {
        messages: vec![
            Message::system("You are a helpful assistant."),
            Message::user(prompt),
        ],
        options: CallOptions {
            temperature: Some(0.0),
            max_output_tokens: Some(max_output_tokens),
            provider_options,
            ..CallOptions::default()
        },
        ..ModelCall::default()
    }
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

fn errors(events: &[StreamEvent]) -> Vec<&ProviderError> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Error(e) => Some(e),
            _ => None,
        })
        .collect()
}

async fn collect(model: &dyn LanguageModel, call: ModelCall) -> Vec<StreamEvent> {
    let stream = tokio::time::timeout(LIMIT, model.stream(call, Cancel::new()))
        .await
        .expect("the server did not answer in time")
        .unwrap_or_else(|e| panic!("the call failed: {e:?}"));
    tokio::time::timeout(LIMIT, stream.collect())
        .await
        .expect("the reply did not finish in time")
}

#[tokio::test]
#[ignore = "needs a llama-cpp-python server: scripts/llama-cpp-compat.sh runs it"]
async fn streams_text_deltas_and_finishes_with_a_reason_and_usage() {
    let url = base_url();
    let model = model(&url);
    let events = collect(&*model, call("Name three colours.", 32)).await;

    assert!(errors(&events).is_empty(), "errors: {:?}", errors(&events));
    let deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
        .count();
    // Streaming, not one buffered blob: a reply of up to 32 tokens arrives in pieces.
    assert!(deltas >= 2, "expected several text deltas, got {deltas}");
    let text = text_of(&events);
    assert!(!text.trim().is_empty(), "empty reply");
    assert!(matches!(
        events.first(),
        Some(StreamEvent::TextStart { .. })
    ));
    let Some(StreamEvent::Finish { reason, usage, .. }) = events.last() else {
        panic!("the stream did not end with a finish: {:?}", events.last());
    };
    assert!(
        matches!(reason, FinishReason::Stop | FinishReason::Length),
        "finish reason {reason:?}"
    );
    // The settings ask for usage (`include_usage`, the default). llama-cpp-python accepts
    // the option but sends no usage in a stream, so usage is checked only when it comes.
    if *usage == Usage::default() {
        eprintln!("the server sent no usage");
    } else {
        assert!(usage.input_tokens > 0, "no prompt tokens in {usage:?}");
        assert!(usage.output_tokens > 0, "no completion tokens in {usage:?}");
        assert!(
            usage.output_tokens <= 32,
            "more tokens than asked: {usage:?}"
        );
    }
    eprintln!("reply ({deltas} deltas, {reason:?}, {usage:?}): {text:?}");
}

#[tokio::test]
#[ignore = "needs a llama-cpp-python server: scripts/llama-cpp-compat.sh runs it"]
async fn cancelling_mid_stream_ends_the_stream_promptly_and_the_server_keeps_serving() {
    let url = base_url();
    let model = model(&url);
    let cancel = Cancel::new();
    let long = call("Count from 1 to 200, one number per line.", 400);
    let mut stream = tokio::time::timeout(LIMIT, model.stream(long, cancel.clone()))
        .await
        .expect("the server did not answer in time")
        .unwrap_or_else(|e| panic!("the call failed: {e:?}"));

    let mut deltas = 0;
    while deltas < 3 {
        match tokio::time::timeout(LIMIT, stream.next()).await.unwrap() {
            Some(StreamEvent::TextDelta { .. }) => deltas += 1,
            Some(StreamEvent::Finish { .. }) => panic!("the reply finished before the cancel"),
            Some(StreamEvent::Error(e)) => panic!("error before the cancel: {e:?}"),
            Some(_) => {}
            None => panic!("the stream ended before the cancel"),
        }
    }
    cancel.cancel(CancelCause::Interrupted);
    let started = Instant::now();
    let rest: Vec<StreamEvent> = tokio::time::timeout(CANCEL_LIMIT, stream.collect())
        .await
        .expect("the stream did not end promptly after the cancel");
    let took = started.elapsed();
    match rest.last() {
        Some(StreamEvent::Error(e)) => {
            assert_eq!(e.kind, ErrorKind::Cancelled, "{e:?}");
            assert!(!e.retryable());
        }
        other => panic!("the stream did not end with a cancellation: {other:?}"),
    }
    assert!(
        !rest.iter().any(|e| matches!(e, StreamEvent::Finish { .. })),
        "a cancelled stream finished normally: {rest:?}"
    );
    assert_eq!(cancel.cause(), Some(CancelCause::Interrupted));
    eprintln!(
        "cancelled after {deltas} deltas; stream ended {took:?} later with {} more events",
        rest.len()
    );

    // The server must notice the dropped connection and free its model for the next caller.
    let events = collect(&*model, call("Say hello.", 8)).await;
    assert!(
        matches!(events.last(), Some(StreamEvent::Finish { .. })),
        "the next reply after a cancel failed: {:?}",
        events.last()
    );
}

/// An over-long prompt, and the status and body with which the server rejects it when asked
/// without streaming.
async fn overflow_without_streaming(base_url: &str, prompt: &str) -> (u16, String) {
    let body = json!({
        "model": "smollm2",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 16,
    });
    install_crypto_provider();
    let response = http_client()
        .unwrap()
        .post(format!(
            "{}/chat/completions",
            base_url.trim_end_matches('/')
        ))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
#[ignore = "needs a llama-cpp-python server: scripts/llama-cpp-compat.sh runs it"]
async fn a_prompt_longer_than_the_context_is_a_context_overflow() {
    let url = base_url();
    let model = model(&url);
    // Each repetition is at least one token, so twice the context size is always too long.
    let prompt = "apple ".repeat(2 * n_ctx());

    // The server's own error report, as it sends it for a call without streaming, is what
    // the classifier has to recognise.
    let (status, body) = tokio::time::timeout(LIMIT, overflow_without_streaming(&url, &prompt))
        .await
        .expect("the server did not answer in time");
    eprintln!("overflow without streaming: {status} {body}");
    assert_eq!(status, 400, "{body}");
    let classified = classify(
        &Failure {
            status: Some(status),
            body: Some(&body),
            provider: "llama-cpp",
            model: "smollm2",
            ..Failure::default()
        },
        SystemTime::now(),
    );
    assert_eq!(
        classified.kind,
        ErrorKind::ContextOverflow,
        "{classified:?}"
    );
    assert!(!classified.retryable());

    // Streaming, llama-cpp-python (0.3.36) checks the length only after it has answered
    // 200 and opened the event stream; it then logs the error and closes the stream
    // without a chunk. Keel can only see a stream cut short, a retryable connection error.
    // Either that or a proper overflow report is accepted; anything else fails.
    let events = match tokio::time::timeout(LIMIT, model.stream(call(&prompt, 16), Cancel::new()))
        .await
        .expect("the server did not answer in time")
    {
        Err(e) => vec![StreamEvent::Error(e)],
        Ok(stream) => tokio::time::timeout(LIMIT, stream.collect())
            .await
            .expect("the reply did not finish in time"),
    };
    let Some(StreamEvent::Error(error)) = events.last() else {
        panic!("an over-long prompt did not fail: {events:?}");
    };
    eprintln!("overflow while streaming: {error:?}");
    assert_eq!(error.provider, "llama-cpp");
    if error.kind == ErrorKind::ContextOverflow {
        assert!(!error.retryable());
    } else {
        assert_eq!(events.len(), 1, "the stream carried content: {events:?}");
        assert_eq!(error.kind, ErrorKind::Connection, "{error:?}");
        assert_eq!(error.message, "stream closed before the final chunk");
        eprintln!("the server reported the overflow only in its log");
    }
}
