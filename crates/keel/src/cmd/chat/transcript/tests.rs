use super::*;
use serde_json::json;

fn event(id: i64, name: &str, data: Value) -> SseEvent {
    SseEvent {
        id: Some(id),
        event: name.to_owned(),
        data: data.to_string(),
    }
}

fn text(id: i64, delta: &str) -> SseEvent {
    event(
        id,
        "part",
        json!({"role": "assistant", "part": {"type": "text", "text": delta}}),
    )
}

fn message(id: i64, seq: i64, role: &str, parts: Value, interrupted: bool) -> SseEvent {
    event(
        seq,
        "message",
        json!({"id": id, "role": role, "parts": parts, "created_at": "2026-01-01T00:00:00Z",
                   "usage": null, "interrupted": interrupted}),
    )
}

fn printed(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.clone(),
            Piece::Reasoning(t) => format!("<{t}>"),
            Piece::Refusal(t) => format!("{{{t}}}"),
            Piece::Line(_, l) => format!("[{l}]"),
        })
        .collect()
}

fn feed(t: &mut Transcript, events: &[SseEvent]) -> String {
    events.iter().map(|e| printed(&t.apply(e))).collect()
}

#[test]
fn streamed_text_is_printed_once_and_the_commit_adds_nothing() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            text(2, "Hello"),
            text(3, " world"),
            message(
                2,
                4,
                "assistant",
                json!([{"type": "text", "text": "Hello world"}]),
                false,
            ),
        ],
    );
    assert_eq!(out, "Hello world");
    assert_eq!(
        t.last_assistant().map(Message::text).as_deref(),
        Some("Hello world")
    );
}

#[test]
fn a_refusal_is_printed_apart_once_and_the_commit_adds_nothing() {
    let mut t = Transcript::new();
    let refusal = |id: i64, delta: &str| {
        event(
            id,
            "part",
            json!({"role": "assistant", "part": {"type": "refusal", "text": delta}}),
        )
    };
    let out = feed(
        &mut t,
        &[
            text(2, "Well,"),
            refusal(3, "I can't "),
            refusal(4, "help."),
            message(
                2,
                5,
                "assistant",
                json!([{"type": "text", "text": "Well,"},
                           {"type": "refusal", "text": "I can't help."}]),
                false,
            ),
        ],
    );
    assert_eq!(out, "Well,{I can't }{help.}");
    // Shown only when committed (a client that joined late): printed whole.
    let mut late = Transcript::new();
    let out = feed(
        &mut late,
        &[message(
            2,
            5,
            "assistant",
            json!([{"type": "refusal", "text": "I can't help."}]),
            false,
        )],
    );
    assert_eq!(out, "{I can't help.}");
}

#[test]
fn replayed_events_after_a_reconnect_are_skipped() {
    let mut t = Transcript::new();
    let first = feed(&mut t, &[text(2, "one"), text(3, " two")]);
    // The reconnect resumes from 3 but a server may repeat; ephemeral events repeat ids.
    let again = feed(
        &mut t,
        &[
            text(3, " two"),
            event(
                3,
                "status",
                json!({"status": "running", "last_error": null}),
            ),
            text(4, " three"),
        ],
    );
    assert_eq!(first + &again, "one two three");
}

#[test]
fn a_commit_prints_only_the_missing_tail() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            text(5, "par"),
            message(
                7,
                9,
                "assistant",
                json!([{"type": "text", "text": "partial"}]),
                true,
            ),
        ],
    );
    assert_eq!(out, "partial[[interrupted]]");
    assert!(t.last_assistant().is_some_and(|m| m.interrupted));
}

#[test]
fn a_commit_without_live_parts_prints_everything() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            message(1, 1, "user", json!([{"type": "text", "text": "hi"}]), false),
            message(
                2,
                2,
                "assistant",
                json!([{"type": "reasoning", "text": "think"}, {"type": "text", "text": "hi!"}]),
                false,
            ),
        ],
    );
    assert_eq!(out, "[you: hi]<think>hi!");
}

#[test]
fn own_user_messages_are_not_echoed() {
    let mut t = Transcript::new();
    t.expect_user("hi");
    let out = feed(
        &mut t,
        &[message(
            1,
            1,
            "user",
            json!([{"type": "text", "text": "hi"}]),
            false,
        )],
    );
    assert_eq!(out, "");
    assert_eq!(t.last_user_id(), 1);
}

#[test]
fn stream_reset_voids_the_live_parts() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            text(2, "wrong"),
            event(3, "stream_reset", json!({})),
            text(4, "right"),
            message(
                3,
                5,
                "assistant",
                json!([{"type": "text", "text": "right answer"}]),
                false,
            ),
        ],
    );
    assert_eq!(
        out,
        "wrong[↻ the reply restarted from the beginning]right answer"
    );
}

#[test]
fn a_resumed_step_that_repeats_the_screen_prints_only_what_is_new() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            text(2, "one two"),
            text(3, " three"),
            // The new owner logged less than the screen shows, then continues.
            event(1_000_004, "stream_reset", json!({})),
            text(1_000_005, "one two"),
            text(1_000_006, " three"),
            text(1_000_007, " four"),
            message(
                3,
                1_000_008,
                "assistant",
                json!([{"type": "text", "text": "one two three four"}]),
                false,
            ),
        ],
    );
    assert_eq!(out, "one two three four");
}

#[test]
fn a_reset_then_the_commit_alone_prints_nothing_twice() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            text(2, "one two"),
            event(3, "stream_reset", json!({})),
            message(
                3,
                4,
                "assistant",
                json!([{"type": "text", "text": "one two three"}]),
                false,
            ),
        ],
    );
    assert_eq!(out, "one two three");
}

#[test]
fn a_commit_that_differs_from_what_was_shown_is_printed_as_stored() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            text(2, "abc"),
            message(
                3,
                3,
                "assistant",
                json!([{"type": "text", "text": "xyz"}]),
                false,
            ),
        ],
    );
    assert_eq!(out, "abc[(the reply as stored:)]xyz");
}

#[test]
fn tool_calls_print_when_complete_and_results_once() {
    let mut t = Transcript::new();
    let call = |seq, extra: Value| {
        let mut part = json!({"type": "tool_call", "tool_call_id": "c1", "tool_name": "read_file"});
        if let (Some(p), Some(e)) = (part.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        event(seq, "part", json!({"role": "assistant", "part": part}))
    };
    let result = json!({"type": "tool_result", "tool_call_id": "c1", "tool_name": "read_file",
                            "result": "hello", "is_error": false});
    let out = feed(
        &mut t,
        &[
            call(2, json!({"args_delta": "{\"path\":"})),
            call(3, json!({"args_delta": "\"a\"}"})),
            call(
                4,
                json!({"args_delta": "", "args": "{\"path\":\"a\"}", "complete": true}),
            ),
            event(5, "part", json!({"role": "tool", "part": result})),
            message(
                2,
                6,
                "assistant",
                json!([{"type": "tool_call", "tool_call_id": "c1", "tool_name": "read_file", "args": "{\"path\":\"a\"}"}]),
                false,
            ),
            message(3, 7, "tool", json!([result]), false),
        ],
    );
    assert_eq!(out, "[⚙ read_file {\"path\":\"a\"}][↳ read_file: hello]");
}

#[test]
fn cancelled_tool_calls_and_retries_are_announced() {
    let mut t = Transcript::new();
    let out = feed(
        &mut t,
        &[
            event(
                2,
                "retry",
                json!({"attempt": 2, "delay_ms": 1500, "kind": "rate_limit", "message": "slow down"}),
            ),
            event(
                3,
                "tool_call_cancel",
                json!({"tool_call_id": "c", "tool_name": "write_file", "reason": "stream cut"}),
            ),
        ],
    );
    assert_eq!(
        out,
        "[retrying: attempt 2, rate_limit, waiting 1.5 s (slow down)][✗ write_file cancelled: stream cut]"
    );
}

#[test]
fn a_retried_failure_names_the_provider_and_the_address() {
    let retry = json!({
        "attempt": 2, "delay_ms": 1500, "kind": "server", "message": "HTTP status 500",
        "provider": "local", "url": "http://127.0.0.1:8080/v1/chat/completions"
    });
    assert_eq!(
        retry_text(&retry),
        "retrying: attempt 2, server, waiting 1.5 s (HTTP status 500; provider local, http://127.0.0.1:8080/v1/chat/completions)"
    );
    let bare = json!({"attempt": 3, "delay_ms": 1000, "kind": "connection", "message": "",
                          "provider": null, "url": null});
    assert_eq!(
        retry_text(&bare),
        "retrying: attempt 3, connection, waiting 1.0 s"
    );
}

#[test]
fn a_provider_failure_names_the_provider_and_the_address() {
    let error = json!({
        "kind": "invalid_request", "message": "HTTP status 404",
        "provider": "local", "url": "http://127.0.0.1:8080/v1/chat/completions"
    });
    assert_eq!(
        failure_text(&error),
        "invalid_request: HTTP status 404 (provider local, http://127.0.0.1:8080/v1/chat/completions)"
    );
    assert_eq!(
        failure_text(
            &json!({"kind": "auth", "message": "bad key", "provider": "openai", "url": null})
        ),
        "auth: bad key (provider openai)"
    );
}

#[test]
fn status_tracks_busy_and_reports_errors_once() {
    let mut t = Transcript::new();
    t.started_run();
    assert!(t.is_busy() && t.awaiting_reply());
    let running = event(
        0,
        "status",
        json!({"status": "running", "last_error": null}),
    );
    assert_eq!(feed(&mut t, &[running]), "");
    let failed = event(
        0,
        "status",
        json!({"status": "error", "last_error": {"kind": "auth", "message": "bad key"}}),
    );
    assert_eq!(
        feed(&mut t, &[failed.clone(), failed]),
        "[the run failed: auth: bad key][/retry runs it again; a new message is answered as usual]"
    );
    assert!(!t.is_busy());
    assert_eq!(t.last_error(), Some("auth: bad key"));
}

#[test]
fn a_branch_change_prints_only_what_differs_from_the_screen() {
    let user = |id: i64, seq: i64, text: &str| {
        message(
            id,
            seq,
            "user",
            json!([{"type": "text", "text": text}]),
            false,
        )
    };
    let reply = |id: i64, seq: i64, text: &str| {
        message(
            id,
            seq,
            "assistant",
            json!([{"type": "text", "text": text}]),
            false,
        )
    };
    let mut t = Transcript::new();
    let before = feed(
        &mut t,
        &[
            user(1, 1, "hi"),
            reply(2, 3, "hello"),
            user(3, 4, "more"),
            reply(4, 6, "sure"),
        ],
    );
    assert_eq!(before, "[you: hi]hello[you: more]sure");

    // An edit of the second message: the first turn is not printed again.
    let branch = event(7, "branch", json!({"leaf_id": 5}));
    let edited = feed(
        &mut t,
        &[
            branch,
            user(1, 8, "hi"),
            reply(2, 9, "hello"),
            user(5, 10, "other"),
            reply(6, 11, "fresh"),
        ],
    );
    assert_eq!(edited, "[another version from here on:][you: other]fresh");
    // A regenerate of the last reply: the branch repeats the screen up to it, then the
    // new reply streams.
    let branch = event(12, "branch", json!({"leaf_id": 5}));
    let regenerated = feed(
        &mut t,
        &[
            branch,
            user(1, 13, "hi"),
            reply(2, 14, "hello"),
            user(5, 15, "other"),
            text(16, "new words"),
        ],
    );
    assert_eq!(regenerated, "[another version from here on:]new words");

    // A fresh follower of the same chat, continuing the screen: the same rule, the
    // `branch` event a replay may start with included.
    let mut next = Transcript::continuing(&t);
    let replayed = feed(
        &mut next,
        &[
            event(1, "branch", json!({"leaf_id": 4})),
            user(1, 2, "hi"),
            reply(2, 3, "hello"),
            user(3, 4, "more"),
            reply(4, 5, "sure"),
        ],
    );
    assert_eq!(replayed, "[another version from here on:][you: more]sure");
    // A branch that only adds to the screen says nothing of versions.
    let mut grown = Transcript::continuing(&next);
    let added = feed(
        &mut grown,
        &[
            user(1, 1, "hi"),
            reply(2, 2, "hello"),
            user(3, 3, "more"),
            reply(4, 4, "sure"),
            user(6, 5, "new"),
        ],
    );
    assert_eq!(added, "[you: new]");
}

#[test]
fn messages_with_other_versions_are_marked() {
    let mut t = Transcript::new();
    let with_versions = |id: i64, seq: i64, role: &str, text: &str, siblings: Value| {
        event(
            seq,
            "message",
            json!({"id": id, "role": role, "parts": [{"type": "text", "text": text}],
                       "interrupted": false, "siblings": siblings}),
        )
    };
    let out = feed(
        &mut t,
        &[
            with_versions(3, 1, "user", "hi", json!([1, 3])),
            with_versions(4, 2, "assistant", "hello", json!([4])),
            with_versions(5, 3, "user", "more", json!([5])),
            with_versions(8, 4, "assistant", "again", json!([6, 8, 9])),
        ],
    );
    assert_eq!(out, "[you: hi  < 2/2 >]hello[you: more]again[< 2/3 >]");
}

#[test]
fn queue_changes_are_announced() {
    let mut t = Transcript::new();
    let queue = |n: usize| event(1, "queue", json!({"queued": vec![json!({}); n]}));
    assert_eq!(
        feed(&mut t, &[queue(0), queue(1), queue(1), queue(0)]),
        "[queued messages: 1][queued messages: 0]"
    );
}
