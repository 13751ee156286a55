//! Claude 4.6 and later through the daemon, against a mock that refuses their prefill as the
//! API does: every recovery continues by instruction, a model configured for prefill learns
//! from the refusal, adaptive thinking is requested with its effort, and a paused turn is
//! carried on.

use serde_json::{Value, json};

use crate::harness::*;
use crate::providers::Fixture;

const CLAUDE_4_6: &str = "claude-sonnet-4-6";
const FAST_RETRIES: &str = "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n";

/// The Messages requests of the chat whose directive has `script_id`, oldest first.
fn requests_of(mock: &keel_mock::MockServer, script_id: &str) -> Vec<Value> {
    let marker = format!("\\\"id\\\":\\\"{script_id}\\\"");
    mock.recent_requests()
        .into_iter()
        .filter(|(path, body)| path == "/v1/messages" && body.to_string().contains(&marker))
        .map(|(_, body)| body)
        .collect()
}

fn last_role(request: &Value) -> &str {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["role"].as_str())
        .unwrap_or_default()
}

/// A daemon with one Anthropic model, `upstream`, with `model` as extra keys of its entry.
fn claude_daemon(
    dir: &std::path::Path,
    mock: &keel_mock::MockServer,
    upstream: &str,
    model: &str,
) -> Daemon {
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
    std::fs::write(dir.join("workspace/a.txt"), "alpha").unwrap();
    let config = format!(
        "{FAST_RETRIES}[tools]\nbuiltin = [\"read_file\"]\nworkspace = \"{}\"\n\
         [[providers]]\nname = \"claude\"\nkind = \"anthropic\"\nbase_url = \"{}\"\n\
         [[models]]\nid = \"claude\"\nprovider = \"claude\"\nmodel = \"{upstream}\"\n\
         default = true\n{model}\n",
        dir.join("workspace").display(),
        mock.base_url()
    );
    Daemon::start(dir, &format!("sqlite://{}/keel.db", dir.display()), &config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_claude_sonnet_4_6_a_stream_cut_mid_text_ends_with_the_whole_reply_once() {
    let f = Fixture::start_named(FAST_RETRIES, "", CLAUDE_4_6).await;
    let reply = words(40);
    let script = json!({"id": "cut-4-6", "text": reply, "rate": 40.0,
        "cut": {"after": 12, "times": 1}});
    let id = f.chat("anthropic", "tell me", &script).await;
    let mut events = f.client.events(&f.daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;

    let messages = f.settle(&id).await;
    assert_eq!(assistant_texts(&messages), vec![reply.clone()]);
    assert_eq!(transcript.assistant_texts(), vec![reply]);
    assert_eq!(transcript.resets, 0, "stitched on, not restarted");
    let requests = requests_of(&f.mock, "cut-4-6");
    assert_eq!(
        requests.len(),
        2,
        "the cut and its continuation, none refused"
    );
    assert_eq!(last_role(&requests[1]), "user", "continued by instruction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_claude_sonnet_4_6_a_kill_9_mid_reply_ends_with_the_whole_reply_once() {
    let mut f = Fixture::start_named(FAST_RETRIES, "", CLAUDE_4_6).await;
    let reply = words(120);
    let script = json!({"id": "kill-4-6", "text": reply, "rate": 40.0});
    let id = f.chat("anthropic", "tell me", &script).await;
    let mut events = f.client.events(&f.daemon, &id, None).await;
    let mut before = Transcript::default();
    before.follow_parts(&mut events, 5).await;
    drop(events);
    f.kill_and_restart();

    let messages = f.settle(&id).await;
    assert_eq!(assistant_texts(&messages), vec![reply], "{messages:#?}");
    let chat = f.client.chat(&f.daemon, &id).await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let requests = requests_of(&f.mock, "kill-4-6");
    let resumed = requests.last().unwrap();
    assert_eq!(
        last_role(resumed),
        "user",
        "resumed by instruction: {resumed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_claude_sonnet_4_6_continue_appends_the_rest_of_a_stopped_reply_once() {
    let f = Fixture::start_named(FAST_RETRIES, "", CLAUDE_4_6).await;
    let (id, reply) = crate::rerun::stopped_chat(&f, "anthropic").await;
    let (status, chat) = f
        .client
        .post(&f.daemon.api(&format!("/chats/{id}/continue")), json!({}))
        .await;
    assert_eq!(status, 202, "{chat}");
    let messages = f.settle(&id).await;
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(
        format!("{}{}", text_of(&messages[1]), text_of(&messages[2])),
        reply,
        "the stopped reply and its continuation, every word once"
    );
    assert_eq!(
        last_role(&f.last_request("anthropic")),
        "user",
        "by instruction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_refused_by_a_model_configured_for_prefill_is_retried_at_once_by_instruction() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = claude_daemon(dir.path(), &mock, CLAUDE_4_6, "continuation = \"prefill\"");
    let client = Client::new();
    for (n, script_id) in ["learns", "remembers"].into_iter().enumerate() {
        let reply = words(30);
        let script = json!({"id": script_id, "text": reply, "rate": 40.0,
            "cut": {"after": 12, "times": 1}});
        let (id, mut events, mut transcript) = client
            .watched_turn(&daemon, &format!("go\n#mock {script}"))
            .await;
        transcript.follow_until(&mut events, "waiting").await;
        while transcript.assistant_texts().len() < 2 {
            transcript.follow_until(&mut events, "waiting").await;
        }
        let chat = client.chat(&daemon, &id).await;
        assert!(chat["last_error"].is_null(), "{chat}");
        assert_eq!(transcript.assistant_texts()[1], reply);
        assert_eq!(transcript.resets, 0);
        assert_eq!(transcript.retries, 1, "only the cut waits before its retry");
        let roles: Vec<String> = requests_of(&mock, script_id)
            .iter()
            .map(|r| last_role(r).to_owned())
            .collect();
        if n == 0 {
            // The cut, the refused prefill, the same continuation by instruction.
            assert_eq!(roles, ["user", "assistant", "user"]);
        } else {
            assert_eq!(
                roles,
                ["user", "user"],
                "the model is not asked to prefill again"
            );
        }
    }
    assert_eq!(
        daemon.logged().matches("refuses assistant prefill").count(),
        1,
        "logged once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_thinking_is_requested_with_its_effort_and_its_signed_thinking_goes_back() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = claude_daemon(
        dir.path(),
        &mock,
        "claude-opus-4-6",
        "thinking = \"adaptive\"\neffort = \"max\"",
    );
    let client = Client::new();
    let script = json!({"id": "adaptive", "steps": [
        {"reasoning": "I should read a.", "tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}]},
        {"reasoning": "It says alpha.", "text": "alpha"}
    ]});
    let id = client
        .create_chat(&daemon, json!({"text": format!("read a\n#mock {script}")}))
        .await;
    let chat = client.wait_status(&daemon, &id, "waiting").await;
    assert!(chat["last_error"].is_null(), "{chat}");
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(text_of(messages.last().unwrap()), "alpha");
    let requests = requests_of(&mock, "adaptive");
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request["thinking"],
            json!({"type": "adaptive"}),
            "{request}"
        );
        assert_eq!(request["output_config"], json!({"effort": "max"}));
        assert!(request.get("temperature").is_none());
    }
    // The tool step went back with its signed thinking first (the mock checks the signature).
    let tool_turn = &requests[1]["messages"][1];
    assert_eq!(tool_turn["role"], "assistant");
    assert_eq!(tool_turn["content"][0]["type"], "thinking", "{tool_turn}");
    assert!(tool_turn["content"][0]["signature"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_thinking_on_a_continuation_that_restarts_the_reply_is_never_stitched_on() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // An older Claude takes prefill, but not with thinking: the continuation goes by
    // instruction, so where it starts is checked.
    let daemon = claude_daemon(
        dir.path(),
        &mock,
        "claude-sonnet-4-5",
        "thinking_budget_tokens = 1024",
    );
    let client = Client::new();
    let reply = "The leaves fall slowly, adding to the forest floor a carpet of gold.";
    let script = json!({"id": "thinking-restart", "text": reply, "rate": 40.0,
        "cut": {"after": 6, "times": 1}, "restart_on_continue": true});
    let (id, mut events, mut transcript) = client
        .watched_turn(&daemon, &format!("go\n#mock {script}"))
        .await;
    transcript.follow_until(&mut events, "waiting").await;
    while transcript.assistant_texts().len() < 2 {
        transcript.follow_until(&mut events, "waiting").await;
    }
    assert_eq!(
        transcript.assistant_texts()[1],
        reply,
        "never the stitched restart"
    );
    assert!(transcript.resets >= 1, "the step was reset");
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(text_of(messages.last().unwrap()), reply);
    let roles: Vec<String> = requests_of(&mock, "thinking-restart")
        .iter()
        .map(|r| last_role(r).to_owned())
        .collect();
    assert_eq!(
        roles,
        ["user", "user", "user"],
        "cut, restarted continuation, whole restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_turn_on_claude_sonnet_4_6_is_carried_on_not_taken_for_the_end() {
    let f = Fixture::start_named("", "", CLAUDE_4_6).await;
    let script = json!({"id": "paused-4-6", "steps": [
        {"text": "Searching the web.", "finish": "pause_turn",
         "tool_calls": [{"name": "web_search", "server": true, "args": {"query": "keel"}}]},
        {"text": "Found it."}
    ]});
    let id = f.chat("anthropic", "look it up", &script).await;
    let messages = f.settle(&id).await;
    let replies: Vec<String> = assistant_texts(&messages)
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(replies, vec!["Searching the web.", "Found it."]);
    let requests = requests_of(&f.mock, "paused-4-6");
    assert_eq!(requests.len(), 2, "carried on once, accepted");
    assert_eq!(
        last_role(&requests[1]),
        "assistant",
        "the paused turn goes back as it is"
    );
}
