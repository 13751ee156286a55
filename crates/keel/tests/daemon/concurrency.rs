//! Two things at once: queued messages behind client-side calls, edits while a reply
//! streams, clients resuming from positions the chat never reached.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// A chat whose first step calls the client-side tool `get_weather`.
async fn chat_waiting_for_a_client_tool(client: &Client, daemon: &Daemon) -> String {
    let script = json!({"steps": [
        {"tool_calls": [{"name": "get_weather", "args": {"city": "Oslo"}}]},
        {"text": "never asked for"}
    ]});
    let id = client
        .create_chat(
            daemon,
            json!({
                "text": format!("weather?\n#mock {script}"),
                "tools": [{"name": "get_weather", "description": "Weather by city",
                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
            }),
        )
        .await;
    client.wait_status(daemon, &id, "requires_action").await;
    id
}

/// Queues `text` behind the chat's activity; returns the queue id.
async fn queue(client: &Client, daemon: &Daemon, id: &str, text: &str) -> String {
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages")),
            json!({"text": text, "busy": "queue"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["queue_id"]
        .as_str()
        .unwrap_or_else(|| panic!("queued: {body}"))
        .to_owned()
}

/// Waits until the chat is `waiting` with `replies` assistant messages; returns the messages.
async fn wait_for_replies(
    client: &Client,
    daemon: &Daemon,
    id: &str,
    replies: usize,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let chat = client.chat(daemon, id).await;
        let messages = client.messages(daemon, id).await;
        let count = messages.iter().filter(|m| m["role"] == "assistant").count();
        if chat["status"] == "waiting" && count >= replies {
            assert!(chat["queued"].as_array().unwrap().is_empty(), "{chat}");
            return messages;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{chat}\n{messages:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn interrupting_a_chat_waiting_for_client_tools_runs_its_queued_message() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = chat_waiting_for_a_client_tool(&client, &daemon).await;
    queue(&client, &daemon, &id, &scripted("queued answer", 0.0)).await;

    let (status, body) = client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    let messages = wait_for_replies(&client, &daemon, &id, 2).await;
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(text_of(last), "queued answer");
    // The pending call got exactly one (error) result before the queued message.
    let results: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["parts"].as_array().unwrap())
        .collect();
    assert_eq!(results.len(), 1, "{messages:?}");
    assert_eq!(results[0]["is_error"], true);
}

#[tokio::test]
async fn an_expired_client_tool_call_runs_the_queued_messages_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        dir.path(),
        &sqlite(dir.path()),
        "lease_ms = 1000\npending_action_timeout_ms = 1500\n",
    );
    let client = Client::new();
    let id = chat_waiting_for_a_client_tool(&client, &daemon).await;
    queue(&client, &daemon, &id, &scripted("first queued", 0.0)).await;
    queue(&client, &daemon, &id, &scripted("second queued", 0.0)).await;

    let messages = wait_for_replies(&client, &daemon, &id, 3).await;
    let replies: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(text_of)
        .collect();
    assert_eq!(
        replies[1..],
        ["first queued", "second queued"],
        "{messages:?}"
    );
}

#[tokio::test]
async fn a_send_to_an_idle_chat_with_a_queue_runs_behind_it() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    // The reply fails for good: the chat ends in `error` with its queue intact.
    let failing = json!({"error": {"status": 400, "message": "bad request"}});
    let id = client
        .create_chat(
            &daemon,
            json!({"text": format!("go\n#mock {}", json!({"text": words(100), "rate": 20}))}),
        )
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 2).await;
    queue(&client, &daemon, &id, &format!("fail\n#mock {failing}")).await;
    queue(&client, &daemon, &id, &scripted("queued answer", 0.0)).await;
    let (status, _) = client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202);
    let chat = client.wait_status(&daemon, &id, "error").await;
    assert_eq!(chat["queued"].as_array().unwrap().len(), 1, "{chat}");

    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages")),
            json!({"text": scripted("sent later", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let messages = wait_for_replies(&client, &daemon, &id, 3).await;
    let replies: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant" && m["interrupted"] == false)
        .map(text_of)
        .collect();
    assert_eq!(replies, ["queued answer", "sent later"], "{messages:?}");
}

/// Follows a stream until the chat is `waiting` again after a committed reply.
async fn follow_to_the_end(events: &mut Events) -> (Vec<Event>, Transcript) {
    let mut seen = Vec::new();
    let mut transcript = Transcript::default();
    while let Some(event) = events.next().await {
        transcript.apply(&event);
        seen.push(event.clone());
        let replied = transcript
            .messages
            .last()
            .is_some_and(|m| m["role"] == "assistant");
        if replied && event.event == "status" && event.data["status"] == "waiting" {
            return (seen, transcript);
        }
    }
    panic!("the stream ended early: {seen:?}");
}

#[tokio::test]
async fn a_position_the_chat_never_reached_gets_a_stream_reset_and_a_replay_of_the_step() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let reply = words(80);
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&reply, 40.0)}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut first = Transcript::default();
    first.follow_parts(&mut events, 4).await;

    for position in ["999999999999", "not-a-number"] {
        let mut resumed = client.events(&daemon, &id, Some(position)).await;
        let (seen, transcript) = follow_to_the_end(&mut resumed).await;
        assert_eq!(seen[0].event, "stream_reset", "{position}: {seen:?}");
        // From the reset on, the events spell the committed reply exactly once.
        assert_eq!(
            transcript.assistant_texts(),
            vec![reply.clone()],
            "{position}"
        );
        assert_eq!(transcript.resets, 1, "{position}");
    }
}

#[tokio::test]
async fn an_edit_mid_reply_answers_the_edited_message_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A long lease: a stalled chat would wait for it to expire.
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), "lease_ms = 60000\n");
    let client = Client::new();
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&words(400), 100.0)}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 20).await;
    let user_id = transcript.messages[0]["id"].as_i64().unwrap();

    let started = tokio::time::Instant::now();
    let (status, body) = client
        .send(
            reqwest::Method::PUT,
            &daemon.api(&format!("/chats/{id}/messages/{user_id}")),
            Some(json!({"text": scripted("edited reply", 0.0)})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let messages = wait_for_replies(&client, &daemon, &id, 1).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the edit waited {:?} for the superseded run's lease",
        started.elapsed()
    );
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(text_of(&messages[1]), "edited reply");

    // The client that watched the old reply hears the edited message and the new reply.
    let (after, _) = follow_to_the_end(&mut events).await;
    let mut heard = Transcript::default();
    for event in &after {
        heard.apply(event);
    }
    assert!(
        heard
            .messages
            .iter()
            .any(|m| m["role"] == "user" && text_of(m).contains("edited reply")),
        "{after:?}"
    );
    assert_eq!(heard.assistant_texts(), vec!["edited reply".to_owned()]);
}

#[tokio::test]
async fn a_kill_9_during_a_compaction_summary_never_resumes_it_as_the_reply() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let mut daemon = Daemon::start(dir.path(), &database, "");
    let client = Client::new();
    // 120000 of the demo model's 128000 tokens: the final step is compacted (the safety net).
    let script = json!({"text": "first answer", "rate": 0.0, "usage": {"input_tokens": 120000}});
    let id = client
        .create_chat(&daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut answered = false;
    // The summary streams after the committed answer: kill the daemon in the middle of it.
    while let Some(event) = events.next().await {
        if event.event == "message" && event.data["role"] == "assistant" {
            answered = true;
        } else if answered && event.event == "part" {
            break;
        }
    }
    daemon.kill();
    drop(events);

    let daemon = Daemon::start(dir.path(), &database, "");
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    let replies: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(text_of)
        .collect();
    assert_eq!(replies[0], "first answer", "{messages:?}");
    assert!(
        replies.iter().all(|r| !r.contains("context window")),
        "the summary became a reply: {messages:?}"
    );
}
