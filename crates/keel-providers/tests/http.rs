//! End to end through reqwest against a local server: the real streaming path, headers,
//! HTTP errors with Retry-After, truncated and aborted bodies, and cancellation.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::server::{End, Reply, TestServer};
use common::{ctx, final_error, replay, split, transcript};
use futures::StreamExt;
use keel_core::{
    CallOptions, Cancel, CancelCause, ErrorKind, LanguageModel, Message, ModelCall, ProviderError,
    StreamEvent, Thinking,
};
use keel_providers::anthropic::AnthropicDecoder;
use keel_providers::openai_chat::ChatDecoder;
use keel_providers::openai_responses::ResponsesDecoder;
use keel_providers::{ProviderKind, ProviderSettings, build_model};

/// A plain HTTP client on the process's rustls crypto provider, which the `keel` binary
/// installs in `main`; reqwest needs one to build any client.
fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}

fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
use serde_json::json;

/// Bounds every wait so a regression fails instead of hanging the suite.
const LIMIT: Duration = Duration::from_secs(10);

fn model(server: &TestServer, kind: ProviderKind) -> Arc<dyn LanguageModel> {
    let mut settings = ProviderSettings::new("test-provider", kind);
    settings.base_url = Some(server.base_url.clone());
    settings.api_key = Some("sk-test".into());
    settings
        .extra_headers
        .insert("x-extra".into(), "yes".into());
    build_model(&settings, "test-model", client()).unwrap()
}

fn call() -> ModelCall {
    ModelCall {
        messages: vec![Message::system("sys"), Message::user("hi")],
        ..ModelCall::default()
    }
}

async fn collect(model: &dyn LanguageModel) -> Vec<StreamEvent> {
    let stream = model.stream(call(), Cancel::new()).await.unwrap();
    tokio::time::timeout(LIMIT, stream.collect::<Vec<_>>())
        .await
        .unwrap()
}

async fn start_error(model: &dyn LanguageModel) -> ProviderError {
    match tokio::time::timeout(LIMIT, model.stream(call(), Cancel::new()))
        .await
        .unwrap()
    {
        Ok(_) => panic!("expected the call to fail"),
        Err(e) => e,
    }
}

/// The variant name of the next event that is not a keep-alive.
async fn next_content(stream: &mut keel_core::EventStream) -> String {
    loop {
        match tokio::time::timeout(LIMIT, stream.next()).await.unwrap() {
            Some(StreamEvent::KeepAlive) => {}
            Some(event) => {
                let debug = format!("{event:?}");
                return debug
                    .split([' ', '{', '('])
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
            None => return "end".to_owned(),
        }
    }
}

#[tokio::test]
async fn openai_chat_streams_over_http_like_the_replayed_transcript() {
    let bytes = transcript("openai_chat_tools.sse");
    let server = TestServer::start(Reply::sse(split(&bytes, &[7, 300, 301, 900]))).await;
    let model = model(&server, ProviderKind::OpenAiChat);
    assert_eq!(model.provider(), "test-provider");
    assert_eq!(model.model(), "test-model");
    assert!(!model.supports_prefill(&CallOptions::default()));
    let events = collect(model.as_ref()).await;
    assert_eq!(events, replay(ChatDecoder::new(ctx()), &bytes));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], "Bearer sk-test");
    assert_eq!(request.headers["x-extra"], "yes");
    assert_eq!(request.headers["content-type"], "application/json");
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(
        request.body["stream_options"],
        json!({"include_usage": true})
    );
}

#[tokio::test]
async fn include_usage_is_omitted_when_switched_off() {
    let server = TestServer::start(Reply::sse(vec![transcript("openai_chat_text.sse")])).await;
    let mut settings = ProviderSettings::new("local", ProviderKind::OpenAiChat);
    settings.base_url = Some(format!("{}/", server.base_url));
    settings.include_usage = false;
    let model = build_model(&settings, "llama", client()).unwrap();
    let events = collect(model.as_ref()).await;
    assert!(common::has_finish(&events));
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert!(request.body.get("stream_options").is_none());
    assert!(!request.headers.contains_key("authorization"));
}

#[tokio::test]
async fn openai_responses_streams_over_http() {
    let bytes = transcript("openai_responses_tools.sse");
    let server = TestServer::start(Reply::sse(split(&bytes, &[100, 2000]))).await;
    let model = model(&server, ProviderKind::OpenAiResponses);
    let events = collect(model.as_ref()).await;
    assert_eq!(events, replay(ResponsesDecoder::new(ctx()), &bytes));
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.headers["authorization"], "Bearer sk-test");
    assert_eq!(request.body["input"][1]["role"], "user");
}

#[tokio::test]
async fn openai_responses_chain_mode_sends_only_new_input() {
    let server =
        TestServer::start(Reply::sse(vec![transcript("openai_responses_tools.sse")])).await;
    let model = model(&server, ProviderKind::OpenAiResponses);
    let mut call = call();
    call.messages.push(Message::assistant("first answer"));
    call.messages.push(Message::user("next question"));
    call.options.previous_response_id = Some("resp_prev".into());
    call.options.store = true;
    let stream = model.stream(call, Cancel::new()).await.unwrap();
    let events: Vec<StreamEvent> = tokio::time::timeout(LIMIT, stream.collect()).await.unwrap();
    assert!(events.contains(&StreamEvent::ResponseId {
        id: "resp_123".into()
    }));
    let body = &server.requests()[0].body;
    assert_eq!(body["previous_response_id"], "resp_prev");
    assert_eq!(body["store"], true);
    assert_eq!(
        body["input"],
        json!([{"role": "user", "content": [{"type": "input_text", "text": "next question"}]}])
    );
}

#[tokio::test]
async fn anthropic_streams_over_http_with_its_headers() {
    let bytes = transcript("anthropic_thinking_tools.sse");
    let server = TestServer::start(Reply::sse(split(&bytes, &[1, 2, 3, 555]))).await;
    let model = model(&server, ProviderKind::Anthropic);
    assert!(model.supports_prefill(&CallOptions::default()));
    let thinking = CallOptions {
        thinking: Some(Thinking::Adaptive),
        ..CallOptions::default()
    };
    assert!(
        !model.supports_prefill(&thinking),
        "thinking continues by instruction"
    );
    let events = collect(model.as_ref()).await;
    assert_eq!(events, replay(AnthropicDecoder::new(ctx()), &bytes));
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], "sk-test");
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(
        request.body["system"],
        json!([{"type": "text", "text": "sys"}])
    );
}

#[tokio::test]
async fn an_anthropic_base_url_is_the_bare_host_as_for_the_sdks() {
    let server =
        TestServer::start(Reply::sse(vec![transcript("anthropic_thinking_tools.sse")])).await;
    let mut settings = ProviderSettings::new("anthropic", ProviderKind::Anthropic);
    settings.base_url = Some(server.base_url.trim_end_matches("/v1").to_owned());
    let model = build_model(&settings, "claude", reqwest::Client::new()).unwrap();
    assert!(common::has_finish(&collect(model.as_ref()).await));
    assert_eq!(server.requests()[0].path, "/v1/messages");
}

#[tokio::test]
async fn http_429_carries_retry_after() {
    let body = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#;
    let server = TestServer::start(Reply::error(429, body).header("retry-after", "2")).await;
    let error = start_error(model(&server, ProviderKind::OpenAiChat).as_ref()).await;
    assert_eq!(error.kind, ErrorKind::RateLimit);
    assert_eq!(error.status, Some(429));
    assert_eq!(error.retry_after, Some(Duration::from_secs(2)));
    assert_eq!(error.message, "Rate limit reached for requests");
    assert_eq!(error.provider, "test-provider");
    assert_eq!(error.model, "test-model");
    assert!(error.retryable());
}

#[tokio::test]
async fn retry_after_ms_wins_over_retry_after() {
    let server = TestServer::start(
        Reply::error(429, "{}")
            .header("retry-after-ms", "1500")
            .header("retry-after", "9"),
    )
    .await;
    let error = start_error(model(&server, ProviderKind::OpenAiResponses).as_ref()).await;
    assert_eq!(error.retry_after, Some(Duration::from_millis(1500)));
}

#[tokio::test]
async fn http_401_is_a_permanent_auth_error() {
    let body =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let server = TestServer::start(Reply::error(401, body)).await;
    let error = start_error(model(&server, ProviderKind::Anthropic).as_ref()).await;
    assert_eq!(error.kind, ErrorKind::Auth);
    assert_eq!(error.message, "invalid x-api-key");
    assert!(!error.retryable());
}

#[tokio::test]
async fn http_529_is_overloaded() {
    let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let server = TestServer::start(Reply::error(529, body)).await;
    let error = start_error(model(&server, ProviderKind::Anthropic).as_ref()).await;
    assert_eq!(error.kind, ErrorKind::Overloaded);
    assert_eq!(error.status, Some(529));
    assert!(error.retryable());
}

#[tokio::test]
async fn http_500_is_a_retryable_server_error_even_without_a_body() {
    let server = TestServer::start(Reply::error(500, "")).await;
    let error = start_error(model(&server, ProviderKind::OpenAiChat).as_ref()).await;
    assert_eq!(error.kind, ErrorKind::Server);
    assert_eq!(error.status, Some(500));
    assert!(error.retryable());
}

#[tokio::test]
async fn a_404_names_the_address_that_answered_it() {
    let server = TestServer::start(Reply::error(404, "Not Found")).await;
    let error = start_error(model(&server, ProviderKind::OpenAiChat).as_ref()).await;
    assert_eq!(error.status, Some(404));
    assert_eq!(error.message, "Not Found", "the provider's own words");
    let url = error.url.as_deref().unwrap_or_default();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/chat/completions"),
        "{url}"
    );
    assert_eq!(error.provider, "test-provider");
}

#[tokio::test]
async fn a_refused_connection_names_the_address_without_its_query() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut settings = ProviderSettings::new("down", ProviderKind::OpenAiChat);
    settings.base_url = Some(format!("http://127.0.0.1:{port}/v1?key=SECRET"));
    let model = build_model(&settings, "m", client()).unwrap();
    let error = start_error(model.as_ref()).await;
    assert_eq!(error.kind, ErrorKind::Connection, "{}", error.message);
    assert_eq!(error.provider, "down");
    assert_eq!(
        error.url.as_deref(),
        Some(format!("http://127.0.0.1:{port}/v1").as_str()),
        "no query: keys ride there"
    );
    assert!(!error.message.contains("SECRET"), "{}", error.message);
}

#[tokio::test]
async fn a_json_error_with_status_200_is_not_read_as_a_stream() {
    let body = r#"{"error":{"message":"Too many requests, slow down","type":"rate_limit_error"}}"#;
    let server = TestServer::start(Reply::error(200, body)).await;
    let error = start_error(model(&server, ProviderKind::OpenAiChat).as_ref()).await;
    assert_eq!(error.kind, ErrorKind::RateLimit);
    assert_eq!(error.message, "Too many requests, slow down");
}

#[tokio::test]
async fn a_huge_html_error_page_is_clipped() {
    let page = format!(
        "<html><body>{}</body></html>",
        "Bad gateway é ".repeat(5000)
    );
    let mut reply = Reply::error(502, &page);
    reply.headers = vec![("content-type".into(), "text/html".into())];
    let server = TestServer::start(reply).await;
    let error = start_error(model(&server, ProviderKind::OpenAiChat).as_ref()).await;
    assert_eq!(error.kind, ErrorKind::Server);
    assert!(error.message.starts_with("<html>"));
    assert!(error.message.len() <= 8 * 1024);
}

#[tokio::test]
async fn a_missing_previous_response_breaks_the_chain() {
    let body = r#"{"error":{"message":"Previous response with id 'resp_abc' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}"#;
    let server = TestServer::start(Reply::error(400, body)).await;
    let error = start_error(model(&server, ProviderKind::OpenAiResponses).as_ref()).await;
    assert_eq!(error.kind, ErrorKind::ChainBroken);
    assert!(error.message.contains("resp_abc"));
}

#[tokio::test]
async fn an_in_stream_error_event_arrives_as_an_error_event() {
    let server = TestServer::start(Reply::sse(vec![transcript("anthropic_overloaded.sse")])).await;
    let events = collect(model(&server, ProviderKind::Anthropic).as_ref()).await;
    assert_eq!(final_error(&events).kind, ErrorKind::Overloaded);
}

#[tokio::test]
async fn a_body_closed_before_the_terminal_event_is_a_connection_error() {
    for (kind, name) in [
        (ProviderKind::OpenAiChat, "openai_chat_truncated.sse"),
        (
            ProviderKind::OpenAiResponses,
            "openai_responses_truncated.sse",
        ),
        (ProviderKind::Anthropic, "anthropic_signature_cut.sse"),
    ] {
        let server = TestServer::start(Reply::sse(vec![transcript(name)])).await;
        let events = collect(model(&server, kind).as_ref()).await;
        let error = final_error(&events);
        assert_eq!(error.kind, ErrorKind::Connection, "{kind}: {error}");
        assert!(error.retryable());
    }
}

#[tokio::test]
async fn a_connection_torn_down_mid_body_is_a_connection_error() {
    let bytes = transcript("anthropic_thinking_tools.sse");
    let server = TestServer::start(Reply::sse(vec![bytes[..700].to_vec()]).end(End::Abort)).await;
    let model = model(&server, ProviderKind::Anthropic);
    let mut stream = model.stream(call(), Cancel::new()).await.unwrap();
    assert_eq!(next_content(&mut stream).await, "ReasoningStart");
    server.abort();
    let rest: Vec<StreamEvent> = tokio::time::timeout(LIMIT, stream.collect()).await.unwrap();
    let error = final_error(&rest);
    assert_eq!(error.kind, ErrorKind::Connection, "{error}");
    assert!(error.retryable());
}

#[tokio::test]
async fn a_refused_connection_is_a_connection_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut settings = ProviderSettings::new("gone", ProviderKind::OpenAiChat);
    settings.base_url = Some(format!("http://{addr}/v1"));
    let model = build_model(&settings, "m", client()).unwrap();
    let error = start_error(model.as_ref()).await;
    assert_eq!(error.kind, ErrorKind::Connection, "{}", error.message);
    assert_eq!(error.provider, "gone");
}

#[tokio::test]
async fn cancelling_mid_stream_drops_the_response_promptly() {
    let bytes = transcript("openai_chat_tools.sse");
    let text = String::from_utf8(bytes).unwrap();
    let first = text.find("data: {\"id\":\"chatcmpl-1\"").unwrap();
    let second = text[first + 1..].find("data: ").unwrap() + first + 1;
    let server =
        TestServer::start(Reply::sse(vec![text.as_bytes()[..second].to_vec()]).end(End::Hang))
            .await;
    let model = model(&server, ProviderKind::OpenAiChat);
    let cancel = Cancel::new();
    let mut stream = model.stream(call(), cancel.clone()).await.unwrap();
    assert_eq!(next_content(&mut stream).await, "ReasoningStart");
    let _delta = tokio::time::timeout(LIMIT, stream.next()).await.unwrap();

    cancel.cancel(CancelCause::Interrupted);
    let rest: Vec<StreamEvent> = tokio::time::timeout(LIMIT, stream.collect()).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(final_error(&rest).kind, ErrorKind::Cancelled);
    // The server sees the client go away: the connection was dropped, not left open.
    tokio::time::timeout(LIMIT, server.body_dropped())
        .await
        .unwrap();
}

#[tokio::test]
async fn cancelling_before_the_response_arrives_returns_cancelled() {
    let mut reply = Reply::sse(Vec::new());
    reply.hang_before_headers = true;
    let server = TestServer::start(reply).await;
    let model = model(&server, ProviderKind::Anthropic);
    let cancel = Cancel::new();
    let (result, ()) = tokio::time::timeout(
        LIMIT,
        futures::future::join(model.stream(call(), cancel.clone()), async {
            server.request_received().await;
            cancel.cancel(CancelCause::Shutdown);
        }),
    )
    .await
    .unwrap();
    match result {
        Err(e) => assert_eq!(e.kind, ErrorKind::Cancelled),
        Ok(_) => panic!("a cancelled call must not start streaming"),
    }
}
