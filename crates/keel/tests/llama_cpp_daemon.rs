//! `keel serve` end to end against a real model: llama-cpp-python's OpenAI-compatible server
//! with SmolLM2-135M, started by `scripts/llama-cpp-compat.sh` — a streamed chat, an
//! interrupt, and a kill -9 mid-reply that resumes with a clean seam.
//!
//! The server's base URL (with `/v1`) comes from `KEEL_TEST_LLAMA_CPP_URL`. The tests are
//! ignored in the ordinary test run, which needs no Python or model, and the script runs them
//! with `--ignored`; run without the URL, they fail. The
//! assertions are about what Keel guarantees (one reply, what clients saw is what is stored,
//! no stitched restart), never the model's wording. The server answers one request at a
//! time, so the script runs these tests one at a time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "daemon/harness.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use serde_json::{Value, json};

const URL_VAR: &str = "KEEL_TEST_LLAMA_CPP_URL";

fn base_url() -> String {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            panic!("{URL_VAR} is unset; scripts/llama-cpp-compat.sh starts the server and sets it")
        }
    }
}

/// A daemon whose default model is the llama.cpp server's, sampled deterministically, with
/// no tools: their definitions alone would fill the small context the server runs with.
fn config(url: &str) -> String {
    let n_ctx = std::env::var("KEEL_TEST_LLAMA_CPP_N_CTX").unwrap_or_else(|_| "512".into());
    format!(
        "startup_timeout_ms = 120000\nidle_timeout_ms = 60000\ncompaction_threshold = 1.0\n\
         [tools]\nbuiltin = []\n\
         [[providers]]\nname = \"llama-cpp\"\nkind = \"openai-chat\"\nbase_url = \"{url}\"\n\
         output_limit_field = \"max_tokens\"\n\
         [[models]]\nid = \"smollm2\"\nprovider = \"llama-cpp\"\nmodel = \"smollm2\"\n\
         context_limit = {n_ctx}\ntemperature = 0.0\nmax_output_tokens = 160\ndefault = true\n"
    )
}

fn sqlite(dir: &std::path::Path) -> String {
    format!("sqlite://{}/keel.db", dir.display())
}

const STORY: &str = "Write a long story about a forest in autumn: the trees, the animals, the \
                     colours of the leaves, the first frost and the quiet of the evening.";

fn assistant_replies(messages: &[Value]) -> Vec<&Value> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect()
}

#[tokio::test]
#[ignore = "needs a llama-cpp-python server: scripts/llama-cpp-compat.sh runs it"]
async fn a_streamed_chat_stores_what_clients_saw() {
    let url = base_url();
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), &config(&url));
    let client = Client::new();
    let id = client
        .create_chat(&daemon, json!({"text": "Name three colours."}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;

    let chat = client.chat(&daemon, &id).await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let messages = client.messages(&daemon, &id).await;
    let replies = assistant_replies(&messages);
    assert_eq!(replies.len(), 1, "{messages:?}");
    let stored = text_of(replies[0]);
    assert!(!stored.trim().is_empty(), "empty reply");
    assert_eq!(transcript.assistant_texts(), vec![stored]);
}

#[tokio::test]
#[ignore = "needs a llama-cpp-python server: scripts/llama-cpp-compat.sh runs it"]
async fn an_interrupt_keeps_the_partial_reply_clients_saw() {
    let url = base_url();
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), &config(&url));
    let client = Client::new();
    let id = client.create_chat(&daemon, json!({"text": STORY})).await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 5).await;
    let (status, body) = client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    client.wait_status(&daemon, &id, "waiting").await;

    let messages = client.messages(&daemon, &id).await;
    let replies = assistant_replies(&messages);
    assert_eq!(replies.len(), 1, "{messages:?}");
    assert_eq!(replies[0]["interrupted"], true, "{}", replies[0]);
    let stored = text_of(replies[0]);
    assert!(
        stored.starts_with(&transcript.live_text),
        "the stored reply {stored:?} lacks what was shown: {:?}",
        transcript.live_text
    );
}

#[tokio::test]
#[ignore = "needs a llama-cpp-python server: scripts/llama-cpp-compat.sh runs it"]
async fn kill_9_mid_reply_resumes_with_a_clean_seam() {
    let url = base_url();
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let mut daemon = Daemon::start(dir.path(), &database, &config(&url));
    let client = Client::new();
    let id = client.create_chat(&daemon, json!({"text": STORY})).await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut before = Transcript::default();
    before.follow_parts(&mut events, 12).await;
    daemon.kill();
    drop(events);

    let daemon = Daemon::start(dir.path(), &database, &config(&url));
    let mut events = client.events(&daemon, &id, None).await;
    let mut after = Transcript::default();
    after.follow_until(&mut events, "waiting").await;
    let chat = client.chat(&daemon, &id).await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let messages = client.messages(&daemon, &id).await;
    let replies = assistant_replies(&messages);
    assert_eq!(replies.len(), 1, "one reply, nothing doubled: {messages:?}");
    let stored = text_of(replies[0]);
    assert!(!stored.trim().is_empty());
    assert_eq!(
        after.assistant_texts(),
        vec![stored.clone()],
        "clients see the stored reply"
    );
    // Either the reply was continued after what was shown, with no restart stitched on, or
    // the step restarted (stream_reset) and the stored reply is the new one.
    let shown = before.live_text.as_str();
    match stored.strip_prefix(shown) {
        Some(rest) if after.resets == 1 && !shown.is_empty() => {
            assert!(
                !keel_agent::seam::restarts_reply(shown, rest),
                "a restart was stitched on: {shown:?} + {rest:?}"
            );
            eprintln!(
                "continued at the seam: …{:?} + {:?}…",
                tail(shown),
                head(rest)
            );
        }
        _ => eprintln!("the step restarted; the reply is the new one: {stored:?}"),
    }
}

fn tail(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    chars[chars.len().saturating_sub(30)..].iter().collect()
}

fn head(text: &str) -> String {
    text.chars().take(30).collect()
}
