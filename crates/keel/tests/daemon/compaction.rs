//! Context compaction through the daemon: automatic, on a step reporting a nearly full
//! context, and requested with `POST /compact`.

use serde_json::json;

use crate::harness::*;

const NOTICE: &str = "The conversation so far was summarised";

fn roles(messages: &[serde_json::Value]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect()
}

fn notices(messages: &[serde_json::Value]) -> usize {
    messages
        .iter()
        .filter(|m| m["role"] == "system" && text_of(m).starts_with(NOTICE))
        .count()
}

/// A chat whose first reply, "first answer", reports a nearly full context: the demo
/// model's context is 128000 tokens, and 120000 is over the 0.8 threshold.
async fn answered_over_the_threshold(client: &Client, daemon: &Daemon) -> String {
    let script = json!({"text": "first answer", "rate": 0.0, "usage": {"input_tokens": 120000}});
    client
        .create_chat(daemon, json!({"text": format!("go\n#mock {script}")}))
        .await
}

#[tokio::test]
async fn a_final_reply_over_the_threshold_is_compacted_and_answered_once() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}/keel.db", dir.path().display());
    let daemon = Daemon::start(dir.path(), &database, "");
    let client = Client::new();
    let id = answered_over_the_threshold(&client, &daemon).await;

    let chat = client.wait_status(&daemon, &id, "waiting").await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let messages = client.messages(&daemon, &id).await;
    // The user's message and its one answer stay visible, then the notice. The summary is
    // never listed, and never answered as if the user had asked something.
    assert_eq!(
        roles(&messages),
        ["user", "assistant", "system"],
        "{messages:?}"
    );
    assert_eq!(text_of(&messages[1]), "first answer");
    assert_eq!(notices(&messages), 1);
    assert!(
        messages
            .iter()
            .all(|m| !text_of(m).contains("Summary of the conversation so far:"))
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

/// Starts a chat with `start` on a daemon that aborts (as `kill -9` would stop it) right
/// after committing a summary, then a daemon on the same database that takes the chat over.
async fn crashed_after_a_summary(
    start: impl AsyncFnOnce(&Client, &Daemon) -> String,
) -> (tempfile::TempDir, Daemon, Client, String) {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let abort = ("KEEL_DEBUG_ABORT", "summary_committed");
    let mut daemon = Daemon::start_with_env(dir.path(), &database, "", &[abort]);
    let client = Client::new();
    let id = start(&client, &daemon).await;
    daemon.wait_exit().await;
    let daemon = Daemon::start(dir.path(), &database, "");
    (dir, daemon, client, id)
}

#[tokio::test]
async fn a_crash_after_summarising_the_final_reply_never_answers_it_again() {
    let (_dir, daemon, client, id) = crashed_after_a_summary(answered_over_the_threshold).await;
    // The next owner finds the summary after the final reply: the run only ends.
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(
        roles(&messages),
        ["user", "assistant", "system"],
        "{messages:?}"
    );
}

/// A chat offering `get_weather` whose first step calls it with a nearly full context: the
/// history is summarised before the call is handed over.
async fn weather_chat_compacted_before_handover(client: &Client, daemon: &Daemon) -> String {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "get_weather", "args": {"city": "Oslo"}}],
         "usage": {"input_tokens": 120000}}
    ]});
    client.create_chat(daemon, weather_chat_body(&script)).await
}

/// Answers the chat's one pending call with a clear sky and waits for the model's reply,
/// which must read the result.
async fn answer_the_weather_call(client: &Client, daemon: &Daemon, id: &str) {
    let chat = client.wait_status(daemon, id, "requires_action").await;
    let call_id = chat["pending_tool_calls"][0]["tool_call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/tool-results")),
            json!({"results": [{"tool_call_id": call_id, "result": {"sky": "clear"}}]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    client.wait_status(daemon, id, "waiting").await;
    let messages = client.messages(daemon, id).await;
    assert_eq!(notices(&messages), 1, "{messages:?}");
    let reply = text_of(messages.last().unwrap());
    // The demo model reports the results it was sent after its call.
    assert!(
        reply.contains("get_weather returned") && reply.contains("clear"),
        "the model never saw the client's result: {messages:?}"
    );
}

#[tokio::test]
async fn a_client_call_handed_over_after_a_compaction_gets_its_result_answered() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = weather_chat_compacted_before_handover(&client, &daemon).await;
    answer_the_weather_call(&client, &daemon, &id).await;
}

#[tokio::test]
async fn a_crash_after_summarising_before_the_handover_still_hands_the_call_over() {
    let (_dir, daemon, client, id) =
        crashed_after_a_summary(weather_chat_compacted_before_handover).await;
    answer_the_weather_call(&client, &daemon, &id).await;
}

#[tokio::test]
async fn a_summary_streams_as_system_parts_and_never_as_the_reply() {
    let (_dir, daemon) = demo_daemon_with_env("", &[]);
    let client = Client::new();
    // A tool step that fills the context, then the answer: the summary streams between.
    let script = json!({"steps": [
        {"tool_calls": [{"name": "list_dir", "args": {"path": "."}}],
         "usage": {"input_tokens": 120000}, "rate": 0.0},
        {"text": "Answered after the summary.", "rate": 0.0}
    ]});
    let (id, mut events, _) = client
        .watched_chat(&daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;
    let (mut assistant, mut system) = (String::new(), String::new());
    let (mut streamed_summary, mut answered) = (false, false);
    loop {
        let event = events.next().await.expect("the stream ended");
        let data = &event.data;
        match event.event.as_str() {
            "part" if data["part"]["type"] == "text" => {
                let text = data["part"]["text"].as_str().unwrap_or_default();
                match data["role"].as_str() {
                    Some("assistant") => assistant.push_str(text),
                    Some("system") => system.push_str(text),
                    role => panic!("a text part of role {role:?}"),
                }
            }
            "message" if data["role"] == "assistant" => {
                assert_eq!(std::mem::take(&mut assistant), text_of(data), "{data}");
                answered = streamed_summary;
            }
            "status" if answered && data["status"] == "waiting" => break,
            "message" if data["role"] == "system" => {
                assert!(
                    assistant.is_empty(),
                    "the summary streamed as the reply: {assistant:?}"
                );
                streamed_summary |= !std::mem::take(&mut system).is_empty();
            }
            _ => {}
        }
    }
    assert!(streamed_summary, "no summary part of role system");
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(
        roles(&messages),
        ["user", "assistant", "tool", "system", "assistant"],
        "{messages:?}"
    );
}
