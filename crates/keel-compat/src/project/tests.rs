use super::*;
use serde_json::{Value, json};

fn text(t: &str) -> Value {
    json!({"role": "assistant", "part": {"type": "text", "text": t}})
}

fn call_delta(id: &str, delta: &str) -> Value {
    json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": id,
               "tool_name": "lookup", "args_delta": delta}})
}

fn stored(parts: Value) -> Value {
    json!({"role": "assistant", "parts": parts})
}

/// What the ops spell for the client: the text of each part in order.
fn texts(ops: &[Op]) -> Vec<String> {
    let mut parts: Vec<(usize, String)> = Vec::new();
    for op in ops {
        match op {
            Op::Open { part, .. } => parts.push((*part, String::new())),
            Op::Delta { part, text, .. } => {
                if let Some(p) = parts.iter_mut().find(|p| p.0 == *part) {
                    p.1.push_str(text);
                }
            }
            _ => {}
        }
    }
    parts.into_iter().map(|p| p.1).collect()
}

/// Applies events one update at a time, collecting every op.
fn run(events: &[(&str, Value)]) -> Vec<Op> {
    let mut reply = Reply::default();
    let mut projection = Projection::default();
    let mut ops = projection.update(&reply);
    for (event, data) in events {
        reply.apply(event, data);
        ops.extend(projection.update(&reply));
    }
    ops
}

#[test]
fn text_after_a_cut_tool_call_continues_the_open_part() {
    let ops = run(&[
        ("part", text("Looking it up: ")),
        ("part", call_delta("c1", "{\"q\":")),
        (
            "tool_call_cancel",
            json!({"tool_call_id": "c1", "tool_name": "lookup", "reason": "cut"}),
        ),
        ("part", text("done.")),
        (
            "message",
            stored(json!([{"type": "text", "text": "Looking it up: done."}])),
        ),
        ("status", json!({"status": "waiting"})),
    ]);
    assert_eq!(texts(&ops), ["Looking it up: done."]);
    assert!(!ops.iter().any(|op| matches!(op, Op::Call { .. })));
    assert_eq!(ops.last(), Some(&Op::End(End::Done)));
}

#[test]
fn text_after_its_part_was_closed_opens_a_new_part_with_the_rest() {
    let mut reply = Reply::default();
    let mut projection = Projection::default();
    reply.apply("part", &text("abc"));
    projection.update(&reply);
    // A closed part (the projection closes it when another part opens).
    projection.close_open(&mut Vec::new());
    reply.apply("part", &text("def"));
    let ops = projection.update(&reply);
    assert_eq!(
        ops,
        [
            Op::Open {
                part: 1,
                kind: TextKind::Text
            },
            Op::Delta {
                part: 1,
                kind: TextKind::Text,
                text: "def".into()
            }
        ]
    );
}

#[test]
fn a_restart_with_other_text_closes_the_voided_part_and_sends_the_new_text() {
    let ops = run(&[
        ("part", text("abc")),
        ("stream_reset", json!({})),
        ("part", text("xyz")),
        ("message", stored(json!([{"type": "text", "text": "xyz"}]))),
        ("status", json!({"status": "waiting"})),
    ]);
    assert_eq!(texts(&ops), ["abc", "xyz"]);
    assert!(ops.contains(&Op::Close {
        part: 0,
        kind: TextKind::Text,
        text: "abc".into(),
        voided: true
    }));
    assert_eq!(ops.last(), Some(&Op::End(End::Done)));
}

#[test]
fn a_republished_prefix_after_a_reset_is_sent_once() {
    let ops = run(&[
        ("part", text("Hello wor")),
        ("stream_reset", json!({})),
        ("part", text("Hello")),
        ("part", text(" world")),
        (
            "message",
            stored(json!([{"type": "text", "text": "Hello world"}])),
        ),
        ("status", json!({"status": "waiting"})),
    ]);
    assert_eq!(texts(&ops), ["Hello world"]);
}

#[test]
fn a_compaction_voids_the_summary_it_streamed() {
    let ops = run(&[
        (
            "message",
            stored(json!([{"type": "text", "text": "answer"}])),
        ),
        ("part", text("summary of it all")),
        (
            "message",
            json!({"role": "system", "parts": [{"type": "text", "text": "compacted"}]}),
        ),
        ("part", text("more")),
    ]);
    assert_eq!(texts(&ops), ["answer", "summary of it all", "more"]);
    assert!(ops.iter().any(|op| matches!(
        op,
        Op::Close {
            part: 1,
            voided: true,
            ..
        }
    )));
}

#[test]
fn calls_are_announced_once_complete_and_results_follow_call_order() {
    let complete = |id: &str| {
        json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": id,
                   "tool_name": "lookup", "args_delta": "", "args": "{}", "complete": true}})
    };
    let result = |id: &str| {
        json!({"role": "tool", "part": {"type": "tool_result", "tool_call_id": id,
                   "tool_name": "lookup", "result": id, "is_error": false}})
    };
    let ops = run(&[
        ("part", text("Two: ")),
        ("part", call_delta("a", "{")),
        ("part", complete("a")),
        ("part", complete("b")),
        ("part", result("b")),
        ("part", result("a")),
    ]);
    let shape: Vec<String> = ops
        .iter()
        .map(|op| match op {
            Op::Call { call, .. } => format!("call {}", call.id),
            Op::Output { call_id, .. } => format!("output {call_id}"),
            Op::Close { .. } => "close".into(),
            _ => String::new(),
        })
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(shape, ["close", "call a", "call b", "output a", "output b"]);
}

#[test]
fn held_calls_wait_for_their_answer_and_say_it_was_given() {
    let call = stored(
        json!([{"type": "tool_call", "tool_call_id": "c", "tool_name": "ask", "args": "{}"}]),
    );
    let answer = json!({"role": "tool", "parts": [{"type": "tool_result", "tool_call_id": "c",
                            "tool_name": "ask", "result": "yes"}]});
    let mut reply = Reply::default();
    let mut projection = Projection::new(vec!["ask".into()]);
    reply.apply("message", &call);
    let first = projection.update(&reply);
    assert!(!first.iter().any(|op| matches!(op, Op::Call { .. })));
    reply.apply("message", &answer);
    let ops = projection.update(&reply);
    assert!(matches!(&ops[0], Op::Call { answered: true, .. }));
    assert!(matches!(&ops[1], Op::Output { .. }));
    assert_eq!(ops[2], Op::FinishStep);

    // Unanswered at the end: announced as asked.
    let mut reply = Reply::default();
    let mut projection = Projection::new(vec!["ask".into()]);
    reply.apply("message", &call);
    reply.apply("status", &json!({"status": "requires_action"}));
    let ops = projection.update(&reply);
    assert!(ops.iter().any(|op| matches!(
        op,
        Op::Call {
            answered: false,
            ..
        }
    )));
    assert_eq!(ops.last(), Some(&Op::End(End::ToolCalls)));
}

#[test]
fn the_ops_do_not_depend_on_how_updates_were_batched() {
    let events = [
        ("part", text("He")),
        ("part", text("llo")),
        ("part", call_delta("c", "{\"a\"")),
        (
            "part",
            json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c",
                       "tool_name": "lookup", "args_delta": ":1}", "complete": true}}),
        ),
        (
            "message",
            stored(json!([{"type": "text", "text": "Hello"},
                              {"type": "tool_call", "tool_call_id": "c", "tool_name": "lookup", "args": "{\"a\":1}"}])),
        ),
        ("status", json!({"status": "requires_action"})),
    ];
    let one_by_one = run(&events);
    let mut reply = Reply::default();
    for (event, data) in &events {
        reply.apply(event, data);
    }
    let all_at_once = Projection::default().update(&reply);
    let without_deltas = |ops: &[Op]| -> Vec<Op> {
        ops.iter()
            .filter(|op| !matches!(op, Op::Delta { .. }))
            .cloned()
            .collect()
    };
    assert_eq!(without_deltas(&one_by_one), without_deltas(&all_at_once));
    assert_eq!(texts(&one_by_one), texts(&all_at_once));
}

#[test]
fn a_change_of_branch_ends_the_stream() {
    let ops = run(&[("part", text("Hel")), ("branch", json!({"leaf_id": 3}))]);
    assert_eq!(ops.last(), Some(&Op::End(End::Interrupted)));
    assert!(ops.iter().any(|op| matches!(op, Op::Close { part: 0, .. })));
}
