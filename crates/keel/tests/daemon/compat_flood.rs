//! A flood of compatible stream requests beyond the caps on open event streams: each is
//! refused with `429` before anything is stored, and the daemon keeps answering everything
//! else, the stream that holds the slot included.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::harness::*;

const ATTEMPTS: usize = 10_000;
/// Requests on the wire at once: well below `max_requests_in_flight`, so every refusal is
/// the stream cap's, not the overload guard's.
const CONCURRENCY: usize = 32;

/// The `i`-th attempt: the four ways of opening a compatible stream, in turn.
fn attempt(http: &reqwest::Client, url: &str, i: usize) -> reqwest::RequestBuilder {
    let ui = |id: String| {
        json!({"id": id, "trigger": "submit-message", "messageId": null,
               "messages": [{"id": "u1", "role": "user",
                             "parts": [{"type": "text", "text": "hi"}]}]})
    };
    match i % 4 {
        0 => http
            .post(format!("{url}/api/v1/ai-sdk/chat"))
            .json(&ui(format!("flood-{i}"))),
        1 => http.get(format!("{url}/api/v1/ai-sdk/chat/held/stream")),
        2 => http
            .post(format!("{url}/v1/responses"))
            .json(&json!({"model": "demo", "input": "hi", "stream": true})),
        _ => http
            .post(format!("{url}/v1/responses"))
            .json(&json!({"model": "demo", "input": "hi"})),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_compat_streams_beyond_the_cap_get_429_and_the_daemon_answers() {
    let (dir, database) = scratch();
    let daemon = Daemon::start(dir.path(), &database, "[server]\nsse_max_total = 1\n");
    let http = http_client();
    let body = json!({"id": "held", "trigger": "submit-message", "messageId": null,
        "messages": [{"id": "u1", "role": "user",
                      "parts": [{"type": "text", "text": scripted(&words(400), 20.0)}]}]});
    let held = http
        .post(daemon.api("/ai-sdk/chat"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    let mut held = Box::pin(held.bytes_stream());

    let done = Arc::new(AtomicUsize::new(0));
    let flood = {
        let (http, url, done) = (http.clone(), daemon.url.clone(), done.clone());
        tokio::spawn(async move {
            futures::stream::iter(0..ATTEMPTS)
                .map(|i| {
                    let request = attempt(&http, &url, i);
                    let done = done.clone();
                    async move {
                        let response = request.send().await.unwrap();
                        let status = response.status().as_u16();
                        let body: Value = response.json().await.unwrap_or(Value::Null);
                        done.fetch_add(1, Ordering::Relaxed);
                        (i, status, body)
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .filter(|(_, status, _)| std::future::ready(*status != 429))
                .collect::<Vec<_>>()
                .await
        })
    };

    // While the flood goes on, ordinary requests are answered and the held stream flows.
    wait_until("the flood to be under way", async || {
        done.load(Ordering::Relaxed) >= 100
    })
    .await;
    let (status, chats) = Client::new().get(&daemon.api("/chats")).await;
    assert_eq!(status, 200, "{chats}");
    let models = get_json(&daemon.api("/models")).await;
    assert_eq!(models["models"][0]["id"], "demo");
    let chunk = tokio::time::timeout(WAIT, held.next()).await.unwrap();
    assert!(
        chunk.is_some_and(|c| c.is_ok()),
        "the held stream still streams"
    );

    let accepted = flood.await.unwrap();
    assert!(accepted.is_empty(), "not refused: {:?}", &accepted[..1]);
    assert_eq!(done.load(Ordering::Relaxed), ATTEMPTS);
    let (status, chats) = Client::new().get(&daemon.api("/chats")).await;
    assert_eq!(status, 200);
    assert_eq!(
        chats["chats"].as_array().unwrap().len(),
        1,
        "only the held chat was stored"
    );
    assert_eq!(
        get_json(&daemon.api("/ai-sdk/chat/flood-0/messages")).await,
        json!([])
    );
}
