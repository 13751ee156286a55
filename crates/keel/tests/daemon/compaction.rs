//! Context compaction through the daemon: automatic, on a step reporting a nearly full
//! context, and requested with `POST /compact`.

use serde_json::json;

use crate::harness::*;

const NOTICE: &str = "The conversation so far was summarised";

fn notices(messages: &[serde_json::Value]) -> usize {
    messages
        .iter()
        .filter(|m| m["role"] == "system" && text_of(m).starts_with(NOTICE))
        .count()
}

#[tokio::test]
async fn a_nearly_full_context_is_compacted_and_the_chat_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}/keel.db", dir.path().display());
    let daemon = Daemon::start(dir.path(), &database, "");
    let client = Client::new();
    // The demo model's context is 128000 tokens; 120000 is over the 0.8 threshold.
    let script = json!({"text": "first answer", "rate": 0.0, "usage": {"input_tokens": 120000}});
    let id = client
        .create_chat(&daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;

    let chat = client.wait_status(&daemon, &id, "waiting").await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let messages = client.messages(&daemon, &id).await;
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    // The user's message and the first answer stay visible; then the notice, then the
    // model carrying on from the summary. The summary itself is never listed.
    assert_eq!(
        roles,
        vec!["user", "assistant", "system", "assistant"],
        "{messages:?}"
    );
    assert_eq!(text_of(&messages[1]), "first answer");
    assert_eq!(notices(&messages), 1);
    assert!(
        messages
            .iter()
            .filter(|m| m["role"] != "assistant")
            .all(|m| !text_of(m).starts_with("Summary of the conversation so far:"))
    );
    // The answer after the boundary saw the summary as its last user message.
    assert!(
        text_of(&messages[3]).contains("Summary of the conversation so far:"),
        "{}",
        text_of(&messages[3])
    );
}

#[tokio::test]
async fn post_compact_summarises_an_idle_chat_and_refuses_a_busy_one() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}/keel.db", dir.path().display());
    let daemon = Daemon::start(dir.path(), &database, "");
    let client = Client::new();
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&words(400), 20.0)}))
        .await;

    // Busy: refused.
    let (status, body) = client
        .post(&daemon.api(&format!("/chats/{id}/compact")), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let before = client.messages(&daemon, &id).await;

    let (status, chat) = client
        .post(&daemon.api(&format!("/chats/{id}/compact")), json!({}))
        .await;
    assert_eq!(status, 202, "{chat}");
    assert_eq!(chat["id"], id.as_str());
    assert_eq!(chat["status"], "running");
    client.wait_status(&daemon, &id, "waiting").await;

    let after = client.messages(&daemon, &id).await;
    assert_eq!(after.len(), before.len() + 1, "{after:?}");
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(notices(&after), 1);

    let (status, _) = client
        .post(
            &daemon.api("/chats/00000000-0000-0000-0000-000000000000/compact"),
            json!({}),
        )
        .await;
    assert_eq!(status, 404);
}
