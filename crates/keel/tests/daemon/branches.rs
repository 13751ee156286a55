//! Messages form a tree: edits and regenerates add branches, `POST .../branch` switches
//! between them, live events follow the current branch, and a run on a later branch
//! survives kill -9.

use serde_json::{Value, json};

use crate::harness::*;

fn ids(messages: &[Value]) -> Vec<i64> {
    messages.iter().map(|m| m["id"].as_i64().unwrap()).collect()
}

async fn branch_of(client: &Client, daemon: &Daemon, id: &str, through: i64) -> (u16, Value) {
    client
        .get(&daemon.api(&format!("/chats/{id}/messages?branch={through}")))
        .await
}

async fn switch(client: &Client, daemon: &Daemon, id: &str, to: i64) -> (u16, Value) {
    client
        .post(
            &daemon.api(&format!("/chats/{id}/branch")),
            json!({ "message_id": to }),
        )
        .await
}

/// Follows events until the chat is `waiting` with an assistant reply last.
async fn follow_to_idle(events: &mut Events, transcript: &mut Transcript) {
    while let Some(event) = events.next().await {
        transcript.apply(&event);
        let replied = transcript
            .messages
            .last()
            .is_some_and(|m| m["role"] == "assistant");
        if replied && event.event == "status" && event.data["status"] == "waiting" {
            return;
        }
    }
    panic!("the stream ended early");
}

#[tokio::test]
async fn an_edit_keeps_the_old_version_and_a_switch_brings_it_back() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.replied_chat(&daemon, "first reply").await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut watched = Transcript::default();
    follow_to_idle(&mut events, &mut watched).await;

    let (status, body) = client
        .edit(
            &daemon,
            &id,
            1,
            json!({"text": scripted("edited reply", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    follow_to_idle(&mut events, &mut watched).await;
    let current = client.messages(&daemon, &id).await;
    assert_eq!(ids(&current), vec![3, 4]);
    assert_eq!(current[0]["parent_id"], Value::Null);
    assert_eq!(current[0]["siblings"], json!([1, 3]));
    assert_eq!(current[1]["parent_id"], 3);
    assert_eq!(text_of(&current[1]), "edited reply");
    // The open stream was told: it shows exactly the current branch.
    assert_eq!(watched.branches, 1);
    assert_eq!(watched.messages, current);

    // The old version is still there, and can be listed and made current again.
    let (status, old) = branch_of(&client, &daemon, &id, 1).await;
    assert_eq!(status, 200, "{old}");
    let old = old["messages"].as_array().unwrap().clone();
    assert_eq!(ids(&old), vec![1, 2]);
    assert_eq!(text_of(&old[1]), "first reply");
    let position = watched.last_id.clone();
    let (status, chat) = switch(&client, &daemon, &id, 1).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["status"], "waiting");
    let switched = client.messages(&daemon, &id).await;
    assert_eq!(switched, old);
    // The open stream gets the `branch` event and the whole branch after it.
    while watched.messages.len() < 2 || watched.branches < 2 {
        let event = events.next().await.unwrap();
        watched.apply(&event);
    }
    assert_eq!(watched.messages, switched);
    // So does a client resuming from where it was before the switch.
    let mut resumed_events = client.events(&daemon, &id, position.as_deref()).await;
    let mut resumed = Transcript::default();
    while resumed.messages.len() < 2 {
        resumed.apply(&resumed_events.next().await.unwrap());
    }
    assert_eq!(resumed.branches, 1);
    assert_eq!(resumed.messages, switched);
    // The list of chats hears of the change.
    let listed = client.chat(&daemon, &id).await;
    assert!(
        listed["updated_at"].as_str() > body["updated_at"].as_str(),
        "{listed}"
    );

    // A message sent now continues the branch that is current.
    client
        .send_message(&daemon, &id, json!({"text": scripted("third reply", 0.0)}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(ids(&messages)[..2], [1, 2]);
    assert_eq!(messages[2]["parent_id"], 2);
}

#[tokio::test]
async fn regenerate_writes_a_sibling_reply() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.replied_chat(&daemon, "an answer").await;
    let regenerate = |mid: i64| daemon.api(&format!("/chats/{id}/messages/{mid}/regenerate"));
    let (status, chat) = client.post(&regenerate(2), json!(null)).await;
    assert_eq!(status, 202, "{chat}");
    assert_eq!(chat["status"], "running");
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(ids(&messages), vec![1, 3]);
    assert_eq!(messages[1]["siblings"], json!([2, 3]));
    assert_eq!(text_of(&messages[1]), "an answer");
    // Named by the user message it answers, the same.
    let (status, _) = client.post(&regenerate(1), json!(null)).await;
    assert_eq!(status, 202);
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(messages[1]["siblings"], json!([2, 3, 4]));
    // Every version stays listed through its own branch.
    let (_, first) = branch_of(&client, &daemon, &id, 2).await;
    assert_eq!(ids(first["messages"].as_array().unwrap()), vec![1, 2]);
}

#[tokio::test]
async fn branch_moves_refuse_a_busy_chat_and_unknown_messages() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.replied_chat(&daemon, "an answer").await;
    let other = client.replied_chat(&daemon, "another").await;
    let regenerate = |mid: i64| daemon.api(&format!("/chats/{id}/messages/{mid}/regenerate"));
    for message in [99, 0] {
        assert_eq!(switch(&client, &daemon, &id, message).await.0, 404);
        assert_eq!(client.post(&regenerate(message), json!(null)).await.0, 404);
        assert_eq!(branch_of(&client, &daemon, &id, message).await.0, 404);
    }
    assert_eq!(switch(&client, &daemon, &other, 99).await.0, 404);
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/branch")),
            json!({"message_id": "one"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    // A reply in progress belongs to its branch: no switch, no regenerate until it ends.
    client
        .send_message(&daemon, &id, json!({"text": scripted(&words(400), 50.0)}))
        .await;
    let (status, body) = switch(&client, &daemon, &id, 1).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    assert_eq!(client.post(&regenerate(2), json!(null)).await.0, 409);
    client.interrupt(&daemon, &id).await;
    client.wait_status(&daemon, &id, "waiting").await;
    assert_eq!(switch(&client, &daemon, &id, 2).await.0, 200);
}

#[tokio::test]
async fn a_regenerated_reply_resumes_after_kill_9_on_its_branch() {
    let (dir, database) = scratch();
    let mut daemon = Daemon::start(dir.path(), &database, "");
    let client = Client::new();
    let reply = words(200);
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&reply, 100.0)}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let (status, _) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages/2/regenerate")),
            json!(null),
        )
        .await;
    assert_eq!(status, 202);
    let mut events = client.events(&daemon, &id, None).await;
    let mut seen = Transcript::default();
    seen.follow_parts(&mut events, 20).await;
    daemon.kill();
    drop(events);

    let daemon = Daemon::start(dir.path(), &database, "");
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(ids(&messages), vec![1, 3], "{messages:?}");
    assert_eq!(text_of(&messages[1]), reply);
    assert_eq!(messages[1]["siblings"], json!([2, 3]));
    let (_, old) = branch_of(&client, &daemon, &id, 2).await;
    assert_eq!(text_of(&old["messages"][1]), reply);
    // The branch made current survives the restart, and switching still works after it.
    assert_eq!(switch(&client, &daemon, &id, 2).await.0, 200);
    assert_eq!(ids(&client.messages(&daemon, &id).await), vec![1, 2]);
}

/// Each tool call id of `messages` with the number of results it has.
fn results_per_call(messages: &[Value]) -> Vec<(String, usize)> {
    let parts: Vec<&Value> = messages
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().iter())
        .collect();
    parts
        .iter()
        .filter(|p| p["type"] == "tool_call")
        .map(|call| {
            let id = call["tool_call_id"].as_str().unwrap().to_owned();
            let results = parts
                .iter()
                .filter(|p| p["type"] == "tool_result" && p["tool_call_id"] == id.as_str())
                .count();
            (id, results)
        })
        .collect()
}

#[tokio::test]
async fn a_branch_left_while_a_client_tool_waited_comes_back_with_the_call_answered() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.weather_chat(&daemon, "never asked for").await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut watched = Transcript::default();
    watched.follow_until(&mut events, "requires_action").await;
    let position = watched.last_id.clone();

    // The user edits the question instead of answering the call.
    let (status, body) = client
        .edit(&daemon, &id, 1, json!({"text": scripted("no tools", 0.0)}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["pending_tool_calls"], json!([]), "{body}");
    follow_to_idle(&mut events, &mut watched).await;

    // The branch left holds the call with one result: interrupted by the user.
    let (status, left) = branch_of(&client, &daemon, &id, 2).await;
    assert_eq!(status, 200, "{left}");
    let left = left["messages"].as_array().unwrap().clone();
    assert_eq!(ids(&left), vec![1, 2, 3]);
    assert_eq!(left[2]["role"], "tool");
    assert_eq!(left[2]["parts"][0]["is_error"], true, "{left:?}");
    let calls = results_per_call(&left);
    assert_eq!(calls.len(), 1, "{left:?}");
    assert_eq!(calls[0].1, 1, "{left:?}");

    // Switched back, the branch is whole for the open stream and for a resuming client.
    let (status, chat) = switch(&client, &daemon, &id, 2).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["status"], "waiting");
    assert_eq!(chat["pending_tool_calls"], json!([]));
    let current = client.messages(&daemon, &id).await;
    assert_eq!(current, left);
    while watched.branches < 2 || watched.messages.len() < 3 {
        watched.apply(&events.next().await.unwrap());
    }
    assert_eq!(watched.messages, current);
    let mut resumed_events = client.events(&daemon, &id, position.as_deref()).await;
    let mut resumed = Transcript::default();
    while resumed.branches < 1 || resumed.messages.len() < 3 {
        resumed.apply(&resumed_events.next().await.unwrap());
    }
    assert_eq!(resumed.messages, current);
}
