//! Chat Completions servers that differ from OpenAI, through the daemon, against a mock
//! provider that enforces each server's rule: the output-limit field of OpenAI's reasoning
//! models behind any address, Cerebras's refusal of `reasoning_content`, DeepSeek's demand
//! for it, calls told apart by id at a reused index, and Gemini's thought signatures.

use keel_mock::{ChatServer, MockConfig};
use serde_json::{Value, json};

use crate::harness::*;
use crate::providers::{Fixture, parts_of, tool_workspace};

/// A daemon with one `openai-chat` provider, whose model is `m`, on a mock standing in for
/// `server`. `provider` are extra keys of the provider entry, `model` of its model, whose
/// upstream name is `upstream`.
async fn start(server: ChatServer, provider: &str, upstream: &str, model: &str) -> Fixture {
    let mock = keel_mock::spawn(MockConfig::fast().with_chat_server(server))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workspace = tool_workspace(dir.path());
    let config = format!(
        "[tools]\nbuiltin = [\"read_file\"]\nworkspace = \"{}\"\n\n\
         [[providers]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"{}\"\n{provider}\n\n\
         [[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"{upstream}\"\ndefault = true\n{model}\n",
        workspace.display(),
        mock.base_url(),
    );
    Fixture::launch(mock, dir, config, &[])
}

/// Every Chat Completions request the mock received, oldest first.
fn requests(f: &Fixture) -> Vec<Value> {
    f.mock
        .recent_requests()
        .into_iter()
        .filter(|(path, _)| path == "/v1/chat/completions")
        .map(|(_, body)| body)
        .collect()
}

/// The text of the last message.
fn last_text(messages: &[Value]) -> String {
    text_of(messages.last().unwrap())
}

fn read(path: &str) -> Value {
    json!({"name": "read_file", "args": {"path": path}})
}

/// The request a one-line chat on `upstream` sends, with `provider` keys and an output
/// limit of 300, once the chat has its reply.
async fn limited_request(provider: &str, upstream: &str) -> Value {
    let s = start(
        ChatServer::Standard,
        provider,
        upstream,
        "max_output_tokens = 300",
    )
    .await;
    let id = s.chat("m", "go", &json!({"text": "limited"})).await;
    assert_eq!(last_text(&s.settle(&id).await), "limited");
    requests(&s).pop().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpt_5_behind_a_gateway_gets_its_limit_as_max_completion_tokens() {
    // Any address but api.openai.com: Azure OpenAI, LiteLLM, a proxy.
    let request = limited_request("", "gpt-5-mini").await;
    assert_eq!(request["max_completion_tokens"], 300, "{request}");
    assert!(request.get("max_tokens").is_none(), "{request}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_knows_only_max_tokens_can_be_given_it() {
    let request = limited_request("output_limit_field = \"max_tokens\"", "deepseek-chat").await;
    assert_eq!(request["max_tokens"], 300, "{request}");
    assert!(request.get("max_completion_tokens").is_none(), "{request}");
}

/// A turn that reasons, reads `a.txt` and answers from it, asserted to end with the
/// answer; the chat's id.
async fn reason_and_read(s: &Fixture) -> String {
    let script = json!({"steps": [
        {"reasoning": "I should read the file.", "tool_calls": [read("a.txt")]},
        {"reasoning": "It says alpha.", "text": "It says alpha."}
    ]});
    let id = s.chat("m", "go", &script).await;
    assert_eq!(last_text(&s.settle(&id).await), "It says alpha.");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cerebras_model_that_reasons_and_calls_tools_finishes_its_turn() {
    let s = start(ChatServer::Cerebras, "", "gpt-oss-120b", "").await;
    reason_and_read(&s).await;
    assert!(
        requests(&s)
            .iter()
            .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
            .all(|m| m.get("reasoning_content").is_none())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_thinking_with_tools_gets_its_reasoning_back() {
    let s = start(
        ChatServer::Standard,
        "reasoning_content = \"send\"\noutput_limit_field = \"max_tokens\"",
        "deepseek-reasoner",
        "",
    )
    .await;
    let id = reason_and_read(&s).await;
    // A second turn sends the whole history again, reasoning included.
    s.send(&id, "again", &json!({"text": "still alpha"})).await;
    assert_eq!(last_text(&s.settle(&id).await), "still alpha");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_streamed_at_one_index_with_their_own_ids_each_run() {
    let s = start(ChatServer::Standard, "", "mock", "").await;
    let mut first = read("a.txt");
    first["index"] = json!(0);
    let mut second = read("b.txt");
    second["index"] = json!(0);
    let script = json!({"steps": [
        {"tool_calls": [first, second]},
        {"text": "read both"}
    ]});
    let id = s.chat("m", "go", &script).await;
    let messages = s.settle(&id).await;
    assert_eq!(last_text(&messages), "read both");
    let calls = parts_of(&messages, "assistant")
        .into_iter()
        .filter(|p| p["type"] == "tool_call")
        .map(|p| p["args"].as_str().unwrap().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(
        calls,
        vec![r#"{"path":"a.txt"}"#, r#"{"path":"b.txt"}"#],
        "{messages:?}"
    );
    let results = parts_of(&messages, "tool");
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results.iter().all(|r| r["is_error"] == false),
        "{results:?}"
    );
    assert!(
        results[0]["result"].to_string().contains("alpha"),
        "{results:?}"
    );
    assert!(
        results[1]["result"].to_string().contains("bravo"),
        "{results:?}"
    );
}

/// The thought signature of a stored tool call part.
fn signature(part: &Value) -> &Value {
    &part["provider_metadata"]["openai_chat"]["extra_content"]["google"]["thought_signature"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_chat_with_two_tool_steps_round_trips_its_thought_signatures() {
    let s = start(ChatServer::Standard, "", "gemini-3-flash-preview", "").await;
    let script = json!({"steps": [
        {"reasoning": "Read a first.", "tool_calls": [read("a.txt")]},
        {"reasoning": "Now b, twice.", "tool_calls": [read("b.txt"), read("a.txt")]},
        {"text": "alpha and bravo"}
    ]});
    let id = s.chat("m", "go", &script).await;
    let messages = s.settle(&id).await;
    assert_eq!(last_text(&messages), "alpha and bravo");
    let calls: Vec<Value> = parts_of(&messages, "assistant")
        .into_iter()
        .filter(|p| p["type"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    // Gemini signs the first call of each step; the mock refused every request of the turn
    // that did not carry them back.
    assert!(signature(&calls[0]).is_string(), "{calls:?}");
    assert!(signature(&calls[1]).is_string(), "{calls:?}");
    assert!(calls[2].get("provider_metadata").is_none(), "{calls:?}");
    let last = requests(&s).pop().unwrap();
    let sent: Vec<&Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(sent.len(), 3, "{last}");
    assert_eq!(
        sent[0]["extra_content"]["google"]["thought_signature"],
        *signature(&calls[0])
    );
    assert!(sent[2].get("extra_content").is_none(), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_thought_signature_survives_a_restart_while_the_turn_waits_for_a_client_tool() {
    let mut s = start(ChatServer::Standard, "", "gemini-3-pro-preview", "").await;
    let script = json!({"steps": [
        {"tool_calls": [{"name": "get_weather", "args": {"city": "Oslo"}}]},
        {"text": "Sunny in Oslo."}
    ]});
    let id = s
        .client
        .create_chat(
            &s.daemon,
            json!({
                "text": format!("weather?\n#mock {script}"),
                "tools": [{"name": "get_weather", "description": "Weather by city",
                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
            }),
        )
        .await;
    let chat = s
        .client
        .wait_status(&s.daemon, &id, "requires_action")
        .await;
    let call_id = chat["pending_tool_calls"][0]["tool_call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.kill_and_restart();
    let (status, body) = s
        .client
        .post(
            &s.daemon.api(&format!("/chats/{id}/tool-results")),
            json!({"results": [{"tool_call_id": call_id, "result": {"sky": "clear"}}]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(last_text(&s.settle(&id).await), "Sunny in Oslo.");
}
