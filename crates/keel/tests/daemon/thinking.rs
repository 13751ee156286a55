//! Anthropic extended thinking through the daemon, against the rule-enforcing mock: a tool
//! step resumed after kill -9 sends its signed thinking block back first.

use serde_json::json;

use crate::harness::*;

fn thinking_config(mock: &keel_mock::MockServer) -> String {
    format!(
        "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n\
         [[providers]]\nname = \"claude\"\nkind = \"anthropic\"\nbase_url = \"{}\"\n\
         [[models]]\nid = \"thinker\"\nprovider = \"claude\"\nmodel = \"mock\"\n\
         thinking_budget_tokens = 1024\ndefault = true\n",
        mock.base_url()
    )
}

#[tokio::test]
async fn kill_9_mid_tool_arguments_resumes_with_the_signed_thinking_block_first() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    std::fs::write(dir.path().join("workspace/a.txt"), "alpha").unwrap();
    let database = format!("sqlite://{}/keel.db", dir.path().display());
    let config = thinking_config(&mock);
    let mut daemon = Daemon::start(dir.path(), &database, &config);
    let client = Client::new();
    // Thinking, one complete call, then a second call whose long arguments stream slowly.
    let script = json!({
        "reasoning": "I should read a.txt first",
        "tool_calls": [
            {"name": "read_file", "args": {"path": "a.txt"}, "id": "toolu_a"},
            {"name": "read_file", "args": {"path": "b".repeat(800)}, "id": "toolu_b"}
        ],
        "rate": 20.0
    });
    let id = client
        .create_chat(&daemon, json!({"text": format!("read\n#mock {script}")}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut second_call_deltas = 0;
    while second_call_deltas < 12 {
        let event = events.next().await.expect("the stream ended early");
        let part = &event.data["part"];
        if event.event == "part" && part["tool_call_id"] == "toolu_b" {
            second_call_deltas += 1;
        }
    }
    daemon.kill();
    drop(events);

    let daemon = Daemon::start(dir.path(), &database, &config);
    let chat = client.wait_status(&daemon, &id, "waiting").await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let messages = client.messages(&daemon, &id).await;
    let tool_step = messages
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the resumed tool step");
    let parts = tool_step["parts"].as_array().unwrap();
    assert_eq!(parts[0]["type"], "reasoning", "{tool_step}");
    assert_eq!(parts[0]["text"], "I should read a.txt first");
    let calls: Vec<_> = parts
        .iter()
        .filter(|p| p["type"] == "tool_call")
        .map(|p| p["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(calls, vec!["toolu_a"], "the cut call was never kept");
    let last = messages.last().unwrap();
    assert!(text_of(last).contains("alpha"), "{last}");
    // The request after the tools passed the mock's thinking rules.
    let sent = mock.recent_requests();
    let (_, request) = sent.last().unwrap();
    assert_eq!(
        request["messages"][1]["content"][0]["type"], "thinking",
        "{request}"
    );
}
