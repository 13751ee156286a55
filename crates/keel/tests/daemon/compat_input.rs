//! What clients of the compatible endpoints send, through the running daemon: whole
//! conversations as Responses `input` items, `previous_response_id` of an older response,
//! per-request `instructions`, and the AI SDK transport's bodies (a whole UI history,
//! `messageId` edits and regenerations, a message sent while a reply streams).

use serde_json::{Value, json};

use crate::compat::{sse_data, ui_text};
use crate::harness::*;
use crate::providers::Fixture;

/// The hyphenated chat id inside a response id (`resp_` + 32 hex digits + ...).
fn chat_of(response: &Value) -> String {
    let hex = &response["id"].as_str().unwrap()[5..37];
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

async fn respond(daemon: &Daemon, body: Value) -> (u16, Value) {
    Client::new()
        .post(&format!("{}/v1/responses", daemon.url), body)
        .await
}

/// The roles and texts of a branch, as `role: text` lines.
fn turns(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| format!("{}: {}", m["role"].as_str().unwrap(), text_of(m)))
        .collect()
}

/// The chat-completions messages the mock last received, as `role: content` lines.
fn prompt(fixture: &Fixture) -> Vec<String> {
    fixture.last_request("chat")["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            format!("{}: {content}", m["role"].as_str().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_stateless_conversation_reaches_the_model_as_its_turns() {
    let fixture = Fixture::start("", "").await;
    let daemon = &fixture.daemon;
    let (status, response) = respond(
        daemon,
        json!({"model": "chat", "instructions": "Be brief.", "input": [
            {"role": "developer", "content": "Answer in English."},
            {"role": "user", "content": "first question"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "first answer"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "second question"}]}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["output_text"], "second question");
    assert_eq!(
        prompt(&fixture),
        [
            "system: Be brief.\n\nAnswer in English.",
            "user: first question",
            "assistant: first answer",
            "user: second question"
        ]
    );
    let messages = fixture.client.messages(daemon, &chat_of(&response)).await;
    assert_eq!(
        turns(&messages),
        [
            "user: first question",
            "assistant: first answer",
            "user: second question",
            "assistant: second question"
        ]
    );
}

#[tokio::test]
async fn stateless_turns_with_a_function_tool_need_no_previous_response_id() {
    stateless_turns_with_a_function_tool(Fixture::start("", "").await).await;
}

#[tokio::test]
async fn a_stateless_turn_whose_run_ends_before_its_request_goes_on_still_gets_its_reply() {
    // The request looks at its new chat again only after the chat's first run has ended:
    // its response still starts at its own input, not at the reply the run stored.
    let settle = [("KEEL_DEBUG_START_SETTLE", "1")];
    stateless_turns_with_a_function_tool(Fixture::start_with_env("", "", &settle).await).await;
}

/// A function call answered by the client, who then sends the whole conversation again.
async fn stateless_turns_with_a_function_tool(fixture: Fixture) {
    let daemon = &fixture.daemon;
    let tools = json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]);
    let script = json!({"tool_calls": [{"name": "lookup", "args": {"q": "x"}}]});
    let mut input = vec![json!({"role": "user", "content": format!("look it up\n#mock {script}")})];
    let (status, first) = respond(
        daemon,
        json!({"model": "chat", "input": input, "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let call = first["output"][0].clone();
    assert_eq!(call["type"], "function_call", "{first}");
    // The client keeps the conversation: the call and its output go back as items.
    input.push(
        json!({"type": "function_call", "call_id": call["call_id"], "name": "lookup",
                      "arguments": call["arguments"]}),
    );
    input.push(
        json!({"type": "function_call_output", "call_id": call["call_id"], "output": "found it"}),
    );
    let (status, second) = respond(
        daemon,
        json!({"model": "chat", "input": input, "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        second["output_text"], "Tool lookup returned: found it",
        "{second}"
    );
    let messages = fixture.client.messages(daemon, &chat_of(&second)).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["parts"][0]["tool_name"], "lookup");
}

#[tokio::test]
async fn input_keel_cannot_represent_is_refused_by_item_and_stores_nothing() {
    let (_dir, daemon) = demo_daemon();
    let refused = [
        (
            json!([{"role": "user", "content": "q"}, {"type": "item_reference", "id": "msg_1"}]),
            "input[1] (item_reference)",
        ),
        (
            json!([{"role": "user", "content": "q"},
                {"type": "function_call_output", "call_id": "c1", "output": "x"}]),
            "input[1] (function_call_output): no function_call item with call_id `c1`",
        ),
        (
            json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]),
            "input[1] (assistant)",
        ),
    ];
    for (input, expected) in refused {
        let (status, body) = respond(&daemon, json!({"model": "demo", "input": input})).await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(expected), "{message}");
    }
    let (_, chats) = Client::new().get(&daemon.api("/chats")).await;
    assert_eq!(chats["chats"], json!([]));
}

#[tokio::test]
async fn an_older_previous_response_id_forks_and_its_newer_turns_stay_retrievable() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let turn = async |text: &str, previous: Option<&Value>| {
        // The demo model echoes the last user message.
        let mut body = json!({"model": "demo", "input": text});
        if let Some(previous) = previous {
            body["previous_response_id"] = previous["id"].clone();
        }
        let (status, response) = respond(&daemon, body).await;
        assert_eq!(status, 200, "{response}");
        response
    };
    let one = turn("one", None).await;
    let two = turn("two", Some(&one)).await;
    let three = turn("three", Some(&two)).await;
    let chat = chat_of(&one);
    // From `one` again: a branch beside `two`, not a turn after `three`.
    let fork = turn("fork", Some(&one)).await;
    assert_eq!(fork["output_text"], "fork");
    assert_eq!(fork["previous_response_id"], one["id"]);
    assert_eq!(chat_of(&fork), chat);
    let messages = client.messages(&daemon, &chat).await;
    assert_eq!(
        turns(&messages),
        [
            "user: one",
            "assistant: one",
            "user: fork",
            "assistant: fork"
        ]
    );
    assert_eq!(messages[2]["siblings"].as_array().unwrap().len(), 2);
    // The responses of the other branch keep their ids and their replies.
    let (status, again) = client
        .get(&format!(
            "{}/v1/responses/{}",
            daemon.url,
            three["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["output_text"], "three");
    // Continuing the newest response of that branch makes it current again.
    let four = turn("four", Some(&three)).await;
    assert_eq!(four["output_text"], "four");
    let messages = client.messages(&daemon, &chat).await;
    assert_eq!(
        turns(&messages)
            .iter()
            .filter(|t| t.starts_with("user"))
            .collect::<Vec<_>>(),
        ["user: one", "user: two", "user: three", "user: four"]
    );
}

#[tokio::test]
async fn instructions_of_a_later_request_apply_to_it() {
    let fixture = Fixture::start("", "").await;
    let daemon = &fixture.daemon;
    let (_, first) = respond(
        daemon,
        json!({"model": "chat", "instructions": "Be brief.", "input": "hello"}),
    )
    .await;
    assert_eq!(prompt(&fixture)[0], "system: Be brief.");
    let (status, second) = respond(
        daemon,
        json!({"model": "chat", "instructions": "Be verbose.", "input": "again",
               "previous_response_id": first["id"]}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(prompt(&fixture)[0], "system: Be verbose.");
    let (_, third) = respond(
        daemon,
        json!({"model": "chat", "input": "once more", "previous_response_id": second["id"]}),
    )
    .await;
    assert_eq!(third["output_text"], "once more");
    // Without instructions, the last ones given stay (Keel keeps one system prompt a chat).
    assert_eq!(prompt(&fixture)[0], "system: Be verbose.");
}

/// The UI message stream's chunks, `[DONE]` left out.
async fn chunks(response: reqwest::Response) -> Vec<Value> {
    let mut chunks = sse_data(response, |_| false).await;
    assert_eq!(chunks.pop(), Some(json!("[DONE]")));
    chunks
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn assistant(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "assistant", "parts": [{"type": "step-start"}, {"type": "text", "text": text, "state": "done"}]})
}

/// Posts a transport body and reads its stream to the end.
async fn ui_turn(daemon: &Daemon, body: Value) -> Vec<Value> {
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(response.status(), 200);
    chunks(response).await
}

/// The one Keel chat of the daemon, once idle: its id and current branch.
async fn settled(daemon: &Daemon) -> (String, Vec<Value>) {
    let client = Client::new();
    let (_, chats) = client.get(&daemon.api("/chats")).await;
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    client.wait_status(daemon, &id, "waiting").await;
    let messages = client.messages(daemon, &id).await;
    (id, messages)
}

#[tokio::test]
async fn an_ai_sdk_history_larger_than_the_api_body_limit_is_taken_up_to_its_own() {
    let (_dir, daemon) =
        demo_daemon_with("max_body_bytes = 65536\nai_sdk_max_body_bytes = 1048576\n");
    // A page whose history holds a big tool output posts all of it again.
    let big = "x".repeat(200_000);
    let body = json!({"id": "big", "trigger": "submit-message", "messages": [
        user("u1", "show me"), assistant("a1", &big), user("u2", &scripted("fine", 0.0))
    ]});
    assert_eq!(ui_text(&ui_turn(&daemon, body).await), "fine");
    // The rest of the API keeps its own limit, and this door its configured one.
    let (status, _) = Client::new()
        .post(&daemon.api("/chats"), json!({"text": big}))
        .await;
    assert_eq!(status, 413);
    let huge = "x".repeat(1_100_000);
    let body = json!({"id": "huge", "trigger": "submit-message", "messages": [
        user("u1", "show me"), assistant("a1", &huge), user("u2", "again")
    ]});
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(response.status(), 413);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "payload_too_large", "{error}");
}

#[tokio::test]
async fn an_ai_sdk_edit_by_message_id_branches_from_that_message() {
    let (_dir, daemon) = demo_daemon();
    let (first, second) = ("first", "second");
    let body = json!({"id": "edit", "trigger": "submit-message", "messages": [user("c1", first)]});
    let reply = ui_turn(&daemon, body).await;
    let a1 = reply[0]["messageId"].as_str().unwrap().to_owned();
    settled(&daemon).await;
    let body = json!({"id": "edit", "trigger": "submit-message", "messages": [
        user("c1", first), assistant(&a1, "first"), user("c2", second)
    ]});
    ui_turn(&daemon, body).await;
    let (id, before) = settled(&daemon).await;
    assert_eq!(before.len(), 4);
    // `sendMessage({ text, messageId: "c1" })`: the history up to c1, c1 replaced.
    let body = json!({"id": "edit", "trigger": "submit-message", "messageId": "c1",
                      "messages": [user("c1", "first, edited")]});
    let reply = ui_turn(&daemon, body).await;
    assert_eq!(ui_text(&reply), "first, edited");
    let (_, after) = settled(&daemon).await;
    assert_eq!(
        turns(&after),
        ["user: first, edited", "assistant: first, edited"],
        "{id}"
    );
    // The first version is a sibling, kept with its branch.
    assert_eq!(after[0]["siblings"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_ai_sdk_regenerate_of_an_older_reply_answers_that_message_again() {
    let (_dir, daemon) = demo_daemon();
    let first = "first";
    let body = json!({"id": "regen", "trigger": "submit-message", "messages": [user("c1", first)]});
    ui_turn(&daemon, body).await;
    settled(&daemon).await;
    let body = json!({"id": "regen", "trigger": "submit-message", "messages": [
        user("c1", first), assistant("a1", "first"), user("c2", "second")
    ]});
    ui_turn(&daemon, body).await;
    settled(&daemon).await;
    // `regenerate({ messageId: "a1" })`: the body ends with the message a1 answered.
    let body = json!({"id": "regen", "trigger": "regenerate-message", "messageId": "a1",
                      "messages": [user("c1", first)]});
    let reply = ui_turn(&daemon, body).await;
    assert_eq!(ui_text(&reply), "first");
    let (_, after) = settled(&daemon).await;
    assert_eq!(turns(&after), ["user: first", "assistant: first"]);
    assert_eq!(after[1]["siblings"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_ai_sdk_message_sent_while_a_reply_streams_is_queued_with_202() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let body = json!({"id": "busy", "trigger": "submit-message",
                      "messages": [user("c1", &scripted(&words(400), 40.0))]});
    let streaming = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(streaming.status(), 200);
    let (_, chats) = client.get(&daemon.api("/chats")).await;
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    let body = json!({"id": "busy", "trigger": "submit-message",
                      "messages": [user("c1", "slow"), user("c2", "next")]});
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(response.status(), 202);
    let queue_id = response.headers()["x-keel-queue-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let queued = chunks(response).await;
    assert_eq!(
        queued,
        [json!({"type": "data-queued", "data": {"queueId": queue_id}, "transient": true})]
    );
    let chat = client.chat(&daemon, &id).await;
    assert_eq!(chat["queued"][0]["id"], queue_id, "{chat}");
    client.interrupt(&daemon, &id).await;
    // The queued message runs once the reply before it ends.
    let messages = client.wait_messages(&daemon, &id, |m| m.len() >= 4).await;
    assert_eq!(text_of(&messages[2]), "next");
    drop(streaming);
}
