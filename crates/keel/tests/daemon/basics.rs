//! The daemon's first promises, one exchange each: a reply streams and is stored; a client
//! that reconnects misses and repeats nothing; interrupts, queues, edits, client-side tools,
//! retries, kill -9 and SIGTERM; users apart; bad input refused; the operations endpoints.
//!
//! Longer than most files: each promise is one whole exchange with the daemon.

use std::time::Duration;

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn create_follow_and_complete() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let reply = words(20);
    let (id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&reply, 200.0)}))
        .await;
    transcript.follow_until(&mut events, "waiting").await;

    assert_eq!(transcript.assistant_texts(), vec![reply.clone()]);
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(text_of(&messages[1]), reply);
    assert_eq!(messages[1]["interrupted"], false);
    assert!(messages[1]["usage"]["output_tokens"].as_u64().unwrap() > 0);

    // A client connecting after the fact replays the committed messages once.
    let mut late = client.events(&daemon, &id, None).await;
    let mut replay = Transcript::default();
    replay.follow_until(&mut late, "waiting").await;
    assert_eq!(replay.messages.len(), 2);
}

#[tokio::test]
async fn a_busy_stream_is_written_once_an_interval_and_still_spells_the_reply() {
    use futures::StreamExt;
    let (_dir, daemon) = demo_daemon_with("[server]\nsse_write_interval_ms = 200\n");
    let client = Client::new();
    let reply = words(300);
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&reply, 300.0)}))
        .await;
    let response = http_client()
        .get(daemon.api(&format!("/chats/{id}/events")))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let (mut reads, mut text) = (0, String::new());
    while !text.contains("\"status\":\"waiting\"") {
        let chunk = tokio::time::timeout(WAIT, body.next())
            .await
            .expect("the stream went quiet before the reply ended")
            .unwrap()
            .unwrap();
        reads += 1;
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    // A second of deltas, 300 a second: one write every 200 ms, not one a delta.
    let parts = text.matches("event: part\n").count();
    assert!(parts >= 100, "{parts} parts streamed live:\n{text}");
    assert!(reads * 4 < parts, "{reads} writes carried {parts} parts");
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(text_of(&messages[1]), reply);
}

#[tokio::test]
async fn history_pages_with_after_and_limit() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.replied_chat(&daemon, "one").await;
    client
        .send_message(&daemon, &id, json!({"text": scripted("two", 0.0)}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let all = client.messages(&daemon, &id).await;
    assert_eq!(all.len(), 4);

    let url = daemon.api(&format!("/chats/{id}/messages"));
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let (status, page) = client.get(&format!("{url}?after={after}&limit=3")).await;
        assert_eq!(status, 200, "{page}");
        let page = page["messages"].as_array().unwrap().clone();
        assert!(page.len() <= 3, "a page holds at most `limit` messages");
        let last_page = page.len() < 3;
        if let Some(last) = page.last() {
            after = last["id"].as_i64().unwrap();
        }
        paged.extend(page);
        if last_page {
            break;
        }
    }
    assert_eq!(
        paged, all,
        "the pages together are the whole history, in order"
    );
    let (_, first) = client.get(&format!("{url}?limit=3")).await;
    assert_eq!(first["messages"].as_array().unwrap().len(), 3);

    for bad in ["0", "1001", "-1", "many"] {
        let (status, body) = client.get(&format!("{url}?limit={bad}")).await;
        assert_eq!(status, 400, "limit={bad}: {body}");
    }
}

#[tokio::test]
async fn reconnecting_mid_reply_misses_nothing_and_repeats_nothing() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let reply = words(60);
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&reply, 40.0)}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut first = Transcript::default();
    first.follow_parts(&mut events, 8).await;
    drop(events);
    let seen_before = first.live_text.clone();
    let last = first.last_id.clone().unwrap();

    let mut events = client.events(&daemon, &id, Some(&last)).await;
    let mut second = Transcript::default();
    second.follow_until(&mut events, "waiting").await;
    let committed = client.messages(&daemon, &id).await;
    let final_text = text_of(committed.last().unwrap());
    assert_eq!(final_text, reply);
    let assistant_in_second = second.assistant_texts();
    if assistant_in_second.is_empty() {
        panic!("the reconnected client never saw the committed reply");
    }
    // Either the live deltas spelled the reply across both connections, or the step was
    // committed while away and the committed message replaced them: both equal the reply.
    assert_eq!(assistant_in_second, vec![reply.clone()]);
    assert!(reply.starts_with(&seen_before), "{seen_before:?}");
}

#[tokio::test]
async fn interrupt_keeps_the_partial_reply() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let reply = words(200);
    let (id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&reply, 20.0)}))
        .await;
    transcript.follow_parts(&mut events, 3).await;
    let (status, chat) = client.interrupt(&daemon, &id).await;
    assert_eq!(status, 202, "{chat}");
    transcript.follow_until(&mut events, "waiting").await;

    let messages = client.messages(&daemon, &id).await;
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["interrupted"], true);
    let partial = text_of(last);
    assert!(!partial.is_empty());
    assert!(reply.starts_with(&partial), "{partial:?}");
    assert!(partial.len() < reply.len());
    assert_eq!(transcript.assistant_texts(), vec![partial]);
    // Interrupting an idle chat changes nothing.
    let (status, chat) = client.interrupt(&daemon, &id).await;
    assert_eq!((status, chat["status"].as_str()), (202, Some("waiting")));
}

#[tokio::test]
async fn busy_chats_queue_or_interrupt() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let (id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&words(100), 20.0)}))
        .await;
    transcript.follow_parts(&mut events, 2).await;

    let messages_url = daemon.api(&format!("/chats/{id}/messages"));
    let (status, queued) = client
        .post(
            &messages_url,
            json!({"text": scripted("second answer", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{queued}");
    assert!(queued["queue_id"].is_string(), "{queued}");
    let chat = client.chat(&daemon, &id).await;
    assert_eq!(chat["queued"].as_array().unwrap().len(), 1);

    let (status, started) = client
        .post(
            &messages_url,
            json!({"text": scripted("third answer", 0.0), "busy": "interrupt"}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    // The interrupt stops the first reply; the interrupting message runs next, then the
    // queued one.
    let messages = client
        .wait_messages(&daemon, &id, |m| assistant_texts(m).len() == 3)
        .await;
    let replies = assistant_texts(&messages);
    assert!(messages[1]["interrupted"] == true, "{messages:?}");
    assert_eq!(replies[1], "third answer");
    assert_eq!(replies[2], "second answer");
    client.wait_status(&daemon, &id, "waiting").await;
}

#[tokio::test]
async fn promoting_a_queued_message_interrupts_the_run_and_runs_it_next() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let (id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&words(200), 20.0)}))
        .await;
    transcript.follow_parts(&mut events, 2).await;

    let messages_url = daemon.api(&format!("/chats/{id}/messages"));
    let mut queue_ids = Vec::new();
    for answer in ["queued first", "queued second", "queued third"] {
        let (status, queued) = client
            .post(&messages_url, json!({"text": scripted(answer, 0.0)}))
            .await;
        assert_eq!(status, 202, "{queued}");
        queue_ids.push(queued["queue_id"].as_str().unwrap().to_owned());
    }
    let queue = |queue_id: &str| daemon.api(&format!("/chats/{id}/queue/{queue_id}"));

    // Deleting one removes it for good; deleting it again is a 404.
    let (status, _) = client
        .send(reqwest::Method::DELETE, &queue(&queue_ids[0]), None)
        .await;
    assert_eq!(status, 204);
    let (status, body) = client
        .send(reqwest::Method::DELETE, &queue(&queue_ids[0]), None)
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = client
        .post(&format!("{}/promote", queue("no-such-entry")), json!({}))
        .await;
    assert_eq!(status, 404, "{body}");

    // Promoting the last entry interrupts the reply in progress and runs it before the other.
    let (status, body) = client
        .post(&format!("{}/promote", queue(&queue_ids[2])), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    let messages = client
        .wait_messages(&daemon, &id, |m| assistant_texts(m).len() == 3)
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let replies: Vec<(String, bool)> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| (text_of(m), m["interrupted"] == true))
        .collect();
    assert!(
        replies[0].1,
        "the first reply was interrupted: {messages:?}"
    );
    assert_eq!(replies[1], ("queued third".to_owned(), false));
    assert_eq!(replies[2], ("queued second".to_owned(), false));
    assert!(
        messages
            .iter()
            .all(|m| !text_of(m).contains("queued first")),
        "a deleted entry never runs: {messages:?}"
    );
    let chat = client.chat(&daemon, &id).await;
    assert!(chat["queued"].as_array().unwrap().is_empty(), "{chat}");
}

#[tokio::test]
async fn editing_a_user_message_replaces_the_current_branch() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.replied_chat(&daemon, "first reply").await;
    let messages = client.messages(&daemon, &id).await;
    let user_id = messages[0]["id"].as_i64().unwrap();
    let assistant_id = messages[1]["id"].as_i64().unwrap();

    let (status, _) = client
        .edit(&daemon, &id, assistant_id, json!({"text": "x"}))
        .await;
    assert_eq!(status, 400, "only user messages can be edited");
    let (status, body) = client
        .edit(
            &daemon,
            &id,
            user_id,
            json!({"text": scripted("edited reply", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client
        .wait_messages(&daemon, &id, |m| {
            m.len() == 2 && text_of(&m[1]) == "edited reply"
        })
        .await;
    assert!(text_of(&messages[0]).contains("edited reply"));
}

#[tokio::test]
async fn client_side_tools_round_trip() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.weather_chat(&daemon, "It is sunny in Oslo.").await;
    let chat = client.chat(&daemon, &id).await;
    let pending = chat["pending_tool_calls"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["tool_name"], "get_weather");
    let call_id = pending[0]["tool_call_id"].as_str().unwrap().to_owned();
    let results_url = daemon.api(&format!("/chats/{id}/tool-results"));

    let (status, _) = client
        .post(
            &results_url,
            json!({"results": [{"tool_call_id": "wrong", "result": "x"}]}),
        )
        .await;
    assert_eq!(status, 400, "ids must be exactly the pending ones");
    let (status, body) = client
        .post(
            &results_url,
            json!({"results": [{"tool_call_id": call_id, "result": {"sky": "clear"}}]}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(text_of(messages.last().unwrap()), "It is sunny in Oslo.");
    let (status, _) = client.post(&results_url, json!({"results": []})).await;
    assert_eq!(status, 409, "no pending calls any more");
}

#[tokio::test]
async fn provider_errors_are_retried_and_cut_streams_stitched() {
    let (_dir, daemon) = demo_daemon_with("retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n");
    let client = Client::new();
    let reply = words(30);
    let script = json!({
        "id": "cut-once",
        "text": reply,
        "rate": 0,
        "error": {"status": 429, "retry_after_ms": 20, "times": 1},
        "cut": {"after": 12, "times": 2}
    });
    let (id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;
    transcript.follow_until(&mut events, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(
        text_of(messages.last().unwrap()),
        reply,
        "nothing lost, nothing doubled"
    );
    assert_eq!(transcript.assistant_texts(), vec![reply]);
    let metrics = daemon.metrics().await;
    assert!(metrics.contains("keel_stream_retries_total{"), "{metrics}");
}

/// Streams a reply, stops the daemon mid-reply with `stop`, restarts it on the same database
/// and checks the reply was resumed from the live-part log: one reply, the whole scripted
/// text, nothing doubled.
async fn stop_mid_reply_then_restart(stop: impl FnOnce(&mut Daemon)) {
    let (dir, database) = scratch();
    let mut daemon = Daemon::start(dir.path(), &database, "");
    let client = Client::new();
    let reply = words(80);
    let (id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&reply, 40.0)}))
        .await;
    transcript.follow_parts(&mut events, 10).await;
    stop(&mut daemon);
    drop(events);

    let daemon = Daemon::start(dir.path(), &database, "");
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(
        assistant_texts(&messages),
        vec![reply.clone()],
        "{messages:?}"
    );
    assert!(reply.starts_with(&transcript.live_text));
    let metrics = daemon.metrics().await;
    assert!(metrics.contains("keel_recovered_runs_total 1"), "{metrics}");
}

#[tokio::test]
async fn kill_9_mid_reply_resumes_after_restart_without_duplicates() {
    stop_mid_reply_then_restart(Daemon::kill).await;
}

#[tokio::test]
async fn sigterm_mid_reply_releases_the_chat_for_a_restart() {
    stop_mid_reply_then_restart(|daemon| {
        let took = daemon.terminate();
        assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    })
    .await;
}

#[tokio::test]
async fn users_see_only_their_own_chats() {
    let (dir, database) = scratch();
    let add = |name: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(["users", "add", name, "--database", &database])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    let alice = add("alice");
    let bob = add("bob");
    let daemon = Daemon::start(dir.path(), &database, "");

    let anonymous = Client::new();
    let (status, body) = anonymous.get(&daemon.api("/chats")).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, _) = Client::with_token("keel_wrong")
        .get(&daemon.api("/chats"))
        .await;
    assert_eq!(status, 401);

    let alice = Client::with_token(&alice);
    let bob = Client::with_token(&bob);
    let id = alice
        .create_chat(&daemon, json!({"text": scripted("hi alice", 0.0)}))
        .await;
    let (status, _) = bob.get(&daemon.api(&format!("/chats/{id}"))).await;
    assert_eq!(status, 404);
    let (status, _) = bob.interrupt(&daemon, &id).await;
    assert_eq!(status, 404);
    let (_, listed) = bob.get(&daemon.api("/chats")).await;
    assert_eq!(listed["chats"].as_array().unwrap().len(), 0);
    let (_, listed) = alice.get(&daemon.api("/chats")).await;
    assert_eq!(listed["chats"].as_array().unwrap().len(), 1);
    alice.wait_status(&daemon, &id, "waiting").await;

    // Another's chat is answered as one that does not exist (the same words but for the
    // id), and a message sent to it stores nothing.
    let missing = "0b6f3c2e-5d4a-4c1b-9e8f-7a6b5c4d3e2f";
    let (status, foreign) = bob
        .send_message(&daemon, &id, json!({"text": "from bob"}))
        .await;
    assert_eq!(status, 404, "{foreign}");
    let (status, absent) = bob
        .send_message(&daemon, missing, json!({"text": "from bob"}))
        .await;
    assert_eq!(status, 404, "{absent}");
    let (_, foreign_get) = bob.get(&daemon.api(&format!("/chats/{id}"))).await;
    let (_, absent_get) = bob.get(&daemon.api(&format!("/chats/{missing}"))).await;
    for (foreign, absent) in [(&foreign, &absent), (&foreign_get, &absent_get)] {
        assert_eq!(foreign["error"]["code"], absent["error"]["code"]);
        assert_eq!(
            foreign["error"]["message"]
                .as_str()
                .unwrap()
                .replace(&id, "ID"),
            absent["error"]["message"]
                .as_str()
                .unwrap()
                .replace(missing, "ID"),
        );
    }
    let (_, messages) = alice
        .get(&daemon.api(&format!("/chats/{id}/messages")))
        .await;
    assert!(!messages.to_string().contains("from bob"), "{messages}");
    let (_, chat) = alice.get(&daemon.api(&format!("/chats/{id}"))).await;
    assert_eq!(chat["status"], "waiting", "{chat}");
}

#[tokio::test]
async fn bad_input_gets_clear_4xx_errors_and_changes_nothing() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let http = http_client();
    let chats = daemon.api("/chats");

    let malformed = http
        .post(&chats)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status().as_u16(), 400);
    let body: serde_json::Value = malformed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request");

    let plain = http.post(&chats).body("{}").send().await.unwrap();
    assert_eq!(plain.status().as_u16(), 415);

    let huge = "x".repeat(2 * 1024 * 1024);
    let too_big = http
        .post(&chats)
        .header("content-type", "application/json")
        .body(json!({"text": huge}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(too_big.status().as_u16(), 413);

    for body in [
        json!({}),
        json!({"text": ""}),
        json!({"text": "a", "parts": []}),
        json!({"text": "a", "unknown": 1}),
        json!({"parts": [{"type": "video", "src": "x"}]}),
        json!({"parts": [{"type": "tool_result", "tool_call_id": "a", "tool_name": "b", "result": 1}]}),
        json!({"text": "a", "model": "no-such-model"}),
        json!({"text": "a", "max_steps": 0}),
    ] {
        let (status, response) = client.post(&chats, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {response}");
        assert_eq!(response["error"]["code"], "invalid_request");
    }
    let (_, listed) = client.get(&chats).await;
    assert_eq!(
        listed["chats"].as_array().unwrap().len(),
        0,
        "nothing was created"
    );

    let unknown = "00000000-0000-0000-0000-000000000000";
    for path in [
        format!("/chats/{unknown}"),
        "/chats/not-a-uuid".to_owned(),
        format!("/chats/{unknown}/messages"),
        format!("/chats/{unknown}/events"),
    ] {
        let (status, body) = client.get(&daemon.api(&path)).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    let (status, _) = client.get(&format!("{}/api/v1/nope", daemon.url)).await;
    assert_eq!(status, 404);

    let id = client.replied_chat(&daemon, "ok").await;
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/tool-results")),
            json!({"results": []}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    let (status, _) = client
        .send(
            reqwest::Method::DELETE,
            &daemon.api(&format!("/chats/{id}/queue/{unknown}")),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = client.edit(&daemon, &id, 999, json!({"text": "x"})).await;
    assert_eq!(status, 404);
    let before = client.messages(&daemon, &id).await;
    assert_eq!(before.len(), 2);

    let (status, _) = client
        .send(
            reqwest::Method::DELETE,
            &daemon.api(&format!("/chats/{id}")),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = client.get(&daemon.api(&format!("/chats/{id}"))).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn operations_endpoints_answer() {
    let (_dir, daemon) = demo_daemon();
    let http = http_client();
    let get = |path: &str| http.get(format!("{}{path}", daemon.url)).send();
    assert_eq!(get("/healthz").await.unwrap().status().as_u16(), 200);
    assert_eq!(get("/readyz").await.unwrap().status().as_u16(), 200);
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    assert!(metrics.contains("keel_active_runs"));
    // The daemon's allocator counts its own memory: some is live, and no more than it holds.
    let allocated = counter(&daemon, "keel_allocated_bytes").await;
    let resident = counter(&daemon, "keel_allocator_resident_bytes").await;
    assert!(allocated > 0, "allocated bytes exported:\n{metrics}");
    assert!(
        resident >= allocated,
        "{resident} resident for {allocated} allocated"
    );
    let models: serde_json::Value = get("/api/v1/models").await.unwrap().json().await.unwrap();
    assert_eq!(models["models"][0]["id"], "demo");
    assert_eq!(models["models"][0]["default"], true);
    let openapi: serde_json::Value = get("/api/v1/openapi.json")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(openapi["openapi"], "3.1.0");
}

/// A counter of `/metrics` (0 while it has not been counted yet).
async fn counter(daemon: &Daemon, name: &str) -> u64 {
    let metrics = daemon.metrics().await;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}

#[tokio::test]
async fn the_live_part_log_writes_are_timed_on_metrics() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let before = counter(&daemon, "keel_live_log_write_seconds_count").await;
    let reply = words(6);
    let (_id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&reply, 0.0)}))
        .await;
    transcript.follow_until(&mut events, "waiting").await;
    assert_eq!(transcript.assistant_texts(), vec![reply]);
    // The reply's parts reach the log before its step commits: at least one write.
    assert!(counter(&daemon, "keel_live_log_write_seconds_count").await > before);
}

#[tokio::test]
async fn lease_renewals_wake_no_follower() {
    // Renewed every 200 ms while the reply streams for about 8 s.
    let (_dir, daemon) = demo_daemon_with("lease_ms = 600\n");
    let client = Client::new();
    let reply = words(80);
    let (_id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&reply, 10.0)}))
        .await;
    transcript.follow_parts(&mut events, 3).await;
    let catch_ups = counter(&daemon, "keel_sse_catch_ups_total").await;
    let renewals = counter(&daemon, "keel_lease_renewals_total").await;
    while counter(&daemon, "keel_lease_renewals_total").await < renewals + 3 {
        transcript.follow_parts(&mut events, 1).await;
        assert!(
            transcript.messages.len() < 2,
            "the reply ended before the lease was renewed three times"
        );
    }
    assert_eq!(
        counter(&daemon, "keel_sse_catch_ups_total").await,
        catch_ups,
        "a renewal is nothing the follower has to read"
    );
    transcript.follow_until(&mut events, "waiting").await;
    assert_eq!(transcript.assistant_texts(), vec![reply]);
}

#[tokio::test]
async fn a_stream_opened_on_an_idle_chat_follows_every_later_run_live() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.replied_chat(&daemon, "first").await;
    // Opened while nothing streams: the daemon holds no run channel for it yet.
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;
    for round in ["second", "third"] {
        let reply = format!("{round} {}", words(30));
        client
            .send_message(&daemon, &id, json!({"text": scripted(&reply, 100.0)}))
            .await;
        // Every run's parts arrive live, before the message that commits them.
        transcript.follow_parts(&mut events, 5).await;
        assert!(
            reply.starts_with(&transcript.live_text),
            "{}",
            transcript.live_text
        );
        transcript.follow_until(&mut events, "waiting").await;
        assert_eq!(transcript.assistant_texts().last(), Some(&reply));
    }
    assert_eq!(transcript.assistant_texts().len(), 3);
}
