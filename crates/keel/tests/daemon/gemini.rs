//! Gemini's own API through the daemon, against a mock that enforces its rules: thoughts
//! and thought signatures across tool steps (a lost signature is a 400 on Gemini 3), calls
//! without ids from earlier models, and a cut stream continued by instruction.

use serde_json::{Value, json};

use crate::harness::*;
use crate::providers::{Fixture, parts_of, tool_workspace};

const FAST_RETRIES: &str = "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n";

/// A daemon with one `gemini` provider on a strict mock; its model `g` is `upstream`, with
/// `model` as extra keys.
async fn start(upstream: &str, model: &str) -> Fixture {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workspace = tool_workspace(dir.path());
    let config = format!(
        "{FAST_RETRIES}[tools]\nbuiltin = [\"read_file\"]\nworkspace = \"{}\"\n\n\
         [[providers]]\nname = \"google\"\nkind = \"gemini\"\n\
         base_url = \"http://{}/v1beta\"\n\n\
         [[models]]\nid = \"g\"\nprovider = \"google\"\nmodel = \"{upstream}\"\n\
         default = true\n{model}\n",
        workspace.display(),
        mock.addr(),
    );
    Fixture::launch(mock, dir, config, &[])
}

/// The Gemini requests the mock received, oldest first.
fn requests(f: &Fixture) -> Vec<Value> {
    f.mock
        .recent_requests()
        .into_iter()
        .filter(|(path, _)| path.starts_with("/v1beta/models/"))
        .map(|(_, body)| body)
        .collect()
}

fn read(path: &str) -> Value {
    json!({"name": "read_file", "args": {"path": path}})
}

fn signature(part: &Value) -> &Value {
    &part["provider_metadata"]["gemini"]["thought_signature"]
}

fn calls(messages: &[Value]) -> Vec<Value> {
    parts_of(messages, "assistant")
        .into_iter()
        .filter(|p| p["type"] == "tool_call")
        .collect()
}

/// The function-call parts of the model turns of `request`, in order.
fn sent_calls(request: &Value) -> Vec<Value> {
    request["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p.get("functionCall").is_some())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_3_chat_with_thinking_and_two_tool_steps_round_trips_its_signatures() {
    let f = start("gemini-3-flash-preview", "reasoning_effort = \"high\"").await;
    let script = json!({"steps": [
        {"reasoning": "Read a first.", "tool_calls": [read("a.txt")]},
        {"reasoning": "Now b, twice.", "tool_calls": [read("b.txt"), read("a.txt")]},
        {"text": "alpha and bravo"}
    ]});
    let id = f.chat("g", "go", &script).await;
    let messages = f.settle(&id).await;
    assert_eq!(text_of(messages.last().unwrap()), "alpha and bravo");
    let thoughts: Vec<Value> = parts_of(&messages, "assistant")
        .into_iter()
        .filter(|p| p["type"] == "reasoning")
        .map(|p| p["text"].clone())
        .collect();
    assert_eq!(
        thoughts,
        vec![json!("Read a first."), json!("Now b, twice.")]
    );
    let calls = calls(&messages);
    assert_eq!(calls.len(), 3, "{calls:?}");
    // Gemini signs the first call of each step; the mock refused every request of the turn
    // that did not carry them back.
    assert!(signature(&calls[0]).is_string(), "{calls:?}");
    assert!(signature(&calls[1]).is_string(), "{calls:?}");
    assert!(calls[2].get("provider_metadata").is_none(), "{calls:?}");
    let sent = requests(&f);
    assert_eq!(sent.len(), 3, "no request was refused");
    let last = sent.last().unwrap();
    assert_eq!(
        last["generationConfig"]["thinkingConfig"],
        json!({"thinkingLevel": "high", "includeThoughts": true})
    );
    let sent = sent_calls(last);
    assert_eq!(sent.len(), 3, "{last}");
    assert_eq!(sent[0]["thoughtSignature"], *signature(&calls[0]));
    assert_eq!(sent[1]["thoughtSignature"], *signature(&calls[1]));
    assert!(sent[2].get("thoughtSignature").is_none(), "{last}");
    assert_eq!(sent[0]["functionCall"]["id"], calls[0]["tool_call_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_a_model_that_sends_no_ids_get_ids_that_never_go_back() {
    let f = start("gemini-2.5-flash", "thinking_budget_tokens = 512").await;
    let script = json!({"steps": [
        {"tool_calls": [read("a.txt"), read("b.txt")]},
        {"text": "both read"}
    ]});
    let id = f.chat("g", "go", &script).await;
    let messages = f.settle(&id).await;
    assert_eq!(text_of(messages.last().unwrap()), "both read");
    let calls = calls(&messages);
    let ids: Vec<&str> = calls
        .iter()
        .map(|c| c["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "parallel calls stay apart");
    let results = parts_of(&messages, "tool");
    assert!(
        results[0]["result"].to_string().contains("alpha"),
        "{results:?}"
    );
    assert!(
        results[1]["result"].to_string().contains("bravo"),
        "{results:?}"
    );
    let last = requests(&f).pop().unwrap();
    for call in sent_calls(&last) {
        assert!(call["functionCall"].get("id").is_none(), "{last}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_stream_cut_mid_text_ends_with_the_whole_reply_once() {
    let f = start("gemini-3-flash-preview", "").await;
    let reply = words(40);
    let script = json!({"id": "gemini-cut", "text": reply, "rate": 40.0,
        "cut": {"after": 12, "times": 1}});
    let id = f.chat("g", "tell me", &script).await;
    let mut events = f.client.events(&f.daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;

    let messages = f.settle(&id).await;
    assert_eq!(assistant_texts(&messages), vec![reply.clone()]);
    assert_eq!(transcript.assistant_texts(), vec![reply]);
    assert_eq!(transcript.resets, 0, "stitched on, not restarted");
    let sent = requests(&f);
    assert_eq!(sent.len(), 2, "the cut and its continuation");
    let contents = sent[1]["contents"].as_array().unwrap();
    assert_eq!(contents[contents.len() - 2]["role"], "model");
    assert_eq!(
        contents[contents.len() - 1]["role"],
        "user",
        "by instruction"
    );
}
