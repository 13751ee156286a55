//! What each protocol's API does beyond text and tools, through the daemon against the
//! rule-enforcing mock: refusals, paused turns, and a chat that survives cuts and kills on
//! every protocol.

use serde_json::{Value, json};

use crate::harness::*;
use crate::providers::{Fixture, PROTOCOLS, parts_of};

/// `(type, text)` of each part of a message.
fn kinds(message: &Value) -> Vec<(String, String)> {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["type"].as_str().unwrap_or_default().to_owned(),
                p["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Follows the chat's live events until it is `waiting`; returns the refusal text streamed
/// as live parts (not from committed messages).
async fn streamed_refusal(f: &Fixture, id: &str) -> String {
    let mut events = f.client.events(&f.daemon, id, None).await;
    let mut refusal = String::new();
    while let Some(event) = events.next().await {
        match event.event.as_str() {
            "part" if event.data["part"]["type"] == "refusal" => {
                refusal.push_str(event.data["part"]["text"].as_str().unwrap_or_default());
            }
            "stream_reset" => refusal.clear(),
            "status" if event.data["status"] == "waiting" => return refusal,
            _ => {}
        }
    }
    panic!("the event stream ended before the chat was waiting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_a_part_of_its_own_streamed_stored_and_sent_back_as_each_api_takes_it() {
    let f = Fixture::start("", "").await;
    let refusal = "I can't help with that.";
    for protocol in PROTOCOLS {
        let script = json!({"text": "Let me see.", "refusal": refusal, "rate": 10.0});
        let id = f.chat(protocol, "help me", &script).await;
        assert_eq!(streamed_refusal(&f, &id).await, refusal, "{protocol}");
        let messages = f.settle(&id).await;
        assert_eq!(
            kinds(messages.last().unwrap()),
            vec![
                ("text".to_owned(), "Let me see.".to_owned()),
                ("refusal".to_owned(), refusal.to_owned())
            ],
            "{protocol}"
        );

        // The next turn's request holds the refusal as the API takes it, and is accepted.
        f.send(&id, "something else", &json!({"text": "Sure."}))
            .await;
        let messages = f.settle(&id).await;
        assert_eq!(
            text_of(messages.last().unwrap()),
            "Sure.",
            "{protocol}: {messages:#?}"
        );
        let request = f.last_request(protocol);
        match protocol {
            "chat" => assert!(
                request["messages"].as_array().unwrap().contains(&json!(
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Let me see."},
                        {"type": "refusal", "refusal": refusal}]}
                )),
                "{request}"
            ),
            "responses" => assert!(
                request["input"].as_array().unwrap().contains(&json!(
                    {"role": "assistant", "content": [
                        {"type": "output_text", "text": "Let me see.", "annotations": []},
                        {"type": "refusal", "refusal": refusal}]}
                )),
                "{request}"
            ),
            _ => {
                // Anthropic asks for the refused turn to be taken out of the conversation.
                let turns = request["messages"].as_array().unwrap();
                assert!(turns.iter().all(|t| t["role"] != "assistant"), "{request}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_cut_midway_restarts_and_is_stored_once_on_every_protocol() {
    let f = Fixture::start("retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n", "").await;
    let refusal = words(10);
    for protocol in PROTOCOLS {
        let script = json!({"id": format!("cut-refusal-{protocol}"), "text": "Well.",
            "refusal": refusal, "rate": 40.0, "cut": {"after": 5, "times": 1}});
        let id = f.chat(protocol, "help me", &script).await;
        assert_eq!(streamed_refusal(&f, &id).await, refusal, "{protocol}");
        let messages = f.settle(&id).await;
        assert_eq!(
            kinds(messages.last().unwrap()),
            vec![
                ("text".to_owned(), "Well.".to_owned()),
                ("refusal".to_owned(), refusal.clone())
            ],
            "{protocol}"
        );
        assert_eq!(f.mock.attempts(&format!("cut-refusal-{protocol}"), 0), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_refusal_without_an_explanation_still_says_the_reply_was_declined() {
    let f = Fixture::start("", "").await;
    let id = f
        .chat(
            "anthropic",
            "help me",
            &json!({"text": "Hello..", "finish": "content_filter"}),
        )
        .await;
    let messages = f.settle(&id).await;
    let parts = kinds(messages.last().unwrap());
    assert_eq!(parts[0], ("text".to_owned(), "Hello..".to_owned()));
    assert_eq!(parts[1].0, "refusal", "{parts:?}");
    assert!(!parts[1].1.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_anthropic_turn_is_carried_on_with_its_content_sent_back_as_is() {
    let f = Fixture::start("", "").await;
    let script = json!({"steps": [
        {"text": "Searching the web.", "finish": "pause_turn"},
        {"text": "Found it."}
    ]});
    let id = f.chat("anthropic", "look it up", &script).await;
    let messages = f.settle(&id).await;
    let replies = assistant_texts(&messages);
    assert_eq!(replies, vec!["Searching the web.", "Found it."]);
    // The request that carried the turn on ended with it, exactly, and nothing after it.
    let request = f.last_request("anthropic");
    let last = request["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "assistant", "{request}");
    let blocks = last["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "{request}");
    assert_eq!(
        (&blocks[0]["type"], &blocks[0]["text"]),
        (&json!("text"), &json!("Searching the web.")),
        "{request}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_right_after_a_paused_anthropic_turn_carries_it_on_exactly_once() {
    let mut f = Fixture::start("", "").await;
    // The step after the pause holds its first attempt before any content, so the daemon
    // dies with the paused step committed and nothing of the next one streamed.
    let script = json!({"id": "paused-kill", "steps": [
        {"text": "Searching the web.", "finish": "pause_turn"},
        {"text": "Found it.", "stall": {"after": 0, "ms": 600000, "times": 1}}
    ]});
    let id = f.chat("anthropic", "look it up", &script).await;
    wait_until("the paused turn was never carried on", async || {
        f.mock.attempts("paused-kill", 1) > 0
    })
    .await;
    f.kill_and_restart();

    let messages = f.settle(&id).await;
    let replies = assistant_texts(&messages);
    assert_eq!(
        replies,
        vec!["Searching the web.", "Found it."],
        "{messages:#?}"
    );
    assert_eq!(f.mock.attempts("paused-kill", 0), 1);
    assert_eq!(f.mock.attempts("paused-kill", 1), 2);
    // The resumed run sent the paused turn back as it is, as the last message.
    let request = f.last_request("anthropic");
    let last = request["messages"].as_array().unwrap().last().unwrap();
    let blocks = last["content"].as_array().unwrap();
    assert_eq!(
        (&last["role"], blocks.len(), &blocks[0]["text"]),
        (&json!("assistant"), 1, &json!("Searching the web.")),
        "{request}"
    );
}

/// A step that reasons and reads a file, then a step that reasons and answers.
fn tool_turn(turn: usize) -> Value {
    json!({"steps": [
        {"reasoning": format!("Turn {turn}: I should read a."),
         "tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}]},
        {"reasoning": format!("Turn {turn}: it says alpha."), "text": format!("Answer {turn}: alpha.")}
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_with_tools_and_reasoning_survives_three_turns_on_every_protocol() {
    let f = Fixture::start("", "").await;
    for protocol in PROTOCOLS {
        let id = f.chat(protocol, "read a", &tool_turn(1)).await;
        f.settle(&id).await;
        for turn in 2..=3 {
            f.send(&id, "read a again", &tool_turn(turn)).await;
        }
        let messages = f.settle(&id).await;
        let answers: Vec<String> = assistant_texts(&messages)
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect();
        assert_eq!(
            answers,
            vec!["Answer 1: alpha.", "Answer 2: alpha.", "Answer 3: alpha."],
            "{protocol}"
        );
        let results = parts_of(&messages, "tool");
        assert_eq!(results.len(), 3, "{protocol}");
        assert!(
            results.iter().all(|r| r["is_error"] == false),
            "{results:?}"
        );
        let reasoning: Vec<Value> = parts_of(&messages, "assistant")
            .into_iter()
            .filter(|p| p["type"] == "reasoning")
            .collect();
        assert_eq!(
            reasoning.len(),
            6,
            "{protocol}: every step kept its reasoning"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_mid_reasoning_recovers_with_nothing_doubled_or_lost_on_every_protocol() {
    let f = Fixture::start("retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n", "").await;
    let reasoning = words(12);
    for protocol in PROTOCOLS {
        let script = json!({"id": format!("cut-reasoning-{protocol}"), "reasoning": reasoning,
            "text": "The answer.", "rate": 40.0, "cut": {"after": 6, "times": 1}});
        let id = f.chat(protocol, "think", &script).await;
        let mut events = f.client.events(&f.daemon, &id, None).await;
        let mut transcript = Transcript::default();
        let mut reasoning_seen = String::new();
        while let Some(event) = events.next().await {
            transcript.apply(&event);
            if event.event == "part" {
                // What a client holds of the step's reasoning right before the commit.
                reasoning_seen.clone_from(&transcript.live_reasoning);
            }
            if event.event == "status" && event.data["status"] == "waiting" {
                break;
            }
        }
        assert_eq!(f.mock.attempts(&format!("cut-reasoning-{protocol}"), 0), 2);
        assert_eq!(reasoning_seen, reasoning, "{protocol}: live reasoning");
        let messages = f.settle(&id).await;
        let reply = messages.last().unwrap();
        assert_eq!(
            kinds(reply),
            vec![
                ("reasoning".to_owned(), reasoning.clone()),
                ("text".to_owned(), "The answer.".to_owned())
            ],
            "{protocol}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_mid_tool_arguments_resumes_on_every_protocol() {
    let mut f = Fixture::start("retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n", "").await;
    for protocol in PROTOCOLS {
        let (first, second) = (format!("{protocol}_a"), format!("{protocol}_b"));
        // One complete call, then a second whose long arguments stream slowly.
        let script = json!({"steps": [
            {"reasoning": "I should read a.txt first", "rate": 20.0, "tool_calls": [
                {"name": "read_file", "args": {"path": "a.txt"}, "id": first},
                {"name": "read_file", "args": {"path": "b".repeat(800)}, "id": second}]},
            {"text": "It says alpha."}
        ]});
        let id = f.chat(protocol, "read", &script).await;
        let mut events = f.client.events(&f.daemon, &id, None).await;
        let mut deltas = 0;
        while deltas < 12 {
            let event = events.next().await.expect("the stream ended early");
            if event.event == "part" && event.data["part"]["tool_call_id"] == second.as_str() {
                deltas += 1;
            }
        }
        f.kill_and_restart();
        drop(events);

        let messages = f.settle(&id).await;
        let calls: Vec<String> = parts_of(&messages, "assistant")
            .iter()
            .filter(|p| p["type"] == "tool_call")
            .map(|p| p["tool_call_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        let results = parts_of(&messages, "tool");
        if protocol == "chat" {
            // Chat Completions marks no call complete before the finish reason, so the log
            // held no whole call: the step restarted and both calls ran.
            assert_eq!(calls, vec![first.clone(), second.clone()], "{protocol}");
            assert_eq!(results.len(), 2, "{protocol}: {results:?}");
        } else {
            assert_eq!(
                calls,
                vec![first.clone()],
                "{protocol}: the cut call was never kept"
            );
            assert_eq!(results.len(), 1, "{protocol}: {results:?}");
        }
        assert!(
            results[0]["result"].to_string().contains("alpha"),
            "{protocol}"
        );
        assert_eq!(
            text_of(messages.last().unwrap()),
            "It says alpha.",
            "{protocol}"
        );
        // The chat goes on.
        f.send(&id, "thanks", &json!({"text": "You're welcome."}))
            .await;
        assert_eq!(
            text_of(f.settle(&id).await.last().unwrap()),
            "You're welcome.",
            "{protocol}"
        );
    }
}

/// Anthropic web search run by the provider, its query streamed slowly.
fn server_search(query_len: usize) -> Value {
    json!({"text": "Let me search.", "rate": 20.0, "tool_calls": [
        {"name": "web_search", "server": true, "args": {"query": "q".repeat(query_len)}}]})
}

/// Interrupts the run in progress and returns the chat's messages once it is idle again.
async fn interrupt_to_idle(f: &Fixture, id: &str) -> Vec<Value> {
    let (status, body) = f.client.interrupt(&f.daemon, id).await;
    assert_eq!(status, 202, "{body}");
    let chat = f.ended(id).await;
    assert_eq!(chat["status"], "waiting", "{chat}");
    f.client.messages(&f.daemon, id).await
}

/// A call the provider runs is answered by the provider only: no tool result is stored.
fn assert_no_local_result(messages: &[Value]) {
    let results: Vec<Value> = messages
        .iter()
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "tool_result")
        .collect();
    assert!(
        results.is_empty(),
        "only the provider can answer: {results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_provider_run_call_gets_no_local_result_and_the_next_turn_is_accepted() {
    let f = Fixture::start("", "").await;
    let id = f.chat("anthropic", "search", &server_search(600)).await;
    let mut events = f.client.events(&f.daemon, &id, None).await;
    let mut deltas = 0;
    while deltas < 5 {
        let event = events.next().await.expect("the stream ended early");
        if event.event == "part" && event.data["part"]["tool_name"] == "web_search" {
            deltas += 1;
        }
    }
    let messages = interrupt_to_idle(&f, &id).await;
    let calls: Vec<Value> = parts_of(&messages, "assistant")
        .into_iter()
        .filter(|p| p["type"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "{messages:?}");
    assert_eq!(calls[0]["provider_executed"], true);
    assert_no_local_result(&messages);
    // The next request leaves the unanswered server call out, so the API accepts it.
    f.send(&id, "go on", &json!({"text": "ok"})).await;
    assert_eq!(text_of(f.settle(&id).await.last().unwrap()), "ok");
    let request = f.last_request("anthropic");
    assert!(
        !request.to_string().contains("server_tool_use"),
        "{request}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_responses_web_search_gets_no_local_result_and_the_next_turn_is_accepted() {
    let f = Fixture::start("", "").await;
    // The search's item opens right after the text, then holds (`in_progress`, the stall
    // is due within the text or at the query's second chunk) until the interrupt.
    let script = json!({"text": "Let me search.", "stall": {"after": 4, "ms": 600000},
        "tool_calls": [{"name": "web_search", "server": true,
                        "args": {"query": "q".repeat(600)}}]});
    let id = f.chat("responses", "search", &script).await;
    let mut events = f.client.events(&f.daemon, &id, None).await;
    let mut text = String::new();
    while text != "Let me search." {
        let event = events.next().await.expect("the stream ended early");
        if event.event == "part" && event.data["part"]["type"] == "text" {
            text.push_str(event.data["part"]["text"].as_str().unwrap_or_default());
        }
    }
    let messages = interrupt_to_idle(&f, &id).await;
    assert_no_local_result(&messages);
    assert!(
        parts_of(&messages, "assistant")
            .iter()
            .filter(|p| p["type"] == "tool_call")
            .all(|p| p["provider_executed"] == true),
        "{messages:?}"
    );
    // The next request answers nothing of the search, so the API accepts it.
    f.send(&id, "go on", &json!({"text": "ok"})).await;
    assert_eq!(text_of(f.settle(&id).await.last().unwrap()), "ok");
    let request = f.last_request("responses");
    // Only messages: no `function_call`, `function_call_output` or `web_search_call` item.
    let items = request["input"].as_array().unwrap();
    assert!(items.iter().all(|i| i.get("role").is_some()), "{request}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_responses_web_search_is_a_provider_run_call_with_its_result() {
    let f = Fixture::start("", "").await;
    let id = f.chat("responses", "search", &server_search(8)).await;
    let messages = f.settle(&id).await;
    let parts = parts_of(&messages, "assistant");
    let call = parts.iter().find(|p| p["type"] == "tool_call").unwrap();
    assert_eq!(
        (&call["tool_name"], &call["provider_executed"]),
        (&json!("web_search"), &json!(true)),
        "{messages:?}"
    );
    assert!(parts_of(&messages, "tool").is_empty(), "{messages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_provider_run_call_goes_back_with_its_result_in_the_same_turn() {
    let f = Fixture::start("", "").await;
    let id = f.chat("anthropic", "search", &server_search(8)).await;
    let messages = f.settle(&id).await;
    let kinds: Vec<String> = parts_of(&messages, "assistant")
        .iter()
        .map(|p| p["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        kinds,
        vec!["text", "tool_call", "tool_result"],
        "{messages:?}"
    );
    f.send(&id, "and?", &json!({"text": "done"})).await;
    assert_eq!(text_of(f.settle(&id).await.last().unwrap()), "done");
    let request = f.last_request("anthropic");
    let turn = &request["messages"][1]["content"];
    assert_eq!(turn[1]["type"], "server_tool_use", "{request}");
    assert_eq!(turn[2]["type"], "web_search_tool_result", "{request}");
}
