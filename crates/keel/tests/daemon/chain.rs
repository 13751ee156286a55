//! OpenAI Responses chain mode through the daemon, against the rule-enforcing mock: a model
//! with `store = true` continues the stored response and sends only the new input; a broken
//! chain heals once with the full history.

use serde_json::{Value, json};

use crate::harness::*;

/// A daemon whose default model is `store = true` on `openai-responses` at `mock`.
fn chained_daemon(dir: &std::path::Path, mock: &keel_mock::MockServer) -> Daemon {
    let config = format!(
        "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n\
         [[providers]]\nname = \"oa\"\nkind = \"openai-responses\"\nbase_url = \"{}\"\n\
         [[models]]\nid = \"chained\"\nprovider = \"oa\"\nmodel = \"mock\"\nstore = true\n\
         default = true\n",
        mock.base_url()
    );
    Daemon::start(dir, &format!("sqlite://{}/keel.db", dir.display()), &config)
}

/// The Responses requests the mock received, oldest first.
fn responses_requests(mock: &keel_mock::MockServer) -> Vec<Value> {
    mock.recent_requests()
        .into_iter()
        .filter(|(path, _)| path == "/v1/responses")
        .map(|(_, body)| body)
        .collect()
}

fn user_texts(request: &Value) -> Vec<String> {
    request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["role"] == "user")
        .map(|item| match &item["content"] {
            Value::String(text) => text.clone(),
            parts => parts
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["text"].as_str())
                .collect(),
        })
        .collect()
}

async fn send(client: &Client, daemon: &Daemon, id: &str, text: &str) {
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages")),
            json!({"text": text}),
        )
        .await;
    assert!(status == 200 || status == 201 || status == 202, "{body}");
    client.wait_status(daemon, id, "waiting").await;
}

#[tokio::test]
async fn a_stored_model_chains_each_turn_onto_the_last_response() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = chained_daemon(dir.path(), &mock);
    let client = Client::new();
    let id = client
        .create_chat(&daemon, json!({"text": "first question"}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    send(&client, &daemon, &id, "second question").await;

    let requests = responses_requests(&mock);
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests[0].get("previous_response_id").is_none());
    let previous = requests[1]["previous_response_id"].as_str();
    assert!(
        previous.is_some_and(|id| id.starts_with("resp_")),
        "{}",
        requests[1]
    );
    assert_eq!(
        user_texts(&requests[1]),
        vec!["second question"],
        "only the new input"
    );
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(text_of(messages.last().unwrap()), "second question");
}

#[tokio::test]
async fn a_broken_chain_heals_once_with_the_full_history() {
    // The provider keeps one response: a second chat's turn evicts the first chat's.
    let config = keel_mock::MockConfig {
        max_stored_responses: 1,
        ..keel_mock::MockConfig::fast()
    };
    let mock = keel_mock::spawn(config).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = chained_daemon(dir.path(), &mock);
    let client = Client::new();
    let first = client.create_chat(&daemon, json!({"text": "one"})).await;
    client.wait_status(&daemon, &first, "waiting").await;
    let other = client.create_chat(&daemon, json!({"text": "other"})).await;
    client.wait_status(&daemon, &other, "waiting").await;

    send(&client, &daemon, &first, "two").await;
    let chat = client.chat(&daemon, &first).await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let requests = responses_requests(&mock);
    let healed = requests.last().unwrap();
    assert!(healed.get("previous_response_id").is_none(), "{healed}");
    assert_eq!(user_texts(healed), vec!["one", "two"], "the full history");
    let broken = &requests[requests.len() - 2];
    assert!(broken["previous_response_id"].is_string(), "{broken}");
    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains("kind=\"chain_broken\",chain_broken=\"true\"} 1"),
        "{metrics}"
    );

    // The healed reply took two attempts, so the next turn does not chain onto it; that
    // turn finishes in one attempt, and the one after chains again.
    send(&client, &daemon, &first, "three").await;
    let unchained = responses_requests(&mock).last().cloned().unwrap();
    assert!(
        unchained.get("previous_response_id").is_none(),
        "{unchained}"
    );
    send(&client, &daemon, &first, "four").await;
    let chained = responses_requests(&mock).last().cloned().unwrap();
    assert!(chained["previous_response_id"].is_string(), "{chained}");
    assert_eq!(user_texts(&chained), vec!["four"]);
}
