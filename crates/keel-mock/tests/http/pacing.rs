//! Timing: rates and stalls, on paused tokio time so the tests take no real time.

use std::time::Duration;

use futures::StreamExt;
use keel_mock::{MockConfig, Script, Stall, Step};
use tokio::time::Instant;

use crate::common::*;

/// Reads a streaming body, noting the (tokio) time at which each content delta arrived.
async fn delta_times(response: reqwest::Response) -> Vec<(Instant, String)> {
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        buffer.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let text = chat_text(&parse(&block));
            if !text.is_empty() {
                out.push((Instant::now(), text));
            }
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn stall_pauses_after_k_tokens() {
    let server = server().await;
    let script = Script::new(Step::text("a b c d").stall(Stall::after(2, Duration::from_secs(90))));
    let real = std::time::Instant::now();
    let times =
        delta_times(post(&server, "/chat/completions", &chat(&script.message("x"))).await).await;
    assert_eq!(times.len(), 4);
    let gap = times[2].0 - times[1].0;
    assert!(gap >= Duration::from_secs(90), "{gap:?}");
    assert!(times[1].0 - times[0].0 < Duration::from_secs(1));
    assert!(times[3].0 - times[2].0 < Duration::from_secs(1));
    assert!(real.elapsed() < Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn scripted_rate_paces_tokens() {
    let server = server().await;
    let script = Script::new(Step::text("").tokens(21).rate(10.0));
    let times =
        delta_times(post(&server, "/chat/completions", &chat(&script.message("x"))).await).await;
    assert_eq!(times.len(), 21);
    let span = times[20].0 - times[0].0;
    assert!(
        span >= Duration::from_secs(2) && span < Duration::from_millis(2500),
        "{span:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn server_default_rate_applies_without_a_script() {
    let server = keel_mock::spawn(MockConfig::human_pace()).await.unwrap();
    let times =
        delta_times(post(&server, "/chat/completions", &chat("one two three four")).await).await;
    assert_eq!(times.len(), 4);
    let span = times[3].0 - times[0].0;
    // Three intervals at 30 tokens per second.
    assert!(
        span >= Duration::from_millis(99) && span < Duration::from_millis(200),
        "{span:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_stalled_streams() {
    let server = server().await;
    let script = Script::new(Step::text("a b").stall(Stall::after(1, Duration::from_secs(3600))));
    let response = post(&server, "/chat/completions", &chat(&script.message("x"))).await;
    let reader = tokio::spawn(read_until_break(response));
    tokio::task::yield_now().await;
    server.shutdown().await.unwrap();
    let (received, _) = reader.await.unwrap();
    assert!(!received.contains("[DONE]"));
}
