//! `GET /stats`: the usage of every response delivered whole, and nothing of the others.

use keel_mock::{Cut, HttpError, Script, Step, StreamError, Usage};
use serde_json::{Value, json};

use crate::common::*;

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cache_read_tokens: Some(3),
        cache_write_tokens: Some(2),
        reasoning_tokens: Some(0),
    }
}

async fn stats(server: &keel_mock::MockServer) -> Vec<Value> {
    let url = format!("http://{}/stats", server.addr());
    let body: Value = client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["completed"].as_array().unwrap().clone()
}

#[tokio::test]
async fn only_streams_played_to_their_usage_are_counted() {
    let server = server().await;
    let whole = Script::new(Step::text("all of it").usage(usage(10, 4))).id("whole");
    let cut = Script::new(Step::text("a b c d").cut(Cut::after(1))).id("cut");
    let error = Script::new(Step::text("a b c").stream_error(StreamError::after(1))).id("err");
    let refused = Script::new(Step::text("no").error(HttpError::new(503))).id("refused");

    let events = read_events(post(&server, "/chat/completions", &chat(&whole.message("x"))).await);
    assert!(
        events
            .await
            .iter()
            .any(|e| e.json()["usage"]["prompt_tokens"] == 15)
    );
    let events = read_events(post(&server, "/messages", &messages(&whole.message("x"))).await);
    assert!(!events.await.is_empty());
    let (_, broke) =
        read_until_break(post(&server, "/responses", &responses(&cut.message("x"))).await).await;
    assert!(broke);
    read_events(post(&server, "/messages", &messages(&error.message("x"))).await).await;
    let response = post(&server, "/chat/completions", &chat(&refused.message("x"))).await;
    assert_eq!(response.status(), 503);
    // Chat Completions reports usage only when asked to.
    let mut quiet = chat(&whole.message("x"));
    quiet["stream_options"] = json!({"include_usage": false});
    read_events(post(&server, "/chat/completions", &quiet).await).await;

    let completed = stats(&server).await;
    assert_eq!(
        completed,
        server
            .reported()
            .iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect::<Vec<_>>()
    );
    let protocols: Vec<&str> = completed
        .iter()
        .map(|r| r["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(protocols, ["openai-chat", "anthropic"]);
    for reported in &completed {
        assert_eq!(reported["key"], "whole");
        assert_eq!(reported["responses"], 1);
        assert_eq!(reported["stream"], true);
        assert_eq!(reported["input_tokens"], 10);
        assert_eq!(reported["cache_read_tokens"], 3);
        assert_eq!(reported["cache_write_tokens"], 2);
        assert_eq!(reported["output_tokens"], 4);
    }
}

#[tokio::test]
async fn whole_answers_count_and_unscripted_replies_are_summed() {
    let server = server().await;
    let mut body = chat("hello there");
    body["stream"] = json!(false);
    for _ in 0..3 {
        let response = post(&server, "/chat/completions", &body).await;
        assert_eq!(response.status(), 200);
    }
    let completed = stats(&server).await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!(completed[0]["key"], Value::Null);
    assert_eq!(completed[0]["responses"], 3);
    assert_eq!(completed[0]["stream"], false);
    assert_eq!(completed[0]["model"], "mock");
    let one = server.reported()[0].output_tokens / 3;
    assert_eq!(one, 2, "an echo of two words");
}
