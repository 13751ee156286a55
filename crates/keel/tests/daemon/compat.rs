//! The AI SDK UI and OpenAI Responses endpoints through the running daemon: streaming,
//! resuming after a kill -9, stopping, client-side tools and typed errors. (The real client
//! libraries drive the same endpoints in `tests/compat/`.)
//!
//! Longer than most files: each door's scenario is a whole exchange with the daemon, read
//! top to bottom.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::harness::*;

/// The data of each SSE event of a response, until it ends or `stop` says enough.
pub(crate) async fn sse_data(
    response: reqwest::Response,
    mut stop: impl FnMut(&[Value]) -> bool,
) -> Vec<Value> {
    let mut stream = Box::pin(response.bytes_stream().eventsource());
    let mut out = Vec::new();
    loop {
        let next = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("no event arrived in time");
        let Some(Ok(event)) = next else {
            return out;
        };
        if event.data == "[DONE]" {
            out.push(json!("[DONE]"));
            return out;
        }
        out.push(serde_json::from_str(&event.data).unwrap());
        if stop(&out) {
            return out;
        }
    }
}

pub(crate) fn ui_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect()
}

fn responses_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

/// The rest of response `id`'s stream after the last of the events `seen`, numbered on from
/// them.
async fn resume_response(daemon: &Daemon, id: &str, seen: &[Value]) -> Vec<Value> {
    let last = seen.last().unwrap()["sequence_number"].as_u64().unwrap();
    let response = http_client()
        .get(format!(
            "{}/v1/responses/{id}?stream=true&starting_after={last}",
            daemon.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let rest = sse_data(response, |_| false).await;
    let numbers: Vec<u64> = seen
        .iter()
        .chain(&rest)
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    rest
}

fn ui_body(id: &str, text: &str) -> Value {
    json!({"id": id, "trigger": "submit-message", "messageId": null,
           "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]})
}

#[tokio::test]
async fn an_ai_sdk_reply_streams_and_resumes_from_its_start_after_kill_9() {
    let (dir, database) = scratch();
    let mut daemon = Daemon::start(dir.path(), &database, "");
    let http = http_client();
    let reply = words(80);
    let response = post_stream(
        &daemon.api("/ai-sdk/chat"),
        &ui_body("client-chat-1", &scripted(&reply, 40.0)),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let first = sse_data(response, |chunks| ui_text(chunks).len() > 20).await;
    assert_eq!(first[0]["type"], "start");
    assert_eq!(first[1]["type"], "start-step");
    assert!(reply.starts_with(&ui_text(&first)));
    let message_id = first[0]["messageId"].clone();

    daemon.kill();
    let daemon = Daemon::start(dir.path(), &database, "");
    let response = http
        .get(daemon.api("/ai-sdk/chat/client-chat-1/stream"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    if status == 200 {
        let resumed = sse_data(response, |_| false).await;
        assert_eq!(
            resumed[0]["messageId"], message_id,
            "the same message, replayed"
        );
        assert_eq!(ui_text(&resumed), reply, "the whole reply, once");
        let types: Vec<&str> = resumed.iter().filter_map(|c| c["type"].as_str()).collect();
        assert_eq!(types[types.len() - 2..], ["finish-step", "finish"]);
        assert_eq!(resumed.last().unwrap(), "[DONE]");
    } else {
        // The recovered run finished before the page came back: nothing to resume.
        assert_eq!(status, 204);
    }
    let history_url = daemon.api("/ai-sdk/chat/client-chat-1/messages");
    let history = eventually(async || {
        let history = get_json(&history_url).await;
        if history.as_array().unwrap().len() < 2
            || history[1]["parts"].as_array().unwrap().len() < 2
            || history[1]["parts"][1]["text"] != json!(reply)
        {
            Err(history.to_string())
        } else {
            Ok(history)
        }
    })
    .await;
    assert_eq!(history[1]["id"], message_id);
    assert_eq!(history.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_ai_sdk_stop_aborts_the_stream_and_a_client_tool_result_continues_it() {
    let (dir, database) = scratch();
    let daemon = Daemon::start(dir.path(), &database, "");
    let http = http_client();
    let response = post_stream(
        &daemon.api("/ai-sdk/chat"),
        &ui_body("stop-me", &scripted(&words(200), 40.0)),
    )
    .await;
    let mut stopped = false;
    let chunks = sse_data(response, |chunks| {
        if !stopped && ui_text(chunks).len() > 10 {
            stopped = true;
            let (http, url) = (http.clone(), daemon.api("/ai-sdk/chat/stop-me/stop"));
            tokio::spawn(async move { http.post(url).send().await.unwrap() });
        }
        false
    })
    .await;
    let types: Vec<&str> = chunks.iter().filter_map(|c| c["type"].as_str()).collect();
    assert!(types.contains(&"abort"), "{types:?}");
    assert!(!types.contains(&"finish"));

    // A client-side tool: the call ends the stream, the answer continues the same message.
    let script =
        json!({"steps": [{"tool_calls": [{"name": "pick", "args": {}}]}, {"text": "Picked."}]});
    let mut body = ui_body("tools", &format!("pick one\n#mock {script}"));
    body["tools"] = json!([{"name": "pick", "parameters": {"type": "object"}}]);
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    let chunks = sse_data(response, |_| false).await;
    let call = chunks
        .iter()
        .find(|c| c["type"] == "tool-input-available")
        .unwrap();
    let call_id = call["toolCallId"].as_str().unwrap();
    assert_eq!(chunks[chunks.len() - 2]["finishReason"], "tool-calls");
    let assistant = json!({"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-pick", "toolCallId": call_id, "state": "output-available", "input": {}, "output": "B"}
    ]});
    body["messages"].as_array_mut().unwrap().push(assistant);
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(response.status(), 200);
    let chunks = sse_data(response, |_| false).await;
    assert_eq!(chunks[0], json!({"type": "start", "messageId": "a1"}));
    assert_eq!(ui_text(&chunks), "Picked.");

    // Answering again is a conflict: nothing is pending any more.
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(response.status(), 409);
}

#[tokio::test]
async fn a_responses_stream_resumes_after_kill_9_with_nothing_missing_or_twice() {
    let (dir, database) = scratch();
    let mut daemon = Daemon::start(dir.path(), &database, "");
    let reply = words(80);
    let response = post_stream(&format!("{}/v1/responses", daemon.url), &json!({"model": "demo", "input": scripted(&reply, 40.0), "stream": true, "background": true})).await;
    assert_eq!(response.status(), 200);
    let seen = sse_data(response, |events| responses_text(events).len() > 20).await;
    let id = seen[0]["response"]["id"].as_str().unwrap().to_owned();

    daemon.kill();
    let daemon = Daemon::start(dir.path(), &database, "");
    let rest = resume_response(&daemon, &id, &seen).await;
    assert_eq!(responses_text(&seen) + &responses_text(&rest), reply);
    assert_eq!(rest.last().unwrap()["type"], "response.completed");

    let (status, body) = Client::new()
        .get(&format!("{}/v1/responses/resp_nope", daemon.url))
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "not_found_error");
    let (status, body) = Client::new()
        .post(
            &format!("{}/v1/responses", daemon.url),
            json!({"model": "no-such-model", "input": "hi"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn an_ai_sdk_regenerate_streams_a_new_reply_beside_the_old_one() {
    let (_dir, daemon) = demo_daemon();
    let response = post_stream(
        &daemon.api("/ai-sdk/chat"),
        &ui_body("client-chat-r", &scripted("say it twice", 0.0)),
    )
    .await;
    let first = sse_data(response, |_| false).await;
    assert_eq!(ui_text(&first), "say it twice");
    let client = Client::new();
    let chats = client.get(&daemon.api("/chats")).await.1;
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    client.wait_status(&daemon, &id, "waiting").await;

    let body = json!({"id": "client-chat-r", "trigger": "regenerate-message", "messageId": null,
                      "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "x"}]}]});
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(response.status(), 200);
    let again = sse_data(response, |_| false).await;
    assert_eq!(ui_text(&again), "say it twice", "{again:?}");
    assert_eq!(again[0]["messageId"], first[0]["messageId"]);
    client.wait_status(&daemon, &id, "waiting").await;
    // The first reply is kept, as a sibling of the new one.
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1]["siblings"], json!([2, 3]));
}

/// A reply that says "Looking it up: ", starts a call of `lookup` and is cut inside its
/// arguments once; the recovery cancels the partial call and carries on.
fn cut_inside_a_call(id: &str) -> String {
    let script = json!({"id": id, "steps": [
        {"text": "Looking it up: ", "rate": 0,
         "tool_calls": [{"name": "lookup", "args": {"query": "the weather in Oslo tomorrow"}}],
         "cut": {"after": 5, "times": 1}},
        {"text": "done.", "rate": 0}
    ]});
    format!("go\n#mock {script}")
}

const LOOKUP: &str = "lookup";

#[tokio::test]
async fn a_function_call_cut_mid_arguments_still_ends_the_responses_stream() {
    let (_dir, daemon) = demo_daemon_with("retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n");
    let tools = json!([{"type": "function", "name": LOOKUP, "description": "Looks things up",
                        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]);
    let response = post_stream(
        &format!("{}/v1/responses", daemon.url),
        &json!({"model": "demo", "input": cut_inside_a_call("responses-cut-call"),
                "tools": tools, "stream": true}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let events = sse_data(response, |_| false).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed", "{events:?}");
    let id = last["response"]["id"].as_str().unwrap();
    let stored = get_json(&format!("{}/v1/responses/{id}", daemon.url)).await;
    assert!(
        stored["output_text"]
            .as_str()
            .unwrap()
            .starts_with("Looking it up: ")
    );
    assert_eq!(responses_text(&events), stored["output_text"]);
    assert_eq!(last["response"]["output"], stored["output"]);
    // Only the call that was stored was announced, with its own call id.
    let announced: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.added")
        .map(|e| &e["item"])
        .collect();
    let stored_items: Vec<&Value> = stored["output"].as_array().unwrap().iter().collect();
    assert_eq!(announced.len(), stored_items.len(), "{events:?}");
    for (announced, stored) in announced.iter().zip(&stored_items) {
        assert_eq!(announced["id"], stored["id"]);
        assert_eq!(announced["call_id"], stored["call_id"]);
    }
}

#[tokio::test]
async fn a_ui_stream_cut_inside_a_tool_call_ends_with_the_stored_reply() {
    let (_dir, daemon) = demo_daemon_with("retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n");
    let mut body = ui_body("cut-call-chat", &cut_inside_a_call("ui-cut-call"));
    body["tools"] = json!([{"name": LOOKUP, "description": "Looks things up",
                            "parameters": {"type": "object"}}]);
    let response = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let chunks = sse_data(response, |_| false).await;
    let types: Vec<&str> = chunks.iter().filter_map(|c| c["type"].as_str()).collect();
    assert_eq!(types[types.len() - 1], "finish", "{chunks:?}");
    assert_eq!(chunks.last().unwrap(), "[DONE]");
    let history = get_json(&daemon.api("/ai-sdk/chat/cut-call-chat/messages")).await;
    let stored = history[1]["parts"].as_array().unwrap();
    let stored_text: String = stored.iter().filter_map(|p| p["text"].as_str()).collect();
    assert!(stored_text.starts_with("Looking it up: "), "{history}");
    assert_eq!(ui_text(&chunks), stored_text);
    // Every call the page saw is a stored one: the cut call was never shown.
    let shown: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "tool-input-start")
        .map(|c| &c["toolCallId"])
        .collect();
    let kept: Vec<&Value> = stored
        .iter()
        .filter(|p| p.get("toolCallId").is_some())
        .map(|p| &p["toolCallId"])
        .collect();
    assert_eq!(shown, kept, "{chunks:?}");
}

#[tokio::test]
async fn a_responses_replay_numbers_its_events_as_the_live_stream_did() {
    let (_dir, daemon) = demo_daemon();
    let reply = words(60);
    let response = post_stream(
        &format!("{}/v1/responses", daemon.url),
        &json!({"model": "demo", "input": scripted(&reply, 40.0), "stream": true, "background": true}),
    )
    .await;
    let seen = sse_data(response, |events| responses_text(events).len() > 30).await;
    let id = seen[0]["response"]["id"].as_str().unwrap().to_owned();
    let last = seen.last().unwrap()["sequence_number"].as_u64().unwrap();
    let http = http_client();
    let url = format!("{}/v1/responses/{id}?stream=true", daemon.url);
    // The SDK helpers' form: the whole stream, dropping what was seen on the client.
    let replay = sse_data(http.get(&url).send().await.unwrap(), |_| false).await;
    let rest: Vec<Value> = replay
        .iter()
        .filter(|e| e["sequence_number"].as_u64().unwrap() > last)
        .cloned()
        .collect();
    assert_eq!(responses_text(&seen) + &responses_text(&rest), reply);
    assert_eq!(
        replay[..seen.len()],
        seen[..],
        "the same events, numbered alike"
    );
    // The server's form.
    let served = sse_data(
        http.get(format!("{url}&starting_after={last}"))
            .send()
            .await
            .unwrap(),
        |_| false,
    )
    .await;
    assert_eq!(served, rest);
    assert_eq!(served.last().unwrap()["type"], "response.completed");
}

#[tokio::test]
async fn compat_streams_beyond_the_sse_cap_get_429_and_store_nothing() {
    let (dir, database) = scratch();
    let daemon = Daemon::start(dir.path(), &database, "[server]\nsse_max_total = 1\n");
    let held = post_stream(
        &daemon.api("/ai-sdk/chat"),
        &ui_body("held-chat", &scripted(&words(200), 20.0)),
    )
    .await;
    assert_eq!(held.status(), 200);
    let refused = post_stream(
        &daemon.api("/ai-sdk/chat"),
        &ui_body("refused-chat", &scripted("hi", 0.0)),
    )
    .await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        get_json(&daemon.api("/ai-sdk/chat/refused-chat/messages")).await,
        json!([]),
        "nothing was stored"
    );
    let refused = post_stream(
        &format!("{}/v1/responses", daemon.url),
        &json!({"model": "demo", "input": "hi", "stream": true}),
    )
    .await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let (status, chats) = Client::new().get(&daemon.api("/chats")).await;
    assert_eq!(status, 200);
    assert_eq!(chats["chats"].as_array().unwrap().len(), 1, "{chats}");
    let refused = http_client()
        .get(daemon.api("/ai-sdk/chat/held-chat/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);

    // The slot is freed with the stream.
    drop(held);
    wait_until("the held slot to be freed", async || {
        post_stream(
            &format!("{}/v1/responses", daemon.url),
            &json!({"model": "demo", "input": "again", "stream": true}),
        )
        .await
        .status()
            == 200
    })
    .await;
}

#[tokio::test]
async fn a_blocking_response_waits_without_holding_a_place_among_requests_in_flight() {
    let (dir, database) = scratch();
    let daemon = Daemon::start(
        dir.path(),
        &database,
        "[server]\nmax_requests_in_flight = 1\n",
    );
    let reply = words(100);
    let url = format!("{}/v1/responses", daemon.url);
    let body = json!({"model": "demo", "input": scripted(&reply, 40.0)});
    let waiting = tokio::spawn(async move {
        // The one place may be the poll's below when the request arrives: refused at once
        // with 503 and nothing stored, it is sent again, as a client does.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let response = loop {
            let response = post_stream(&url, &body).await;
            if response.status() != 503 || tokio::time::Instant::now() > deadline {
                break response;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        (response.status(), response.json::<Value>().await.unwrap())
    });
    // While it waits for its reply, the one place in flight serves other requests.
    let client = Client::new();
    wait_until("a request served while the reply runs", async || {
        let (status, chats) = client.get(&daemon.api("/chats")).await;
        status == 200 && chats["chats"][0]["status"] == "running"
    })
    .await;
    let (status, object) = waiting.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(object["status"], "completed");
    assert_eq!(object["output_text"], reply);
}

#[tokio::test]
async fn a_resumed_ui_stream_replays_an_answered_client_call_as_already_run() {
    let (_dir, daemon) = demo_daemon();
    let reply = words(120);
    let script = json!({"steps": [{"tool_calls": [{"name": "pick", "args": {}}]},
                                  {"text": reply, "rate": 40.0}]});
    let mut body = ui_body("answered", &format!("pick one\n#mock {script}"));
    body["tools"] = json!([{"name": "pick", "parameters": {"type": "object"}}]);
    let chunks = sse_data(
        post_stream(&daemon.api("/ai-sdk/chat"), &body).await,
        |_| false,
    )
    .await;
    let call = chunks
        .iter()
        .find(|c| c["type"] == "tool-input-available")
        .unwrap();
    assert_eq!(call.get("providerExecuted"), None, "live, the page runs it");
    let call_id = call["toolCallId"].as_str().unwrap().to_owned();
    let assistant = json!({"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-pick", "toolCallId": call_id, "state": "output-available", "input": {}, "output": "B"}
    ]});
    body["messages"].as_array_mut().unwrap().push(assistant);
    let continued = post_stream(&daemon.api("/ai-sdk/chat"), &body).await;
    let _ = sse_data(continued, |chunks| !ui_text(chunks).is_empty()).await;

    // The page reloads mid-reply and resumes: the answered call is replayed as already run.
    let resumed = http_client()
        .get(daemon.api("/ai-sdk/chat/answered/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let chunks = sse_data(resumed, |_| false).await;
    let replayed: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["toolCallId"] == json!(call_id))
        .collect();
    let available = replayed
        .iter()
        .find(|c| c["type"] == "tool-input-available")
        .unwrap();
    assert_eq!(available["providerExecuted"], true, "{chunks:?}");
    let output = replayed
        .iter()
        .find(|c| c["type"] == "tool-output-available")
        .unwrap();
    assert_eq!(output["output"], "B");
    assert_eq!(ui_text(&chunks), reply, "the reply once");
    assert_eq!(chunks.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn a_response_superseded_by_an_edit_ends_cancelled_as_it_is_stored() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let body = json!({"model": "demo", "input": scripted(&words(200), 40.0), "stream": true});
    let response = post_stream(&format!("{}/v1/responses", daemon.url), &body).await;
    assert_eq!(response.status(), 200);
    let reading = tokio::spawn(sse_data(response, |_| false));
    let (_, chats) = client.get(&daemon.api("/chats")).await;
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    let mut events = client.events(&daemon, &id, None).await;
    Transcript::default().follow_parts(&mut events, 5).await;
    let user = client.messages(&daemon, &id).await[0]["id"]
        .as_i64()
        .unwrap();
    let (status, _) = client
        .edit(&daemon, &id, user, json!({"text": scripted("edited", 0.0)}))
        .await;
    assert_eq!(status, 202);

    // The run the edit superseded stores nothing more: the stream's last word is the
    // stored response, cancelled, and so is a later retrieval.
    let seen = reading.await.unwrap();
    let last = seen.last().unwrap();
    assert_eq!(last["type"], "response.incomplete", "{last}");
    assert_eq!(last["response"]["status"], "cancelled");
    assert_eq!(last["response"]["output"], json!([]));
    assert!(
        !responses_text(&seen).is_empty(),
        "it streamed some text first"
    );
    client.wait_status(&daemon, &id, "waiting").await;
    let response_id = seen[0]["response"]["id"].as_str().unwrap();
    let stored = get_json(&format!("{}/v1/responses/{response_id}", daemon.url)).await;
    assert_eq!(stored["status"], "cancelled", "{stored}");
    assert_eq!(stored["output"], last["response"]["output"]);
}

/// The environment of an owner whose log writes wait for ever: every part it streams is
/// live only, so a kill -9 leaves no store holding any of them.
const NEVER_LOGGED: (&str, &str) = ("KEEL_DEBUG_LOG_PAUSE_MS", "600000");

#[tokio::test]
async fn an_ai_sdk_client_back_after_a_takeover_gets_the_new_owners_reply_once() {
    let (dir, database) = scratch();
    let mut daemon = Daemon::start_with_env(dir.path(), &database, "", &[NEVER_LOGGED]);
    let reply = words(40);
    let response = post_stream(
        &daemon.api("/ai-sdk/chat"),
        &ui_body("taken-over", &scripted(&reply, 40.0)),
    )
    .await;
    let seen = sse_data(response, |chunks| ui_text(chunks).len() > 20).await;
    let message_id = seen[0]["messageId"].clone();
    daemon.kill();

    // The new owner starts the step over and finishes it while the page is away; the page
    // then asks for the stream again, as `useChat`'s resume does after a reload.
    let daemon = Daemon::start(dir.path(), &database, "");
    let client = Client::new();
    let chats = client.get(&daemon.api("/chats")).await.1;
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    client.wait_status(&daemon, &id, "waiting").await;
    let response = http_client()
        .get(daemon.api("/ai-sdk/chat/taken-over/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        204,
        "a finished reply has no stream to resume"
    );
    let history = get_json(&daemon.api("/ai-sdk/chat/taken-over/messages")).await;
    let texts: Vec<&str> = history[1]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(
        history[1]["id"], message_id,
        "the message the page was showing"
    );
    assert_eq!(
        texts,
        [reply.as_str()],
        "the reply once, as the new owner wrote it"
    );
}

#[tokio::test]
async fn a_responses_client_back_after_a_takeover_never_sees_the_reply_twice() {
    let (dir, database) = scratch();
    let mut daemon = Daemon::start_with_env(dir.path(), &database, "", &[NEVER_LOGGED]);
    let reply = words(40);
    let body = json!({"model": "demo", "input": scripted(&reply, 40.0), "stream": true,
                      "background": true});
    let response = post_stream(&format!("{}/v1/responses", daemon.url), &body).await;
    let seen = sse_data(response, |events| responses_text(events).len() > 20).await;
    let id = seen[0]["response"]["id"].as_str().unwrap().to_owned();
    daemon.kill();

    // Back while the new owner streams the step again from its start: what the client
    // adds to what it holds must spell the reply once.
    let daemon = Daemon::start(dir.path(), &database, "");
    let rest = resume_response(&daemon, &id, &seen).await;
    assert_eq!(rest.last().unwrap()["type"], "response.completed");
    let completed = &rest.last().unwrap()["response"]["output"];
    let stored: String = completed
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(stored, reply);
    assert_eq!(
        responses_text(&seen) + &responses_text(&rest),
        reply,
        "the client's deltas spell the reply once"
    );
}
