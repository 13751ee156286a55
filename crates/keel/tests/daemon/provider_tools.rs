//! Provider-executed tools (`provider_tools = ["web_search"]`) through the daemon, against
//! the rule-enforcing mock: the tool is offered by each provider's own type, the search and
//! its result are stored as provider-executed parts, and the next turn sends them back as
//! each API requires (the mock refuses anything else with the API's 400).

use serde_json::{Value, json};

use crate::compat::sse_data;
use crate::harness::*;
use crate::providers::{Fixture, parts_of, tool_workspace};

/// The protocols with a provider-run web search, as the model ids the fixture configures.
const SEARCHING: [&str; 2] = ["responses", "anthropic"];

/// A strict mock and a daemon with a searching model per protocol, and `read_file`.
fn searching_fixture(mock: keel_mock::MockServer) -> Fixture {
    let root = format!("http://{}", mock.addr());
    let dir = tempfile::tempdir().unwrap();
    let workspace = tool_workspace(dir.path());
    let config = format!(
        "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n\n\
         [tools]\nbuiltin = [\"read_file\"]\nworkspace = \"{}\"\n\n\
         [[providers]]\nname = \"responses\"\nkind = \"openai-responses\"\n\
         base_url = \"{root}/v1\"\n\n\
         [[providers]]\nname = \"anthropic\"\nkind = \"anthropic\"\nbase_url = \"{root}\"\n\n\
         [[models]]\nid = \"responses\"\nprovider = \"responses\"\nmodel = \"mock\"\n\
         default = true\nprovider_tools = [\"web_search\"]\n\n\
         [[models]]\nid = \"anthropic\"\nprovider = \"anthropic\"\nmodel = \"mock\"\n\
         provider_tools = [\"web_search\"]\n",
        workspace.display()
    );
    Fixture::launch(mock, dir, config, &[])
}

async fn start() -> Fixture {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    searching_fixture(mock)
}

fn search_script(text: &str) -> Value {
    json!({"web_search": {"query": "what is keel",
                          "results": [{"url": "https://keel.example/", "title": "Keel"}]},
           "text": text})
}

/// The provider-executed parts of the messages' assistant parts: `(type, tool_name)`.
fn provider_parts(messages: &[Value]) -> Vec<(String, String)> {
    parts_of(messages, "assistant")
        .iter()
        .filter(|p| p["provider_executed"] == true)
        .map(|p| {
            (
                p["type"].as_str().unwrap_or_default().to_owned(),
                p["tool_name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_searched_answer_is_stored_with_its_search_and_sent_back_next_turn() {
    let f = start().await;
    for protocol in SEARCHING {
        let id = f
            .chat(
                protocol,
                "what is keel?",
                &search_script("Keel is a daemon."),
            )
            .await;
        let messages = f.settle(&id).await;
        // Offered by the provider's own tool type, beside Keel's function tools.
        let first = f.last_request(protocol);
        let offered = match protocol {
            "responses" => json!({"type": "web_search"}),
            _ => json!({"type": "web_search_20250305", "name": "web_search"}),
        };
        assert!(
            first["tools"].as_array().unwrap().contains(&offered),
            "{protocol}: {first}"
        );
        assert_eq!(
            messages.len(),
            2,
            "{protocol}: no tool message: {messages:#?}"
        );
        let parts = parts_of(&messages, "assistant");
        let call = parts.iter().find(|p| p["type"] == "tool_call").unwrap();
        assert_eq!(call["tool_name"], "web_search", "{protocol}");
        assert_eq!(call["provider_executed"], true, "{protocol}");
        let args: Value = serde_json::from_str(call["args"].as_str().unwrap()).unwrap();
        assert_eq!(args["query"], "what is keel", "{protocol}: {args}");
        let result = parts.iter().find(|p| p["type"] == "tool_result").unwrap();
        assert_eq!(result["tool_call_id"], call["tool_call_id"], "{protocol}");
        assert_eq!(result["provider_executed"], true, "{protocol}");
        assert_eq!(text_of(messages.last().unwrap()), "Keel is a daemon.");
        assert!(
            parts
                .iter()
                .any(|p| p["type"] == "source" && p["url"] == "https://keel.example/"),
            "{protocol}: the citation is a source: {parts:?}"
        );

        // The second turn carries the search back; the mock would refuse it otherwise.
        f.send(&id, "thanks", &json!({"text": "You're welcome."}))
            .await;
        let messages = f.settle(&id).await;
        assert_eq!(text_of(messages.last().unwrap()), "You're welcome.");
        let request = f.last_request(protocol);
        match protocol {
            "responses" => {
                let item = request["input"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|i| i["type"] == "web_search_call")
                    .unwrap_or_else(|| panic!("no web_search_call item: {request}"));
                assert_eq!(item["id"], call["tool_call_id"]);
                assert_eq!(item["status"], "completed");
                assert_eq!(item["action"]["query"], "what is keel");
            }
            _ => {
                let turn = &request["messages"][1]["content"];
                assert_eq!(turn[0]["type"], "server_tool_use", "{request}");
                assert_eq!(turn[1]["type"], "web_search_tool_result", "{request}");
                let page = &turn[1]["content"][0];
                assert_eq!(page["url"], "https://keel.example/");
                // Exactly as the API sent it: the stored result, unchanged.
                assert_eq!(result["result"][0], *page, "{request}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_after_its_search_is_continued_without_running_keel_tools_again() {
    let f = start().await;
    let answer = "Keel keeps every chat durable across cuts and kills alike.";
    for protocol in SEARCHING {
        let mut step = search_script(answer);
        // The search streams three argument chunks, so the cut comes three words into
        // the text that follows it.
        step["cut"] = json!({"after": 6, "times": 1});
        let script = json!({"id": format!("cut-search-{protocol}"), "steps": [
            {"tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}]},
            step,
        ]});
        let id = f.chat(protocol, "read, then search", &script).await;
        let messages = f.settle(&id).await;
        assert_eq!(text_of(messages.last().unwrap()), answer, "{protocol}");
        let tool_messages = messages.iter().filter(|m| m["role"] == "tool").count();
        assert_eq!(
            tool_messages, 1,
            "{protocol}: read_file ran once: {messages:#?}"
        );
        assert_eq!(
            provider_parts(&messages),
            [
                ("tool_call".to_owned(), "web_search".to_owned()),
                ("tool_result".to_owned(), "web_search".to_owned())
            ],
            "{protocol}: one search, kept across the cut: {messages:#?}"
        );
        // The continuation went out with the search before the partial text.
        // (The user's directive spells the text too: the partial reply is the last one.)
        let request = f.last_request(protocol).to_string();
        let search = request
            .find("\"web_search_call\"")
            .or_else(|| request.find("\"server_tool_use\""))
            .unwrap_or_else(|| panic!("{protocol}: no search in {request}"));
        let partial = request
            .rfind("Keel keeps every")
            .unwrap_or_else(|| panic!("{protocol}: no partial text in {request}"));
        assert!(search < partial, "{protocol}: {request}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_killed_after_its_search_resumes_with_the_search_kept_once() {
    let mut f = start().await;
    let answer = words(40);
    for protocol in SEARCHING {
        let mut script = search_script(&answer);
        script["rate"] = json!(20.0);
        let id = f.chat(protocol, "search, then answer", &script).await;
        let mut events = f.client.events(&f.daemon, &id, None).await;
        // The search's result, then half a second of text: the live-part log (written
        // within 200 ms) holds both when the daemon dies.
        let (mut searched, mut words_after) = (false, 0);
        while words_after < 10 {
            let event = events.next().await.expect("the stream ended early");
            let part = &event.data["part"];
            if event.event != "part" {
                continue;
            }
            if part["type"] == "tool_result" && part["provider_executed"] == true {
                searched = true;
            } else if searched && part["type"] == "text" {
                words_after += 1;
            }
        }
        drop(events);
        f.kill_and_restart();
        let messages = f.settle(&id).await;
        assert_eq!(text_of(messages.last().unwrap()), answer, "{protocol}");
        assert_eq!(
            provider_parts(&messages),
            [
                ("tool_call".to_owned(), "web_search".to_owned()),
                ("tool_result".to_owned(), "web_search".to_owned())
            ],
            "{protocol}: the search survives the kill, once: {messages:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_stream_marks_a_provider_search_as_provider_executed() {
    let f = start().await;
    let script = search_script("Keel is a daemon.");
    let body = json!({"id": "searching-page", "trigger": "submit-message", "messageId": null,
        "model": "anthropic",
        "messages": [{"id": "u1", "role": "user", "parts": [
            {"type": "text", "text": format!("what is keel?\n#mock {script}")}]}]});
    let chunks = sse_data(
        post_stream(&f.daemon.api("/ai-sdk/chat"), &body).await,
        |_| false,
    )
    .await;
    for kind in [
        "tool-input-start",
        "tool-input-available",
        "tool-output-available",
    ] {
        let chunk = chunks
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind}: {chunks:?}"));
        assert_eq!(chunk["providerExecuted"], true, "{kind}: {chunks:?}");
        assert_eq!(chunk["toolCallId"], chunks[2]["toolCallId"], "{chunks:?}");
    }
    let finish = chunks.iter().rev().find(|c| c["type"] == "finish").unwrap();
    assert_eq!(
        finish["finishReason"], "stop",
        "nothing for the page to run"
    );
    let history = get_json(&f.daemon.api("/ai-sdk/chat/searching-page/messages")).await;
    let search = history[1]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-web_search")
        .unwrap_or_else(|| panic!("{history}"));
    assert_eq!(search["providerExecuted"], true);
    assert_eq!(search["state"], "output-available");
}

#[tokio::test]
async fn provider_tools_a_provider_does_not_run_stop_start_up() {
    let (dir, database) = scratch();
    let config = "[[providers]]\nname = \"chat\"\nkind = \"openai-chat\"\n\
                  base_url = \"http://127.0.0.1:9/v1\"\n\
                  [[models]]\nid = \"m\"\nprovider = \"chat\"\nmodel = \"m\"\n\
                  provider_tools = [\"web_search\"]\n";
    let refused = Daemon::refused(dir.path(), &database, config);
    assert!(refused.contains("models[0].provider_tools"), "{refused}");
    assert!(refused.contains("openai-chat"), "{refused}");
}
