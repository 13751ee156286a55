use super::*;

fn meta() -> Meta {
    Meta {
        id: "resp_x".into(),
        model: "demo".into(),
        created_at: 1,
        previous_response_id: None,
        background: false,
        client_tools: vec!["ask".into()],
    }
}

fn text(t: &str) -> Value {
    json!({"role": "assistant", "part": {"type": "text", "text": t}})
}

fn finished_reply(parts: &[&str]) -> Reply {
    let mut reply = Reply::default();
    for p in parts {
        reply.apply("part", &text(p));
    }
    reply.apply(
        "message",
        &json!({"role": "assistant", "parts": [{"type": "text", "text": parts.concat()}]}),
    );
    reply.apply("status", &json!({"status": "waiting"}));
    reply
}

fn numbers(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn deltas(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

/// Every event of a reply streamed live, one update per event.
fn live(events: &[(&str, Value)], client_tools: Vec<String>) -> Vec<Value> {
    let mut reply = Reply::ending_at_answers_to(client_tools.clone());
    let mut stream = ResponsesStream::new(
        Meta {
            client_tools,
            ..meta()
        },
        None,
    );
    let mut out = stream.update(&reply);
    for (event, data) in events {
        reply.apply(event, data);
        out.extend(stream.update(&reply));
    }
    out
}

#[test]
fn a_text_reply_streams_the_reference_event_sequence() {
    let mut stream = ResponsesStream::new(meta(), None);
    let events = stream.update(&finished_reply(&["Hello"]));
    assert_eq!(
        types(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(numbers(&events), (0..9).collect::<Vec<u64>>());
    assert_eq!(events[8]["response"]["output_text"], "Hello");
    assert_eq!(events[8]["response"]["status"], "completed");
    assert!(stream.finished());
}

#[test]
fn deltas_are_chunks_of_the_content_whatever_the_provider_sent() {
    let mut pending = "Hello wonderful  world, ".to_owned() + &"x".repeat(40);
    let chunks = take_chunks(&mut pending, false);
    assert_eq!(
        chunks,
        [
            "Hello",
            " wonderful",
            "  world,",
            " xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        ]
    );
    assert_eq!(pending, "x".repeat(9), "the chunk still growing is held");
    assert_eq!(take_chunks(&mut pending, true), ["x".repeat(9)]);
    assert!(pending.is_empty());
}

#[test]
fn a_replay_is_the_live_stream_event_for_event() {
    let full = "Hello world, how are you today?";
    let live = live(
        &[
            ("part", text("Hel")),
            ("part", text("lo wor")),
            ("part", text("ld, how are")),
            ("part", text(" you today?")),
            (
                "message",
                json!({"role": "assistant", "parts": [{"type": "text", "text": full}]}),
            ),
            ("status", json!({"status": "waiting"})),
        ],
        meta().client_tools,
    );
    let replay = ResponsesStream::new(meta(), None).update(&finished_reply(&[full]));
    assert_eq!(live, replay);
    assert_eq!(deltas(&live), full);
    // Whatever event a client stopped after, dropping the numbers it saw from a replay
    // (the SDK helpers' client-side `starting_after`) or asking the server for what
    // follows gives each character exactly once.
    for (seen, event) in live.iter().enumerate() {
        let last = event["sequence_number"].as_u64().unwrap();
        let rest: Vec<Value> = replay
            .iter()
            .filter(|e| e["sequence_number"].as_u64().unwrap() > last)
            .cloned()
            .collect();
        assert_eq!(deltas(&live[..=seen]) + &deltas(&rest), full);
        let served = ResponsesStream::new(meta(), Some(last)).update(&finished_reply(&[full]));
        assert_eq!(served, rest);
    }
}

#[test]
fn a_function_call_cut_mid_arguments_still_ends_the_stream() {
    let events = live(
        &[
            ("part", text("Looking it up: ")),
            (
                "part",
                json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c1",
                           "tool_name": "ask", "args_delta": "{\"q\": \"wea"}}),
            ),
            (
                "tool_call_cancel",
                json!({"tool_call_id": "c1", "tool_name": "ask", "reason": "cut"}),
            ),
            ("part", text("done.")),
            (
                "message",
                json!({"role": "assistant", "parts": [{"type": "text", "text": "Looking it up: done."}]}),
            ),
            ("status", json!({"status": "waiting"})),
        ],
        vec!["ask".into()],
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["output_text"], "Looking it up: done.");
    assert_eq!(deltas(&events), "Looking it up: done.");
    assert!(!types(&events).iter().any(|t| t.contains("function_call")));
}

#[test]
fn a_cancelled_call_leaves_later_calls_their_items_and_call_ids() {
    let call = |id: &str, delta: &str, complete: bool| {
        json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": id,
                   "tool_name": "ask", "args_delta": delta, "complete": complete}})
    };
    let events = live(
        &[
            ("part", call("c1", "{\"a", false)),
            (
                "tool_call_cancel",
                json!({"tool_call_id": "c1", "tool_name": "ask", "reason": "cut"}),
            ),
            ("part", call("c2", "{}", true)),
            (
                "message",
                json!({"role": "assistant", "parts": [{"type": "tool_call", "tool_call_id": "c2",
                           "tool_name": "ask", "args": "{}"}]}),
            ),
            ("status", json!({"status": "requires_action"})),
        ],
        vec!["ask".into()],
    );
    let added: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.added")
        .collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0]["item"]["call_id"], "c2");
    assert_eq!(added[0]["output_index"], 0);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["output"][0]["call_id"], "c2");
}

#[test]
fn a_restart_with_other_text_ends_the_item_and_a_new_item_carries_the_new_text() {
    let events = live(
        &[
            ("part", text("abc def")),
            ("stream_reset", json!({})),
            ("part", text("xyz")),
            (
                "message",
                json!({"role": "assistant", "parts": [{"type": "text", "text": "xyz"}]}),
            ),
            ("status", json!({"status": "waiting"})),
        ],
        Vec::new(),
    );
    let done: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .collect();
    assert_eq!(done[0]["item"]["status"], "incomplete");
    assert_eq!(done[0]["item"]["content"][0]["text"], "abc def");
    assert_eq!(done[1]["output_index"], 1);
    assert_eq!(done[1]["item"]["content"][0]["text"], "xyz");
    let last = events.last().unwrap();
    assert_eq!(last["response"]["output_text"], "xyz");
}

#[test]
fn resuming_after_the_last_event_sends_nothing_more() {
    let reply = finished_reply(&["Hi"]);
    let all = ResponsesStream::new(meta(), None).update(&reply);
    let last = all.last().unwrap()["sequence_number"].as_u64().unwrap();
    let mut resumed = ResponsesStream::new(meta(), Some(last));
    assert!(resumed.update(&reply).is_empty());
    assert!(resumed.finished());
}

#[test]
fn client_tool_calls_are_function_calls_and_own_tools_mcp_calls() {
    let mut reply = Reply::default();
    reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [
                {"type": "tool_call", "tool_call_id": "t1", "tool_name": "list_dir", "args": "{}"}]}),
        );
    reply.apply(
            "message",
            &json!({"role": "tool", "parts": [
                {"type": "tool_result", "tool_call_id": "t1", "tool_name": "list_dir", "result": "a.txt"}]}),
        );
    reply.apply(
            "message",
            &json!({"role": "assistant", "parts": [
                {"type": "tool_call", "tool_call_id": "c1", "tool_name": "ask", "args": "{\"q\":1}"}]}),
        );
    reply.apply("status", &json!({"status": "requires_action"}));
    let object = response_object(&meta(), &reply);
    assert_eq!(object["status"], "completed");
    assert_eq!(object["output"][0]["type"], "mcp_call");
    assert_eq!(object["output"][0]["output"], "a.txt");
    assert_eq!(object["output"][1]["type"], "function_call");
    assert_eq!(object["output"][1]["call_id"], "c1");
    assert_eq!(object["output"][1]["arguments"], "{\"q\":1}");
    let events = ResponsesStream::new(meta(), None).update(&reply);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "response.function_call_arguments.done")
    );
    assert_eq!(events.last().unwrap()["type"], "response.completed");
}

#[test]
fn a_provider_run_web_search_is_a_web_search_call_item() {
    let events = live(
        &[
            (
                "part",
                json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "s",
                           "tool_name": "web_search", "args_delta": "", "args": "{\"query\":\"q\"}",
                           "complete": true, "provider_executed": true}}),
            ),
            (
                "part",
                json!({"role": "assistant", "part": {"type": "tool_result", "tool_call_id": "s",
                           "tool_name": "web_search", "result": [], "provider_executed": true}}),
            ),
            ("part", text("Found.")),
            ("status", json!({"status": "waiting"})),
        ],
        Vec::new(),
    );
    let kinds = types(&events);
    let added = kinds
        .iter()
        .position(|k| *k == "response.web_search_call.in_progress")
        .unwrap();
    assert_eq!(kinds[added - 1], "response.output_item.added");
    assert_eq!(kinds[added + 1], "response.web_search_call.completed");
    let done = &events[added + 2];
    assert_eq!(
        done["item"],
        json!({"id": "ws_x_0", "type": "web_search_call", "status": "completed",
                   "action": {"type": "search", "query": "q"}})
    );
    let output = &events.last().unwrap()["response"]["output"];
    assert_eq!(output[0]["type"], "web_search_call");
    assert_eq!(output[0]["status"], "completed");
    assert_eq!(output[1]["type"], "message");
}

#[test]
fn cancelled_and_failed_replies_end_as_the_reference_says() {
    let mut reply = Reply::default();
    reply.apply(
            "message",
            &json!({"role": "assistant", "interrupted": true, "parts": [{"type": "text", "text": "pa"}]}),
        );
    reply.apply("status", &json!({"status": "waiting"}));
    let events = ResponsesStream::new(meta(), None).update(&reply);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(last["response"]["status"], "cancelled");

    let mut reply = Reply::default();
    reply.apply(
        "status",
        &json!({"status": "error", "last_error": {"kind": "auth", "message": "bad key"}}),
    );
    let events = ResponsesStream::new(meta(), None).update(&reply);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["error"]["message"], "bad key");
}
