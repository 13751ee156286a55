//! The chat list: generated titles, renaming and switching a chat's model with
//! `PATCH /chats/{id}`, and the per-user list feed (`GET /events`) that keeps open pages
//! current.

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::*;

/// The next `chat` event of the feed about chat `id` that satisfies `wanted`.
async fn chat_event(feed: &mut Events, id: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let event = feed.next().await.expect("the list feed ended");
        if event.event == "chat" && event.data["id"] == id && wanted(&event.data) {
            return event.data;
        }
    }
}

async fn patch(client: &Client, daemon: &Daemon, id: &str, body: Value) -> (u16, Value) {
    client
        .send(
            Method::PATCH,
            &daemon.api(&format!("/chats/{id}")),
            Some(body),
        )
        .await
}

#[tokio::test]
async fn a_new_chat_gets_a_title_from_its_model_after_the_first_reply() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), "titles = true\n");
    let client = Client::new();
    let mut feed = client.list_feed(&daemon).await;
    let id = client
        .create_chat(&daemon, json!({"text": "hello there"}))
        .await;
    let created = chat_event(&mut feed, &id, |_| true).await;
    assert_eq!(created["title"], Value::Null, "{created}");
    // The demo model answers the title request with the quoted message: a sensible title.
    let titled = chat_event(&mut feed, &id, |c| !c["title"].is_null()).await;
    assert_eq!(titled["title"], "hello there", "{titled}");
    assert_eq!(client.chat(&daemon, &id).await["title"], "hello there");
    // The reply itself is the demo's echo, untouched by the title call.
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(text_of(&messages[1]), "hello there");
}

#[tokio::test]
async fn a_failing_title_model_leaves_the_reply_alone_and_titles_with_the_first_words() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 9: every title call fails to connect.
    let config = format!(
        "titles = true\ntitle_model = \"broken\"\n\
         [[providers]]\nname = \"m\"\nkind = \"openai-chat\"\nbase_url = \"{}\"\n\
         [[providers]]\nname = \"dead\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [[models]]\nid = \"ok\"\nprovider = \"m\"\nmodel = \"mock\"\ndefault = true\n\
         [[models]]\nid = \"broken\"\nprovider = \"dead\"\nmodel = \"mock\"\n",
        mock.base_url()
    );
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), &config);
    let client = Client::new();
    let mut feed = client.list_feed(&daemon).await;
    let text = "please summarise this long report for me today";
    let id = client.create_chat(&daemon, json!({ "text": text })).await;
    let titled = chat_event(&mut feed, &id, |c| !c["title"].is_null()).await;
    assert_eq!(titled["title"], "please summarise this long report for…");
    let chat = client.wait_status(&daemon, &id, "waiting").await;
    assert_eq!(chat["last_error"], Value::Null, "{chat}");
    assert_eq!(text_of(&client.messages(&daemon, &id).await[1]), text);
}

#[tokio::test]
async fn renaming_checks_its_input_and_bad_input_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), "");
    let client = Client::new();
    let id = client
        .create_chat(&daemon, json!({"text": "hi", "title": "First"}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let before = client.chat(&daemon, &id).await;

    for (body, what) in [
        (json!({}), "nothing to change"),
        (json!({"title": "   "}), "title must not be empty"),
        (json!({"title": "a\nb"}), "one line"),
        (json!({"title": "x".repeat(201)}), "at most 200"),
        (json!({"title": 5}), ""),
        (json!({"name": "x"}), ""),
        (
            json!({"title": "ok", "model": "nope"}),
            "unknown model `nope`",
        ),
    ] {
        let (status, error) = patch(&client, &daemon, &id, body.clone()).await;
        assert_eq!(status, 400, "{body}: {error}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(what), "{body}: {error}");
    }
    assert_eq!(
        client.chat(&daemon, &id).await,
        before,
        "bad input changed the chat"
    );

    let missing = uuid_like();
    let (status, error) = patch(&client, &daemon, &missing, json!({"title": "x"})).await;
    assert_eq!(status, 404, "{error}");
    let (status, error) = patch(&client, &daemon, "not-an-id", json!({"title": "x"})).await;
    assert_eq!(status, 404, "{error}");

    let (status, renamed) = patch(&client, &daemon, &id, json!({"title": "  Trip plans "})).await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed["title"], "Trip plans");
    assert_eq!(client.chat(&daemon, &id).await["title"], "Trip plans");
}

fn uuid_like() -> String {
    "00000000-0000-4000-8000-000000000000".to_owned()
}

#[tokio::test]
async fn the_list_feed_reports_chats_created_renamed_archived_and_deleted_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), "");
    let page = Client::new();
    let mut feed = page.list_feed(&daemon).await;
    // Another client (curl, say) does everything below.
    let other = Client::new();
    let id = other.create_chat(&daemon, json!({"text": "hi"})).await;
    let created = chat_event(&mut feed, &id, |_| true).await;
    assert_eq!(created["model"], "demo");
    let (status, _) = patch(&other, &daemon, &id, json!({"title": "Renamed"})).await;
    assert_eq!(status, 200);
    chat_event(&mut feed, &id, |c| c["title"] == "Renamed").await;
    let (status, _) = other
        .post(&daemon.api(&format!("/chats/{id}/archive")), json!({}))
        .await;
    assert_eq!(status, 200);
    chat_event(&mut feed, &id, |c| c["archived"] == true).await;
    let (status, _) = other
        .send(Method::DELETE, &daemon.api(&format!("/chats/{id}")), None)
        .await;
    assert_eq!(status, 204);
    chat_event(&mut feed, &id, |c| c["deleted"] == true).await;
}

#[tokio::test]
async fn a_change_right_after_the_list_feed_opens_is_reported() {
    // The feed waits 1.5 s before reading its first notice (debug builds): a change made in
    // that window must still reach it, since a page reads the list once the feed is open.
    let (_dir, daemon) = demo_daemon_with_env("", &[("KEEL_DEBUG_FEED_PAUSE_MS", "1500")]);
    let page = Client::new();
    let id = page.create_chat(&daemon, json!({"text": "hi"})).await;
    page.wait_status(&daemon, &id, "waiting").await;
    let mut feed = page.list_feed(&daemon).await;
    let listed = page.get(&daemon.api("/chats")).await.1;
    assert_eq!(listed["chats"][0]["title"], Value::Null, "{listed}");
    let (status, _) = patch(&page, &daemon, &id, json!({"title": "Renamed"})).await;
    assert_eq!(status, 200);
    chat_event(&mut feed, &id, |c| c["title"] == "Renamed").await;
}

#[tokio::test]
async fn switching_the_model_changes_the_model_of_the_next_reply() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[[providers]]\nname = \"m\"\nkind = \"openai-chat\"\nbase_url = \"{}\"\n\
         [[models]]\nid = \"small\"\nprovider = \"m\"\nmodel = \"mock\"\ndefault = true\n\
         [[models]]\nid = \"large\"\nprovider = \"m\"\nmodel = \"mock-reasoning\"\n",
        mock.base_url()
    );
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), &config);
    let client = Client::new();
    let upstream_models = || -> Vec<String> {
        mock.recent_requests()
            .into_iter()
            .filter(|(path, _)| path.ends_with("/chat/completions"))
            .map(|(_, body)| body["model"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let id = client.create_chat(&daemon, json!({"text": "one"})).await;
    client.wait_status(&daemon, &id, "waiting").await;
    let (status, chat) = patch(&client, &daemon, &id, json!({"model": "large"})).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["model"], "large");
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages")),
            json!({"text": "two"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    client.wait_status(&daemon, &id, "waiting").await;
    assert_eq!(upstream_models(), ["mock", "mock-reasoning"]);
}
