//! Scripted failures: HTTP errors, fail-first-N, cuts, malformed lines, in-stream errors.

use keel_mock::{Cut, HttpError, Malformed, Script, Step, StreamError};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn http_error_with_retry_after_headers_in_each_envelope() {
    let server = server().await;
    let script = Script::new(
        Step::echo().error(
            HttpError::new(429)
                .retry_after(std::time::Duration::from_secs(7))
                .retry_after_ms(6500),
        ),
    );
    let message = script.message("hi");

    let response = post(&server, "/chat/completions", &chat(&message)).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    assert_eq!(response.headers()["retry-after-ms"], "6500");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");

    let response = post(&server, "/messages", &messages(&message)).await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let response = post(&server, "/responses", &responses(&message)).await;
    assert_eq!(response.status(), 429);
}

#[tokio::test]
async fn http_error_with_custom_type_code_and_raw_body() {
    let server = server().await;
    let overflow = Script::new(
        Step::echo().error(
            HttpError::new(400)
                .code("context_length_exceeded")
                .message("This model's maximum context length is 128000 tokens."),
        ),
    );
    let response = post(&server, "/chat/completions", &chat(&overflow.message("x"))).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let raw = Script::new(
        Step::echo().error(
            HttpError::new(502)
                .body("<html>bad gateway</html>")
                .retry_after_text("Wed, 21 Oct 2015 07:28:00 GMT"),
        ),
    );
    let response = post(&server, "/messages", &messages(&raw.message("x"))).await;
    assert_eq!(response.status(), 502);
    assert_eq!(
        response.headers()["retry-after"],
        "Wed, 21 Oct 2015 07:28:00 GMT"
    );
    assert_eq!(response.text().await.unwrap(), "<html>bad gateway</html>");
}

#[tokio::test]
async fn fails_only_the_first_attempts() {
    let server = server().await;
    let script =
        Script::new(Step::text("finally").error(HttpError::new(529).times(2))).id("fail-first-two");
    let body = messages(&script.message("x"));
    for _ in 0..2 {
        let response = post(&server, "/messages", &body).await;
        assert_eq!(response.status(), 529);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "overloaded_error");
    }
    let events = read_events(post(&server, "/messages", &body).await).await;
    assert!(events.iter().any(|e| e.data.contains("finally")));
    assert_eq!(server.attempts("fail-first-two", 0), 3);
    assert_eq!(server.attempts("fail-first-two", 1), 0);
}

#[tokio::test]
async fn cut_mid_text_drops_the_connection() {
    let server = server().await;
    let script = Script::new(Step::text("one two three four five").cut(Cut::after(2)));
    let response = post(&server, "/chat/completions", &chat(&script.message("x"))).await;
    assert_eq!(response.status(), 200);
    let (received, broke) = read_until_break(response).await;
    assert!(broke, "the body should end with an error");
    assert_eq!(chat_text(&parse(&received)), "one two");
    assert!(!received.contains("[DONE]"));
}

#[tokio::test]
async fn cut_mid_tool_arguments() {
    let server = server().await;
    let args = json!({"path": "a/rather/long/path/to/a/file.txt"});
    let script = Script::new(Step::tool_call("read_file", args.clone()).cut(Cut::after(2)));
    let response = post(&server, "/messages", &messages(&script.message("x"))).await;
    let (received, broke) = read_until_break(response).await;
    assert!(broke);
    let events = parse(&received);
    let partial: String = named(&events, "content_block_delta")
        .iter()
        .filter_map(|d| d["delta"]["partial_json"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(partial.chars().count(), 16);
    assert!(args.to_string().starts_with(&partial));
    assert!(named(&events, "message_stop").is_empty());
}

#[tokio::test]
async fn cut_only_on_the_first_attempt() {
    let server = server().await;
    let script = Script::new(Step::text("a b c").cut(Cut::after(1).times(1))).id("cut-once");
    let body = responses(&script.message("x"));
    let (_, broke) = read_until_break(post(&server, "/responses", &body).await).await;
    assert!(broke);
    let (received, broke) = read_until_break(post(&server, "/responses", &body).await).await;
    assert!(!broke);
    assert!(received.contains("response.completed"));
}

#[tokio::test]
async fn malformed_line_then_the_stream_goes_on() {
    let server = server().await;
    let script = Script::new(Step::text("a b c").malformed(Malformed::after(1)));
    let response = post(&server, "/chat/completions", &chat(&script.message("x"))).await;
    let body = response.text().await.unwrap();
    assert!(body.contains("\ndata: {\"malformed\": \n\n"), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"));
    let custom = Script::new(Step::text("a").malformed(Malformed::after(0).line(": ??? not sse")));
    let body = post(&server, "/messages", &messages(&custom.message("x")))
        .await
        .text()
        .await
        .unwrap();
    assert!(body.contains(": ??? not sse\n\n"));
}

#[tokio::test]
async fn in_stream_errors_in_each_protocol() {
    let server = server().await;
    let script = Script::new(Step::text("a b c d").stream_error(StreamError::after(2)));
    let message = script.message("x");

    let events = read_events(post(&server, "/messages", &messages(&message)).await).await;
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(last.json()["error"]["type"], "overloaded_error");
    assert_eq!(last.json()["type"], "error");
    assert!(named(&events, "message_stop").is_empty());
    assert_eq!(named(&events, "content_block_delta").len(), 2);

    let events = read_events(post(&server, "/chat/completions", &chat(&message)).await).await;
    assert_eq!(chat_text(&events), "a b");
    let last = events.last().unwrap().json();
    assert_eq!(last["error"]["type"], "overloaded_error");
    assert!(events.iter().all(|e| e.data != "[DONE]"));

    let rate = Script::new(
        Step::text("a").stream_error(
            StreamError::after(0)
                .error_type("rate_limit_exceeded")
                .message("slow down"),
        ),
    );
    let events =
        read_events(post(&server, "/responses", &responses(&rate.message("x"))).await).await;
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(last.json()["code"], "rate_limit_exceeded");
    assert_eq!(last.json()["message"], "slow down");
    assert!(named(&events, "response.completed").is_empty());
}

#[tokio::test]
async fn faults_after_the_end_happen_before_the_finish() {
    let server = server().await;
    let script = Script::new(Step::text("a b").stream_error(StreamError::after(1000)));
    let events =
        read_events(post(&server, "/chat/completions", &chat(&script.message("x"))).await).await;
    assert_eq!(chat_text(&events), "a b");
    assert!(events.last().unwrap().json()["error"].is_object());
}

#[tokio::test]
async fn non_streaming_faults() {
    let server = server().await;
    let overloaded = Script::new(Step::text("a").stream_error(StreamError::after(0)));
    let mut body = messages(&overloaded.message("x"));
    body["stream"] = json!(false);
    assert_eq!(post(&server, "/messages", &body).await.status(), 529);

    let cut = Script::new(Step::text("a").cut(Cut::after(0)));
    let mut body = chat(&cut.message("x"));
    body["stream"] = json!(false);
    let result = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&body)
        .send()
        .await;
    // Headers may or may not have been sent before the cut; either way no body arrives.
    if let Ok(response) = result {
        assert!(response.bytes().await.is_err());
    }
}
