//! Continuing a cut reply (R1) through the daemon, against the rule-enforcing mock: native
//! prefill where the server has it, and a checked seam where the model is only asked to
//! continue.

use serde_json::{Value, json};

use crate::harness::*;

fn chat_daemon(dir: &std::path::Path, mock: &keel_mock::MockServer, extra: &str) -> Daemon {
    let config = format!(
        "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n\
         [[providers]]\nname = \"local\"\nkind = \"openai-chat\"\nbase_url = \"{}\"\n{extra}\n\
         [[models]]\nid = \"local\"\nprovider = \"local\"\nmodel = \"mock\"\ndefault = true\n",
        mock.base_url()
    );
    Daemon::start(dir, &format!("sqlite://{}/keel.db", dir.display()), &config)
}

fn chat_requests(mock: &keel_mock::MockServer) -> Vec<Value> {
    mock.recent_requests()
        .into_iter()
        .filter(|(path, _)| path == "/v1/chat/completions")
        .map(|(_, body)| body)
        .collect()
}

#[tokio::test]
async fn prefill_continues_a_cut_reply_natively() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = chat_daemon(dir.path(), &mock, "continuation = \"prefill\"");
    let client = Client::new();
    let reply = words(30);
    let script = json!({"id": "prefill", "text": reply, "cut": {"after": 12, "times": 1}});
    let id = client
        .create_chat(&daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;

    assert_eq!(transcript.assistant_texts(), vec![reply]);
    assert_eq!(transcript.resets, 0, "stitched, not restarted");
    let requests = chat_requests(&mock);
    let continued = requests.last().unwrap();
    assert_eq!(continued["continue_final_message"], true, "{continued}");
    assert_eq!(continued["add_generation_prompt"], false);
    let last = continued["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["prefix"], true);
    assert_eq!(last["content"], words(12));
}

#[tokio::test]
async fn a_continuation_that_restarts_the_reply_is_replaced_by_a_whole_restart() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let daemon = chat_daemon(dir.path(), &mock, "");
    let client = Client::new();
    let reply = "The leaves fall slowly, adding to the forest floor a carpet of gold.";
    // Like a small model asked to continue: it starts the reply over.
    let script = json!({
        "id": "restarting", "text": reply, "cut": {"after": 6, "times": 1},
        "restart_on_continue": true
    });
    // The reset is only seen by a stream open before the turn starts.
    let (id, mut events, mut transcript) = client
        .watched_turn(&daemon, &format!("go\n#mock {script}"))
        .await;
    transcript.follow_until(&mut events, "waiting").await;
    while transcript.assistant_texts().len() < 2 {
        transcript.follow_until(&mut events, "waiting").await;
    }

    assert_eq!(
        transcript.assistant_texts(),
        vec!["ready", reply],
        "never the stitched restart"
    );
    assert!(transcript.resets >= 1, "the step was reset");
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(text_of(messages.last().unwrap()), reply);
    let requests = chat_requests(&mock);
    let turn = &requests[1..];
    assert_eq!(turn.len(), 3, "cut, restarted continuation, whole restart");
    let last = turn[2]["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user", "the restart is not a continuation");
}
