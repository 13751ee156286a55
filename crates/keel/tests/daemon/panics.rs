//! A panic inside a run (an adapter or tool with a bug) through the running daemon: the
//! chat ends the run cleanly, interrupts still land, and the next message runs. The debug
//! build's `KEEL_DEBUG_PANIC` switch makes the model panic on request.

use serde_json::json;

use crate::harness::*;
use crate::providers::Fixture;

async fn panicking() -> Fixture {
    Fixture::start_with_env("", "", &[("KEEL_DEBUG_PANIC", "1")]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_panics_ends_in_error_and_the_next_message_runs() {
    let f = panicking().await;
    let id = f
        .chat("chat", "#panic-now", &json!({"text": "never"}))
        .await;
    let error = f.failure(&id).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("internal error, the run stopped"),
        "{error}"
    );
    f.send(&id, "hello", &json!({"text": "fine"})).await;
    let messages = f.settle(&id).await;
    assert_eq!(text_of(messages.last().unwrap()), "fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_that_makes_the_run_panic_still_ends_the_run_at_once() {
    let f = panicking().await;
    let id = f
        .chat("chat", "#panic-on-interrupt", &json!({"text": "never"}))
        .await;
    f.client.wait_status(&f.daemon, &id, "running").await;
    let (status, body) = f
        .client
        .post(&f.daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    // Not left `interrupting` until the lease runs out: the run ended with the panic.
    let chat = f.ended(&id).await;
    assert!(
        matches!(chat["status"].as_str(), Some("waiting" | "error")),
        "{chat}"
    );
    // The chat is idle and takes the next message.
    f.send(&id, "hello", &json!({"text": "fine"})).await;
    assert_eq!(text_of(f.settle(&id).await.last().unwrap()), "fine");
}
