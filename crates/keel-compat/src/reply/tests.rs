use super::*;
use serde_json::json;

fn text(t: &str) -> Value {
    json!({"role": "assistant", "part": {"type": "text", "text": t}})
}

#[test]
fn live_text_grows_one_block_and_a_commit_replaces_it() {
    let mut reply = Reply::default();
    reply.apply("part", &text("Hel"));
    reply.apply("part", &text("lo"));
    assert_eq!(reply.steps[0].blocks, vec![Block::Text("Hello".into())]);
    reply.apply(
        "message",
        &json!({"role": "assistant", "parts": [{"type": "text", "text": "Hello!"}]}),
    );
    assert!(reply.steps[0].committed);
    assert_eq!(reply.steps[0].blocks, vec![Block::Text("Hello!".into())]);
    reply.apply("part", &text("Next"));
    assert_eq!(reply.steps.len(), 2, "a part after a commit starts a step");
}

#[test]
fn a_stream_reset_voids_the_step_in_progress_only() {
    let mut reply = Reply::default();
    reply.apply(
        "message",
        &json!({"role": "assistant", "parts": [{"type": "text", "text": "one"}]}),
    );
    reply.apply("part", &text("tw"));
    reply.apply("stream_reset", &json!({}));
    assert_eq!(reply.steps[0].blocks, vec![Block::Text("one".into())]);
    assert!(reply.steps[1].blocks.is_empty());
}

#[test]
fn tool_calls_collect_arguments_and_results() {
    let mut reply = Reply::default();
    let delta = |d: &str| {
        json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c1",
                   "tool_name": "read_file", "args_delta": d}})
    };
    reply.apply("part", &delta("{\"pa"));
    reply.apply("part", &delta("th\":1}"));
    reply.apply(
            "part",
            &json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c1",
                    "tool_name": "read_file", "args_delta": "", "args": "{\"path\":1}", "complete": true}}),
        );
    reply.apply(
        "part",
        &json!({"role": "tool", "part": {"type": "tool_result", "tool_call_id": "c1",
                    "tool_name": "read_file", "result": "text", "is_error": false}}),
    );
    let Block::Call(call) = &reply.steps[0].blocks[0] else {
        panic!("a call block");
    };
    assert_eq!(call.args, "{\"path\":1}");
    assert!(call.complete);
    assert_eq!(call.result.as_ref().unwrap().value, json!("text"));
    // Committing the step keeps the result that arrived live.
    reply.apply(
        "message",
        &json!({"role": "assistant", "parts": [{"type": "tool_call", "tool_call_id": "c1",
                    "tool_name": "read_file", "args": "{\"path\":1}"}]}),
    );
    let Block::Call(call) = &reply.steps[0].blocks[0] else {
        panic!("a call block");
    };
    assert!(call.result.is_some());
}

#[test]
fn a_change_of_branch_ends_the_reply_before_the_new_branch_is_replayed() {
    let mut reply = Reply::default();
    reply.apply(
        "part",
        &json!({"role": "assistant", "part": {"type": "text", "text": "Hel"}}),
    );
    reply.apply("branch", &json!({"leaf_id": 7}));
    assert_eq!(reply.end, Some(End::Interrupted));
    let last = reply.steps.last().unwrap();
    assert!(
        last.keyed().next().is_none(),
        "the unstored step was voided"
    );
    // The new branch's first messages change nothing.
    let old = reply.steps.len();
    reply.apply(
        "message",
        &json!({"id": 1, "role": "assistant", "parts": [{"type": "text", "text": "old"}]}),
    );
    assert_eq!(reply.steps.len(), old);
}

#[test]
fn a_reply_left_on_another_branch_ends_as_it_was_left() {
    let mut superseded = Reply::default();
    superseded.left();
    assert_eq!(superseded.end, Some(End::Interrupted));
    let mut answered = Reply::default();
    answered.apply(
        "message",
        &json!({"role": "assistant", "parts": [{"type": "text", "text": "done"}]}),
    );
    answered.left();
    assert_eq!(answered.end, Some(End::Done));
    let mut stopped = Reply::default();
    stopped.apply(
            "message",
            &json!({"role": "assistant", "interrupted": true, "parts": [{"type": "text", "text": "pa"}]}),
        );
    stopped.left();
    assert_eq!(stopped.end, Some(End::Interrupted));
}

#[test]
fn statuses_end_the_reply() {
    let cases = [
        (json!({"status": "waiting"}), End::Done),
        (json!({"status": "requires_action"}), End::ToolCalls),
        (
            json!({"status": "error", "last_error": {"kind": "auth", "message": "bad key"}}),
            End::Failed("bad key".into()),
        ),
    ];
    for (status, end) in cases {
        let mut reply = Reply::default();
        reply.apply("status", &json!({"status": "running"}));
        assert_eq!(reply.end, None);
        reply.apply("status", &status);
        assert_eq!(reply.end, Some(end));
    }
    let mut reply = Reply::default();
    reply.apply(
            "message",
            &json!({"role": "assistant", "interrupted": true, "parts": [{"type": "text", "text": "pa"}]}),
        );
    reply.apply("status", &json!({"status": "waiting"}));
    assert_eq!(reply.end, Some(End::Interrupted));
}

#[test]
fn the_next_user_message_ends_a_begun_reply() {
    let mut reply = Reply::default();
    let user = json!({"role": "user", "parts": [{"type": "text", "text": "hi"}]});
    reply.apply("message", &user);
    assert_eq!(reply.end, None, "before the reply begins it is the input");
    reply.apply("part", &text("a"));
    reply.apply("message", &user);
    assert_eq!(reply.end, Some(End::Done));
}

#[test]
fn answers_to_client_side_calls_can_end_the_reply() {
    let call = json!({"role": "assistant", "parts": [{"type": "tool_call", "tool_call_id": "c",
                          "tool_name": "ask", "args": "{}"}]});
    let answer = json!({"role": "tool", "parts": [{"type": "tool_result", "tool_call_id": "c",
                            "tool_name": "ask", "result": "yes"}]});
    let mut reply = Reply::ending_at_answers_to(vec!["ask".into()]);
    reply.apply("message", &call);
    reply.apply("message", &answer);
    assert_eq!(reply.end, Some(End::ToolCalls));
    // By default the answer is part of the reply, which goes on.
    let mut reply = Reply::default();
    reply.apply("message", &call);
    reply.apply("message", &answer);
    assert_eq!(reply.end, None);
    let Block::Call(call) = &reply.steps[0].blocks[0] else {
        panic!("a call block");
    };
    assert!(call.result.is_some());
}

#[test]
fn a_cancelled_call_leaves_the_step() {
    let mut reply = Reply::default();
    reply.apply(
        "part",
        &json!({"role": "assistant", "part": {"type": "tool_call", "tool_call_id": "c",
                    "tool_name": "t", "args_delta": "{"}}),
    );
    reply.apply(
        "tool_call_cancel",
        &json!({"tool_call_id": "c", "tool_name": "t", "reason": "x"}),
    );
    assert!(reply.steps[0].blocks.is_empty());
}
