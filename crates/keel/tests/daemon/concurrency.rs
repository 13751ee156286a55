//! Two things at once: queued messages behind client-side calls, edits while a reply
//! streams, clients resuming from positions the chat never reached.
//!
//! Longer than most files: each race is staged in full through the public API.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// Queues `text` behind the chat's activity; returns the queue id.
async fn queue(client: &Client, daemon: &Daemon, id: &str, text: &str) -> String {
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages")),
            json!({"text": text, "busy": "queue"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["queue_id"]
        .as_str()
        .unwrap_or_else(|| panic!("queued: {body}"))
        .to_owned()
}

/// Waits until the chat is `waiting` with `replies` assistant messages; returns the messages.
async fn wait_for_replies(
    client: &Client,
    daemon: &Daemon,
    id: &str,
    replies: usize,
) -> Vec<Value> {
    eventually(async || {
        let chat = client.chat(daemon, id).await;
        let messages = client.messages(daemon, id).await;
        let count = messages.iter().filter(|m| m["role"] == "assistant").count();
        if chat["status"] == "waiting" && count >= replies {
            assert!(chat["queued"].as_array().unwrap().is_empty(), "{chat}");
            Ok(messages)
        } else {
            Err(format!("{chat}\n{messages:?}"))
        }
    })
    .await
}

#[tokio::test]
async fn interrupting_a_chat_waiting_for_client_tools_runs_its_queued_message() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.weather_chat(&daemon, "never asked for").await;
    queue(&client, &daemon, &id, &scripted("queued answer", 0.0)).await;

    let (status, body) = client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    let messages = wait_for_replies(&client, &daemon, &id, 2).await;
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(text_of(last), "queued answer");
    // The pending call got exactly one (error) result before the queued message.
    let results: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["parts"].as_array().unwrap())
        .collect();
    assert_eq!(results.len(), 1, "{messages:?}");
    assert_eq!(results[0]["is_error"], true);
}

#[tokio::test]
async fn an_expired_client_tool_call_runs_the_queued_messages_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        dir.path(),
        &sqlite(dir.path()),
        "lease_ms = 1000\npending_action_timeout_ms = 1500\n",
    );
    let client = Client::new();
    let id = client.weather_chat(&daemon, "never asked for").await;
    queue(&client, &daemon, &id, &scripted("first queued", 0.0)).await;
    queue(&client, &daemon, &id, &scripted("second queued", 0.0)).await;

    let messages = wait_for_replies(&client, &daemon, &id, 3).await;
    let replies: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(text_of)
        .collect();
    assert_eq!(
        replies[1..],
        ["first queued", "second queued"],
        "{messages:?}"
    );
}

#[tokio::test]
async fn a_send_to_an_idle_chat_with_a_queue_runs_behind_it() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    // The reply fails for good: the chat ends in `error` with its queue intact.
    let failing = json!({"error": {"status": 400, "message": "bad request"}});
    let id = client
        .create_chat(
            &daemon,
            json!({"text": format!("go\n#mock {}", json!({"text": words(100), "rate": 20}))}),
        )
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 2).await;
    queue(&client, &daemon, &id, &format!("fail\n#mock {failing}")).await;
    queue(&client, &daemon, &id, &scripted("queued answer", 0.0)).await;
    let (status, _) = client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202);
    let chat = client.wait_status(&daemon, &id, "error").await;
    assert_eq!(chat["queued"].as_array().unwrap().len(), 1, "{chat}");

    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages")),
            json!({"text": scripted("sent later", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let messages = wait_for_replies(&client, &daemon, &id, 3).await;
    let replies: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant" && m["interrupted"] == false)
        .map(text_of)
        .collect();
    assert_eq!(replies, ["queued answer", "sent later"], "{messages:?}");
}

/// Follows a stream until the chat is `waiting` again after a committed reply.
async fn follow_to_the_end(events: &mut Events) -> (Vec<Event>, Transcript) {
    let mut seen = Vec::new();
    let mut transcript = Transcript::default();
    while let Some(event) = events.next().await {
        transcript.apply(&event);
        seen.push(event.clone());
        let replied = transcript
            .messages
            .last()
            .is_some_and(|m| m["role"] == "assistant");
        if replied && event.event == "status" && event.data["status"] == "waiting" {
            return (seen, transcript);
        }
    }
    panic!("the stream ended early: {seen:?}");
}

#[tokio::test]
async fn a_position_the_chat_never_reached_gets_a_stream_reset_and_a_replay_of_the_step() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let reply = words(80);
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&reply, 40.0)}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut first = Transcript::default();
    first.follow_parts(&mut events, 4).await;

    for position in ["999999999999", "not-a-number"] {
        let mut resumed = client.events(&daemon, &id, Some(position)).await;
        let (seen, transcript) = follow_to_the_end(&mut resumed).await;
        assert_eq!(seen[0].event, "stream_reset", "{position}: {seen:?}");
        // From the reset on, the events spell the committed reply exactly once.
        assert_eq!(
            transcript.assistant_texts(),
            vec![reply.clone()],
            "{position}"
        );
        assert_eq!(transcript.resets, 1, "{position}");
    }
}

#[tokio::test]
async fn an_edit_mid_reply_answers_the_edited_message_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A long lease: a stalled chat would wait for it to expire.
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), "lease_ms = 60000\n");
    let client = Client::new();
    let id = client
        .create_chat(&daemon, json!({"text": scripted(&words(400), 100.0)}))
        .await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 20).await;
    let user_id = transcript.messages[0]["id"].as_i64().unwrap();

    let started = tokio::time::Instant::now();
    let (status, body) = client
        .edit(
            &daemon,
            &id,
            user_id,
            json!({"text": scripted("edited reply", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let messages = wait_for_replies(&client, &daemon, &id, 1).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the edit waited {:?} for the superseded run's lease",
        started.elapsed()
    );
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(text_of(&messages[1]), "edited reply");

    // The client that watched the old reply hears the edited message and the new reply.
    let (after, _) = follow_to_the_end(&mut events).await;
    let mut heard = Transcript::default();
    for event in &after {
        heard.apply(event);
    }
    assert!(
        heard
            .messages
            .iter()
            .any(|m| m["role"] == "user" && text_of(m).contains("edited reply")),
        "{after:?}"
    );
    assert_eq!(heard.assistant_texts(), vec!["edited reply".to_owned()]);
}

/// A daemon that aborts (as `kill -9` would stop it) the first time a run reaches `point`.
fn crashing_at(dir: &std::path::Path, database: &str, point: &str) -> Daemon {
    Daemon::start_with_env(dir, database, "", &[("KEEL_DEBUG_ABORT", point)])
}

#[tokio::test]
async fn a_crash_during_a_compaction_summary_never_resumes_it_as_the_reply() {
    // The daemon dies once the summary has streamed whole into the live-part log, right
    // before it would commit it: a complete text in the log, which is not a reply.
    let mut fixture = crate::providers::Fixture::start_with_env(
        "",
        "context_limit = 128000",
        &[("KEEL_DEBUG_ABORT", "summary_logged")],
    )
    .await;
    // 120000 of 128000 tokens: the final step is compacted (the safety net).
    let script = json!({"text": "first answer", "usage": {"input_tokens": 120000}});
    let id = fixture.chat("chat", "go", &script).await;
    fixture.daemon.wait_exit().await;
    let before = fixture.mock.recent_requests().len();

    fixture.kill_and_restart();
    let messages = fixture.settle(&id).await;
    let replies: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(text_of)
        .collect();
    assert_eq!(replies[0], "first answer", "{messages:?}");
    // The answered message is never asked about again, and the summary's text is never
    // continued as a reply: every later request summarises or starts from a summary.
    let summary_instruction = "The conversation is about to exceed the context window";
    for (_, request) in &fixture.mock.recent_requests()[before..] {
        let body = request.to_string();
        assert!(
            body.contains(summary_instruction) || body.contains(keel_core::SUMMARY_PREFIX),
            "the restarted daemon asked the model to answer again: {request}"
        );
    }
    for reply in &replies[1..] {
        assert!(
            reply.starts_with(keel_core::SUMMARY_PREFIX),
            "the summary became a reply: {messages:?}"
        );
    }
}

#[tokio::test]
async fn a_crash_between_committing_the_reply_and_ending_the_run_only_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let mut daemon = crashing_at(dir.path(), &database, "step_committed");
    let client = Client::new();
    let id = client
        .create_chat(&daemon, json!({"text": scripted("the only answer", 0.0)}))
        .await;
    daemon.wait_exit().await;

    // The next owner finds the final reply committed and the run not ended: it finishes
    // the run without asking the model again (a second call would answer past the script).
    let daemon = Daemon::start(dir.path(), &database, "");
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(text_of(&messages[1]), "the only answer");
    assert_eq!(transcript.assistant_texts(), ["the only answer"]);
}

#[tokio::test]
async fn an_edit_during_a_requested_compaction_is_answered() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client.replied_chat(&daemon, "first answer").await;
    let mut events = client.events(&daemon, &id, None).await;
    let (status, body) = client
        .post(&daemon.api(&format!("/chats/{id}/compact")), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    // The summary streams (at the demo model's pace): edit the first message under it.
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 1).await;
    let user_id = transcript.messages[0]["id"].as_i64().unwrap();
    let (status, body) = client
        .edit(
            &daemon,
            &id,
            user_id,
            json!({"text": scripted("edited reply", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");

    // The edit supersedes the compaction: the edited message is answered, not only
    // summarised.
    let messages = wait_for_replies(&client, &daemon, &id, 1).await;
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "assistant", "{messages:?}");
    assert_eq!(text_of(last), "edited reply", "{messages:?}");
}

#[tokio::test]
async fn a_step_committed_during_a_catch_up_is_never_skipped() {
    // Every catch-up waits 1.5 s between its reads (debug builds), so that the first step
    // commits and the second step's parts reach the log in between.
    let fixture = crate::providers::Fixture::start_with_env(
        "",
        "",
        &[("KEEL_DEBUG_CATCH_UP_PAUSE_MS", "1500")],
    )
    .await;
    let script = json!({"steps": [
        {"text": words(10), "rate": 20, "tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}]},
        {"text": words(60), "rate": 20}
    ]});
    let id = fixture.chat("chat", "go", &script).await;
    // Connected while the first step streams: its catch-up spans that step's commit.
    let mut events = fixture.client.events(&fixture.daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;

    let messages = fixture.settle(&id).await;
    let ids = |messages: &[Value]| messages.iter().map(|m| m["id"].clone()).collect::<Vec<_>>();
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(ids(&transcript.messages), ids(&messages), "{messages:?}");
}

#[tokio::test]
async fn a_queued_message_the_run_starts_is_never_skipped_by_its_parts() {
    // A follower woken by a notice waits 1.5 s before it handles it (debug builds): the run
    // finishes its reply, starts the queued message (a message no frame carries) and
    // streams its answer meanwhile, so the answer's parts are queued for the follower
    // before it reads the store.
    let (_dir, daemon) = demo_daemon_with_env("", &[("KEEL_DEBUG_NOTICE_PAUSE_MS", "1500")]);
    let client = Client::new();
    let (id, mut events, mut transcript) = client
        .watched_chat(&daemon, json!({"text": scripted(&words(20), 40.0)}))
        .await;
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/messages")),
            json!({"text": scripted("second reply", 0.0), "busy": "queue"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert!(body["queue_id"].is_string(), "{body}");
    while transcript.messages.len() < 4 {
        transcript.apply(&events.next().await.expect("the stream ended"));
    }
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(transcript.messages, messages);
}

#[tokio::test]
async fn parts_read_before_their_step_commits_reach_a_resuming_client_before_its_message() {
    // Every catch-up waits 4 s between reading the live parts and reading the messages
    // (debug builds), and logs when its wait begins. The reply streams its first tokens and
    // stalls; a client resumes after its third part, and an interrupt commits the partial
    // reply while that catch-up waits, so the messages it reads hold the step whose parts it
    // read.
    let (_dir, daemon) = demo_daemon_with_env("", &[("KEEL_DEBUG_CATCH_UP_PAUSE_MS", "4000")]);
    let client = Client::new();
    let reply = words(60);
    let script = json!({"text": reply, "rate": 200, "stall": {"after": 20, "ms": 30000}});
    let id = client
        .create_chat(&daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;
    // A fresh chat numbers its first message 1 and its reply's parts from 2: event 4 is the
    // third part. The first 20 tokens go out at once and are logged within a window.
    client.wait_status(&daemon, &id, "running").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut transcript = Transcript {
        live_text: "w1 w2 w3".to_owned(),
        ..Transcript::default()
    };
    let mut events = client.events(&daemon, &id, Some("4")).await;
    // The catch-up read the log and waits.
    wait_until("the catch-up's wait never began", async || {
        daemon
            .logged()
            .contains("variable=\"KEEL_DEBUG_CATCH_UP_PAUSE_MS\"")
    })
    .await;
    let (status, body) = client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    let mut parts_after_reconnecting = 0;
    let (streamed, committed) = loop {
        let event = events.next().await.expect("the stream ended");
        if event.event == "part" {
            parts_after_reconnecting += 1;
        }
        if event.event == "message" && event.data["role"] == "assistant" {
            break (transcript.live_text.clone(), text_of(&event.data));
        }
        transcript.apply(&event);
    };
    // Sent in order: the parts the catch-up read, then the message that commits them.
    // Message first, the parts would fall below the client's position and be dropped.
    assert!(parts_after_reconnecting > 0, "{streamed:?}");
    assert_eq!(streamed, committed);
    assert!(reply.starts_with(&committed), "{committed:?}");
    client.wait_status(&daemon, &id, "waiting").await;
}

/// The text of the `part` events a client reading from the start gets before the reply's
/// `message`.
async fn parts_before_the_reply(client: &Client, daemon: &Daemon, id: &str) -> String {
    let mut events = client.events(daemon, id, None).await;
    let mut text = String::new();
    loop {
        let event = events.next().await.expect("the stream ended");
        if event.event == "message" && event.data["role"] == "assistant" {
            return text;
        }
        if event.event == "part" {
            text.push_str(event.data["part"]["text"].as_str().unwrap_or_default());
        }
    }
}

#[tokio::test]
async fn a_finished_replys_parts_are_replayed_until_the_sweep_drops_them() {
    // The sweeper runs every lease period and drops the kept parts of a chat idle that long.
    let (_dir, daemon) = demo_daemon_with("lease_ms = 3000\n");
    let client = Client::new();
    let reply = words(12);
    let id = client.replied_chat(&daemon, &reply).await;
    // Right after the reply, its parts are still stored: a client reading from the start
    // gets them before the message, as a client that stayed connected did.
    assert_eq!(parts_before_the_reply(&client, &daemon, &id).await, reply);
    wait_until("the sweep never dropped the reply's parts", async || {
        parts_before_the_reply(&client, &daemon, &id)
            .await
            .is_empty()
    })
    .await;
    // Only the parts go: the committed reply stays.
    assert_eq!(
        assistant_texts(&client.messages(&daemon, &id).await),
        vec![reply]
    );
}

/// The follower's store reads so far (`keel_sse_catch_ups_total`).
async fn catch_ups(daemon: &Daemon) -> u64 {
    let metrics = daemon.metrics().await;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("keel_sse_catch_ups_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no catch-up counter: {metrics}"))
}

#[tokio::test]
async fn a_follower_of_the_run_reads_nothing_for_its_step_commit() {
    // Every run waits 1 s between a step's commit and publishing its messages (debug
    // builds): the commit's notice always reaches the follower before the message's frame.
    let (_dir, daemon) = demo_daemon_with_env("", &[("KEEL_DEBUG_PUBLISH_PAUSE_MS", "1000")]);
    let client = Client::new();
    let id = client.replied_chat(&daemon, "ready").await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    while transcript.messages.len() < 2 || transcript.status.as_deref() != Some("waiting") {
        transcript.apply(&events.next().await.expect("the stream ended"));
    }
    let before = catch_ups(&daemon).await;
    let (status, body) = client
        .send_message(&daemon, &id, json!({"text": scripted(&words(12), 0.0)}))
        .await;
    assert_eq!(status, 202, "{body}");
    transcript.follow_until(&mut events, "running").await;
    transcript.follow_until(&mut events, "waiting").await;
    let reads = catch_ups(&daemon).await - before;
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(transcript.messages, messages);
    assert_eq!(assistant_texts(&messages)[1], words(12));
    // One read for the user's message and the run's start, one for the run's end; the
    // step's message comes as the run's frame.
    assert!(reads <= 2, "{reads} reads");
}

/// A chat whose owner streamed five parts of `reply` to a client and was killed before it
/// logged any: the owner's log writes wait for ever, so every part it sent was live only.
/// Returns the chat's id and what the client saw.
async fn killed_with_nothing_logged(
    dir: &Path,
    database: &str,
    client: &Client,
    reply: &str,
) -> (String, Transcript) {
    let never_logged = ("KEEL_DEBUG_LOG_PAUSE_MS", "600000");
    let mut daemon = Daemon::start_with_env(dir, database, "", &[never_logged]);
    let (id, events, transcript) = client.streaming_chat(&daemon, reply, 40.0, 5).await;
    assert!(!transcript.live_text.is_empty());
    daemon.kill();
    drop(events);
    (id, transcript)
}

#[tokio::test]
async fn a_takeover_voids_the_parts_a_dead_owner_sent_but_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let client = Client::new();
    let reply = words(40);
    let (id, mut transcript) =
        killed_with_nothing_logged(dir.path(), &database, &client, &reply).await;

    // The client resumes from the last part it saw, which no store holds: the new owner
    // starts the step over, and the client must never show its text after the old.
    let daemon = Daemon::start(dir.path(), &database, "");
    let mut events = client
        .events(&daemon, &id, transcript.last_id.as_deref())
        .await;
    while let Some(event) = events.next().await {
        transcript.apply(&event);
        assert!(
            reply.starts_with(&transcript.live_text),
            "the client shows {:?}, not a part of {reply:?}",
            transcript.live_text
        );
        if event.event == "status" && transcript.status.as_deref() == Some("waiting") {
            break;
        }
    }
    assert!(transcript.resets >= 1);
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(text_of(messages.last().unwrap()), reply);
}

#[tokio::test]
async fn a_client_back_after_a_takeover_committed_is_told_to_drop_its_unlogged_parts() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let client = Client::new();
    let reply = words(40);
    let (id, mut transcript) =
        killed_with_nothing_logged(dir.path(), &database, &client, &reply).await;
    let seen = transcript.live_text.clone();

    // The new owner finishes the reply while the client is away, and the next turn too:
    // the `stream_reset` that began the step went with its log when the next step
    // committed.
    let daemon = Daemon::start(dir.path(), &database, "");
    client.wait_status(&daemon, &id, "waiting").await;
    let (status, body) = client
        .send_message(&daemon, &id, json!({"text": scripted("more", 0.0)}))
        .await;
    assert_eq!(status, 202, "{body}");
    client
        .wait_messages(&daemon, &id, |messages| messages.len() == 4)
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let mut events = client
        .events(&daemon, &id, transcript.last_id.as_deref())
        .await;
    let resets_before = transcript.resets;
    let streamed = streamed_before_the_reply(&mut events, &mut transcript).await;
    assert_eq!(
        transcript.resets,
        resets_before + 1,
        "the client still holds {seen:?}, parts no store has, beside the committed reply"
    );
    // What follows the reset is the new owner's step as it logged it, if it still keeps it.
    assert!(reply.starts_with(&streamed), "{streamed:?}");
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(assistant_texts(&messages), [reply.as_str(), "more"]);
}

/// Queues a message and deletes it again `times` times while `events` stream, reading
/// `parts` text parts between changes: queue changes land among the run's parts.
pub(crate) async fn churn_the_queue(
    client: &Client,
    daemon: &Daemon,
    id: &str,
    follow: (&mut Events, &mut Transcript),
    times: usize,
) {
    let (events, transcript) = follow;
    for _ in 0..times {
        let queue_id = queue(client, daemon, id, "never mind").await;
        let (status, body) = client
            .send(
                reqwest::Method::DELETE,
                &daemon.api(&format!("/chats/{id}/queue/{queue_id}")),
                None,
            )
            .await;
        assert_eq!(status, 204, "{body}");
        transcript.follow_parts(events, 2).await;
    }
}

/// Follows `events` to the reply's committed message; the text its parts spelled first.
pub(crate) async fn streamed_before_the_reply(
    events: &mut Events,
    transcript: &mut Transcript,
) -> String {
    loop {
        let event = events.next().await.expect("the stream ended");
        if event.event == "message" && event.data["role"] == "assistant" {
            let streamed = transcript.live_text.clone();
            transcript.apply(&event);
            return streamed;
        }
        transcript.apply(&event);
    }
}

#[tokio::test]
async fn queue_changes_while_a_reply_streams_cost_its_follower_no_part() {
    // Every write of the live-part log waits a second (debug builds): the parts the run
    // numbers are live long before the store holds them. Queue changes made meanwhile are
    // state, not history; numbered from the store they would collide with one of those
    // parts, and the follower, having sent that number, would drop the part.
    let (_dir, daemon) = demo_daemon_with_env("", &[("KEEL_DEBUG_LOG_PAUSE_MS", "1000")]);
    let client = Client::new();
    let reply = words(80);
    let (id, mut events, mut transcript) = client.streaming_chat(&daemon, &reply, 20.0, 3).await;
    churn_the_queue(&client, &daemon, &id, (&mut events, &mut transcript), 4).await;
    let streamed = streamed_before_the_reply(&mut events, &mut transcript).await;
    assert_eq!(streamed, reply, "the parts spelled the reply");
    assert_eq!(transcript.resets, 0);
    client.wait_status(&daemon, &id, "waiting").await;
    assert_eq!(
        assistant_texts(&client.messages(&daemon, &id).await),
        vec![reply]
    );
}
