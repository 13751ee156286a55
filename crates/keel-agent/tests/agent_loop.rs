//! The agent loop's behaviour: prompts, tools, steps, persistence and interrupts.
//!
//! Longer than most files: the loop's scripted model and tools, and a test per behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_agent::{LiveEvent, RunError, RunOptions, RunOutcome, ToolError, ToolOutput, run};
use keel_core::{
    Cancel, CancelCause, ErrorKind, FinishReason, INTERRUPTED_RESULT, Message, PartKind, Role,
    StreamEvent, ToolDefinition,
};
use serde_json::json;
use support::*;
use tokio::sync::Notify;

fn tool_results(step: &keel_agent::PersistedStep) -> Vec<(String, serde_json::Value, bool)> {
    step.messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match &p.kind {
            PartKind::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => Some((tool_call_id.clone(), result.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

fn assistant(step: &keel_agent::PersistedStep) -> &Message {
    step.messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .expect("an assistant message")
}

/// Interrupts `cancel` once `started` fires.
fn interrupt_when(started: Arc<Notify>, cancel: &Cancel, cause: CancelCause) {
    let cancel = cancel.clone();
    tokio::spawn(async move {
        started.notified().await;
        cancel.cancel(cause);
    });
}

#[tokio::test]
async fn only_active_tools_are_offered_and_prompt_preparation_works_on_a_copy() {
    let model = ScriptedModel::marking(vec![Reply::Stream(
        [text("t", "done"), vec![finish(FinishReason::Stop)]].concat(),
        Ending::Done,
    )]);
    let history = vec![
        Message::system("sys-1"),
        Message::system("sys-2"),
        user("hello"),
        Message::assistant("working"),
        user("continue"),
    ];
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model.clone(), history.clone(), persister.clone());
    options.tools = vec![FnTool::noop("read_file"), FnTool::noop("write_file")];
    options.active_tools = Some(vec!["read_file".into()]);
    options.max_steps = 3;
    options.context_limit_fallback = Some(4096);
    let outcome = run(options, Cancel::new()).await.unwrap();

    assert_eq!(outcome, RunOutcome::Completed { steps: 1 });
    let steps = persister.steps();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].context_limit, Some(4096));
    let calls = model.calls();
    assert_eq!(calls[0].tools.len(), 1);
    assert_eq!(calls[0].tools[0].name, "read_file");
    assert_eq!(calls[0].messages.len(), history.len());
    assert!(calls[0].messages[4].cache_breakpoint);
    assert!(history.iter().all(|m| !m.cache_breakpoint));
}

#[tokio::test]
async fn interrupted_step_persists_partial_call_text_and_synthetic_result() {
    let started = Arc::new(Notify::new());
    let events = vec![
        StreamEvent::ToolInputStart {
            id: "interrupt-tool-1".into(),
            tool_name: "read_file".into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputDelta {
            id: "interrupt-tool-1".into(),
            delta: r#"{"path":"main.go""#.into(),
        },
        StreamEvent::TextStart { id: "t".into() },
        StreamEvent::TextDelta {
            id: "t".into(),
            delta: "partial assistant output".into(),
        },
    ];
    let model = ScriptedModel::new(vec![Reply::Stream(
        events,
        Ending::CancelledError(started.clone()),
    )]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Interrupted);
    let mut options = RunOptions::new(model, vec![user("hello")], persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.max_steps = 3;
    let outcome = run(options, cancel).await.unwrap();

    assert_eq!(outcome, RunOutcome::Interrupted);
    assert_eq!(
        persister.cancelled_flags(),
        vec![false],
        "persisted once, not cancelled"
    );
    let step = &persister.steps()[0];
    assert!(step.interrupted);
    let reply = assistant(step);
    assert!(reply.text().contains("partial assistant output"));
    let call = reply.tool_calls().next().unwrap();
    assert!(
        matches!(&call.kind, PartKind::ToolCall { tool_call_id, tool_name, args, .. }
        if tool_call_id == "interrupt-tool-1" && tool_name == "read_file" && args.contains(r#""path":"main.go""#))
    );
    let results = tool_results(step);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, "interrupt-tool-1");
    assert_eq!(results[0].1, json!(INTERRUPTED_RESULT));
    assert!(results[0].2, "interrupted result is an error");
    let result_part = &step.messages[1].parts[0];
    assert!(
        result_part.created_at.is_some(),
        "synthetic result is timestamped"
    );
}

#[tokio::test]
async fn multi_step_tool_execution_feeds_calls_and_results_back() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            [
                tool_call("tc-1", "read_file", r#"{"path":"a"}"#),
                vec![finish(FinishReason::ToolCalls)],
            ]
            .concat(),
            Ending::Done,
        ),
        Reply::Stream(
            [text("t", "all done"), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model.clone(), vec![user("read a")], persister.clone());
    options.tools = vec![FnTool::arc("read_file", |req, _| async move {
        Ok(ToolOutput::Text(format!("contents for {}", req.args)))
    })];
    options.max_steps = 5;
    let outcome = run(options, Cancel::new()).await.unwrap();

    assert_eq!(outcome, RunOutcome::Completed { steps: 2 });
    let calls = model.calls();
    assert_eq!(calls.len(), 2);
    let second = &calls[1].messages;
    assert_eq!(second.len(), 3);
    assert_eq!(second[1].role, Role::Assistant);
    assert!(
        second[1]
            .tool_calls()
            .any(|p| p.tool_call_id() == Some("tc-1"))
    );
    assert_eq!(second[2].role, Role::Tool);
    assert_eq!(second[2].parts[0].tool_call_id(), Some("tc-1"));
    let steps = persister.steps();
    assert_eq!(steps.len(), 2);
    assert_eq!(
        tool_results(&steps[0])[0].1,
        json!(r#"contents for {"path":"a"}"#)
    );
    assert_eq!(assistant(&steps[1]).text(), "all done");
}

#[tokio::test]
async fn a_halt_ends_the_run_after_the_committed_step_without_calling_the_model_again() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            tool_call("tc-1", "read_file", r#"{"path":"a"}"#),
            vec![finish(FinishReason::ToolCalls)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    *persister.halt.lock().unwrap() = Some(keel_agent::Halt {
        kind: ErrorKind::BudgetExceeded,
        message: "the budget is used up".into(),
    });
    let mut options = RunOptions::new(model.clone(), vec![user("read a")], persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.max_steps = 5;
    let error = run(options, Cancel::new()).await.unwrap_err();

    match error {
        RunError::Halted(halt) => assert_eq!(halt.kind, ErrorKind::BudgetExceeded),
        other => panic!("expected a halt, got {other:?}"),
    }
    assert_eq!(model.calls().len(), 1, "no call after the halt");
    let steps = persister.steps();
    assert_eq!(steps.len(), 1, "the step that ran is committed");
    assert_eq!(tool_results(&steps[0]).len(), 1);
}

#[tokio::test]
async fn persist_error_propagates_with_its_message() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [text("t", "hello"), vec![finish(FinishReason::Stop)]].concat(),
        Ending::Done,
    )]);
    let persister =
        RecordingPersister::answering(vec![PersistAnswer::Fail("database write failed")]);
    let options = RunOptions::new(model, vec![user("hello")], persister);
    let error = run(options, Cancel::new()).await.unwrap_err();
    assert!(matches!(error, RunError::Persist(_)));
    assert!(error.to_string().contains("database write failed"));
}

#[tokio::test]
async fn shutdown_during_tool_execution_returns_cancelled_not_interrupted() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            tool_call("tc-block", "blocking_tool", "{}"),
            vec![finish(FinishReason::ToolCalls)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let started = Arc::new(Notify::new());
    let tool_started = started.clone();
    let saw_cancel = Arc::new(AtomicUsize::new(0));
    let saw = saw_cancel.clone();
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Shutdown);
    let mut options = RunOptions::new(model, vec![user("block")], persister.clone());
    options.tools = vec![FnTool::arc("blocking_tool", move |_, cancel| {
        let started = tool_started.clone();
        let saw = saw.clone();
        async move {
            started.notify_one();
            cancel.cancelled().await;
            saw.fetch_add(1, Ordering::SeqCst);
            Err(ToolError("cancelled".into()))
        }
    })];
    options.max_steps = 3;
    let error = run(options, cancel).await.unwrap_err();
    assert!(error.is_cancelled(), "{error}");
    assert!(persister.steps().is_empty(), "shutdown persists nothing");
}

#[tokio::test]
async fn provider_executed_result_stays_inline_after_its_call() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        vec![
            StreamEvent::ToolCall {
                id: "provider-tc-1".into(),
                tool_name: "web_search".into(),
                args: r#"{"query":"keel"}"#.into(),
                provider_executed: true,
            },
            StreamEvent::TextStart { id: "t".into() },
            StreamEvent::TextDelta {
                id: "t".into(),
                delta: "searching and reading".into(),
            },
            StreamEvent::ToolResult {
                id: "provider-tc-1".into(),
                tool_name: "web_search".into(),
                result: json!({"results": ["a"]}),
                is_error: false,
            },
            StreamEvent::ToolCall {
                id: "local-tc-1".into(),
                tool_name: "read_file".into(),
                args: "{}".into(),
                provider_executed: false,
            },
            finish(FinishReason::Stop),
        ],
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model, vec![user("search")], persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    run(options, Cancel::new()).await.unwrap();

    let step = &persister.steps()[0];
    let reply = assistant(step);
    let kinds: Vec<(&str, Option<&str>)> = reply
        .parts
        .iter()
        .map(|p| match &p.kind {
            PartKind::ToolCall { .. } => ("call", p.tool_call_id()),
            PartKind::ToolResult { .. } => ("result", p.tool_call_id()),
            PartKind::Text { .. } => ("text", None),
            _ => ("other", None),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("call", Some("provider-tc-1")),
            ("result", Some("provider-tc-1")),
            ("text", None),
            ("call", Some("local-tc-1")),
        ]
    );
    let results = tool_results(step);
    assert_eq!(
        results.len(),
        1,
        "only the local result goes to the tool message"
    );
    assert_eq!(results[0].0, "local-tc-1");
}

#[tokio::test]
async fn interrupted_during_tool_execution_persists_text_reasoning_call_and_error_result() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        vec![
            StreamEvent::ReasoningStart {
                id: "r".into(),
                metadata: None,
            },
            StreamEvent::ReasoningDelta {
                id: "r".into(),
                delta: "thinking it over".into(),
                metadata: Some(json!({"signature": "partial"})),
            },
            StreamEvent::ReasoningEnd {
                id: "r".into(),
                metadata: Some(json!({"signature": "sig-final"})),
            },
            StreamEvent::TextStart { id: "t".into() },
            StreamEvent::TextDelta {
                id: "t".into(),
                delta: "let me check".into(),
            },
            StreamEvent::TextEnd { id: "t".into() },
            StreamEvent::ToolCall {
                id: "slow-1".into(),
                tool_name: "slow".into(),
                args: "{}".into(),
                provider_executed: false,
            },
            finish(FinishReason::ToolCalls),
        ],
        Ending::Done,
    )]);
    let started = Arc::new(Notify::new());
    let tool_started = started.clone();
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Interrupted);
    let mut options = RunOptions::new(model, vec![user("go")], persister.clone());
    options.tools = vec![FnTool::arc("slow", move |_, cancel| {
        let started = tool_started.clone();
        async move {
            started.notify_one();
            cancel.cancelled().await;
            Err(ToolError("stopped".into()))
        }
    })];
    options.max_steps = 3;
    assert_eq!(run(options, cancel).await.unwrap(), RunOutcome::Interrupted);

    assert_eq!(persister.cancelled_flags(), vec![false]);
    let step = &persister.steps()[0];
    let reply = assistant(step);
    assert_eq!(reply.text(), "let me check");
    assert!(reply.parts.iter().any(|p| matches!(&p.kind,
        PartKind::Reasoning { text, provider_metadata }
            if text == "thinking it over" && provider_metadata == &Some(json!({"signature": "sig-final"})))));
    assert!(
        reply
            .tool_calls()
            .any(|p| p.tool_call_id() == Some("slow-1"))
    );
    assert_eq!(
        tool_results(step),
        vec![("slow-1".to_owned(), json!(INTERRUPTED_RESULT), true)]
    );
}

#[tokio::test]
async fn persist_reporting_interrupted_falls_back_to_interrupt_safe_persist() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            text("t", "keep this text"),
            vec![finish(FinishReason::Stop)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let persister = RecordingPersister::answering(vec![PersistAnswer::Interrupted]);
    let options = RunOptions::new(model, vec![user("hi")], persister.clone());
    assert_eq!(
        run(options, Cancel::new()).await.unwrap(),
        RunOutcome::Interrupted
    );
    let steps = persister.steps();
    assert_eq!(steps.len(), 2, "persisted twice");
    assert!(!steps[0].interrupted);
    assert!(steps[1].interrupted);
    assert_eq!(assistant(&steps[1]).text(), "keep this text");
}

#[tokio::test]
async fn provider_surfacing_the_interrupt_itself_keeps_partial_text() {
    let started = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![Reply::Stream(
        vec![
            StreamEvent::TextStart { id: "t".into() },
            StreamEvent::TextDelta {
                id: "t".into(),
                delta: "half a sent".into(),
            },
        ],
        Ending::InterruptError(started.clone()),
    )]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Interrupted);
    let options = RunOptions::new(model, vec![user("hi")], persister.clone());
    assert_eq!(run(options, cancel).await.unwrap(), RunOutcome::Interrupted);
    assert_eq!(assistant(&persister.steps()[0]).text(), "half a sent");
}

#[tokio::test]
async fn stream_that_silently_ends_after_interrupt_keeps_partial_text() {
    let started = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![Reply::Stream(
        vec![
            StreamEvent::ReasoningDelta {
                id: "r".into(),
                delta: "hmm".into(),
                metadata: None,
            },
            StreamEvent::TextDelta {
                id: "t".into(),
                delta: "so far".into(),
            },
        ],
        Ending::Silent(started.clone()),
    )]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Interrupted);
    let options = RunOptions::new(model, vec![user("hi")], persister.clone());
    assert_eq!(run(options, cancel).await.unwrap(), RunOutcome::Interrupted);
    let steps = persister.steps();
    assert_eq!(steps.len(), 1);
    assert_eq!(assistant(&steps[0]).text(), "so far");
}

#[tokio::test]
async fn a_stream_that_hangs_is_abandoned_on_interrupt() {
    let started = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![Reply::Stream(
        text("t", "stuck here"),
        Ending::Hang(started.clone()),
    )]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Interrupted);
    let options = RunOptions::new(model, vec![user("hi")], persister.clone());
    assert_eq!(run(options, cancel).await.unwrap(), RunOutcome::Interrupted);
    assert_eq!(assistant(&persister.steps()[0]).text(), "stuck here");
}

#[tokio::test]
async fn shutdown_mid_stream_persists_nothing() {
    let started = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![Reply::Stream(
        text("t", "partial"),
        Ending::CancelledError(started.clone()),
    )]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Shutdown);
    let options = RunOptions::new(model, vec![user("hi")], persister.clone());
    assert!(run(options, cancel).await.unwrap_err().is_cancelled());
    assert!(persister.steps().is_empty());
}

#[tokio::test]
async fn concurrent_tools_with_one_panicking_both_get_results_in_call_order() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            tool_call("a", "boom", "{}"),
            tool_call("b", "fine", "{}"),
            vec![finish(FinishReason::ToolCalls)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    // Both tools wait for each other, proving they run concurrently.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let (b1, b2) = (barrier.clone(), barrier.clone());
    let mut options = RunOptions::new(model, vec![user("go")], persister.clone());
    options.tools = vec![
        FnTool::arc("boom", move |_, _| {
            let b = b1.clone();
            async move {
                b.wait().await;
                panic!("kaboom");
            }
        }),
        FnTool::arc("fine", move |_, _| {
            let b = b2.clone();
            async move {
                b.wait().await;
                Ok(ToolOutput::Json(json!({"ok": true})))
            }
        }),
    ];
    run(options, Cancel::new()).await.unwrap();
    let results = tool_results(&persister.steps()[0]);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].0, "a");
    assert_eq!(results[0].1, json!("tool panicked: kaboom"));
    assert!(results[0].2);
    assert_eq!(results[1], ("b".to_owned(), json!({"ok": true}), false));
}

#[tokio::test]
async fn unknown_tool_gets_an_error_result() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            tool_call("x", "nope", "{}"),
            vec![finish(FinishReason::ToolCalls)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    let options = RunOptions::new(model, vec![user("go")], persister.clone());
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(
        tool_results(&persister.steps()[0]),
        vec![("x".to_owned(), json!("tool not found: nope"), true)]
    );
}

#[tokio::test]
async fn dynamic_tool_call_ends_the_run_with_pending_calls() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            tool_call("local", "read_file", "{}"),
            tool_call("client", "ask_user", r#"{"q":"?"}"#),
            vec![finish(FinishReason::ToolCalls)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model.clone(), vec![user("go")], persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.dynamic_tools = vec![ToolDefinition::function("ask_user", "ask", json!({}))];
    options.max_steps = 5;
    let outcome = run(options, Cancel::new()).await.unwrap();

    let RunOutcome::PendingToolCalls(pending) = outcome else {
        panic!("expected pending calls, got {outcome:?}");
    };
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool_call_id, "client");
    assert_eq!(pending[0].args, r#"{"q":"?"}"#);
    assert_eq!(model.calls().len(), 1);
    assert_eq!(model.calls()[0].tools.len(), 2);
    let step = &persister.steps()[0];
    assert_eq!(step.pending_tool_calls, pending);
    assert_eq!(
        tool_results(step),
        vec![("local".to_owned(), json!("ok"), false)]
    );
}

#[tokio::test]
async fn context_limit_is_discovered_in_nested_provider_metadata() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        vec![
            StreamEvent::TextDelta {
                id: "t".into(),
                delta: "hi".into(),
            },
            StreamEvent::Finish {
                reason: FinishReason::Stop,
                usage: Default::default(),
                provider_metadata: Some(
                    json!({"openrouter": {"model": {"contextWindow": 200000}}}),
                ),
            },
        ],
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model, vec![user("hi")], persister.clone());
    options.context_limit_fallback = Some(4096);
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(persister.steps()[0].context_limit, Some(200000));
}

#[tokio::test]
async fn failing_interrupted_persist_reaches_the_error_hook() {
    let started = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![Reply::Stream(
        text("t", "x"),
        Ending::Silent(started.clone()),
    )]);
    let persister = RecordingPersister::answering(vec![PersistAnswer::Fail("disk full")]);
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Interrupted);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook_seen = seen.clone();
    let mut options = RunOptions::new(model, vec![user("hi")], persister);
    options.on_persist_error = Some(Arc::new(move |e| {
        hook_seen.lock().unwrap().push(e.to_string());
    }));
    assert_eq!(run(options, cancel).await.unwrap(), RunOutcome::Interrupted);
    assert_eq!(*seen.lock().unwrap(), vec!["disk full".to_owned()]);
}

#[tokio::test]
async fn deltas_are_published_as_they_arrive() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            text("t", "hello"),
            tool_call("c", "read_file", r#"{"p":1}"#),
            vec![finish(FinishReason::Stop)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let sink = Arc::new(RecordingSink::default());
    let mut options = RunOptions::new(model, vec![user("hi")], RecordingPersister::new());
    options.sink = sink.clone();
    options.tools = vec![FnTool::noop("read_file")];
    run(options, Cancel::new()).await.unwrap();
    let events = sink.events();
    assert_eq!(
        events[0],
        LiveEvent::TextDelta {
            delta: "hello".into()
        }
    );
    assert!(
        matches!(&events[1], LiveEvent::ToolCallDelta { tool_name, args_delta, .. }
        if tool_name == "read_file" && args_delta == r#"{"p":1}"#)
    );
    assert!(matches!(&events[2], LiveEvent::ToolCall { tool_call_id, .. } if tool_call_id == "c"));
}

#[tokio::test]
async fn max_steps_below_one_means_one_step() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            [
                tool_call("a", "read_file", "{}"),
                vec![finish(FinishReason::ToolCalls)],
            ]
            .concat(),
            Ending::Done,
        ),
        Reply::Stream(text("t", "never"), Ending::Done),
    ]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model.clone(), vec![user("go")], persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.max_steps = 0;
    assert_eq!(
        run(options, Cancel::new()).await.unwrap(),
        RunOutcome::Completed { steps: 1 }
    );
    assert_eq!(model.calls().len(), 1);
}

#[tokio::test]
async fn a_call_cut_by_the_output_limit_is_answered_with_an_error_not_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let tool = FnTool::arc("write_file", move |_, _| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::Text("written".into()))
        }
    });
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            tool_call("c1", "write_file", r#"{"path": "a.txt", "content": "lo"#),
            vec![finish(FinishReason::Length)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model, vec![user("write")], persister.clone());
    options.tools = vec![tool];
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "never run with invalid JSON"
    );
    let steps = persister.steps();
    let results = tool_results(&steps[0]);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, "c1");
    assert!(results[0].2, "an error result");
    assert!(
        results[0]
            .1
            .to_string()
            .contains("not a complete JSON object")
    );
}

#[tokio::test]
async fn an_interrupted_provider_run_call_gets_no_local_result() {
    let started = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![Reply::Stream(
        vec![
            StreamEvent::ToolInputStart {
                id: "srvtoolu_1".into(),
                tool_name: "web_search".into(),
                provider_executed: true,
            },
            StreamEvent::ToolCall {
                id: "srvtoolu_1".into(),
                tool_name: "web_search".into(),
                args: "{\"query\":\"keel\"}".into(),
                provider_executed: true,
            },
        ],
        Ending::InterruptError(started.clone()),
    )]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    interrupt_when(started, &cancel, CancelCause::Interrupted);
    let options = RunOptions::new(model, vec![user("search")], persister.clone());
    assert_eq!(run(options, cancel).await.unwrap(), RunOutcome::Interrupted);
    let step = &persister.steps()[0];
    assert!(tool_results(step).is_empty(), "{:?}", step.messages);
}

#[tokio::test]
async fn a_paused_turn_is_carried_on_with_its_content_sent_back_as_the_last_message() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            [
                text("t", "Searching the web"),
                vec![finish(FinishReason::PauseTurn)],
            ]
            .concat(),
            Ending::Done,
        ),
        Reply::Stream(
            [text("t", "Found it."), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model.clone(), vec![user("look it up")], persister.clone());
    options.max_steps = 5;
    assert_eq!(
        run(options, Cancel::new()).await.unwrap(),
        RunOutcome::Completed { steps: 2 }
    );
    let calls = model.calls();
    assert_eq!(calls.len(), 2, "the paused turn is carried on, not ended");
    assert!(!calls[0].options.paused_turn);
    let second = &calls[1];
    assert!(second.options.paused_turn);
    let last = second.messages.last().unwrap();
    assert_eq!(
        (last.role, last.text()),
        (Role::Assistant, "Searching the web".to_owned())
    );
    let steps = persister.steps();
    assert_eq!(assistant(&steps[1]).text(), "Found it.");
}

#[tokio::test]
async fn a_run_resumed_after_a_paused_turn_carries_it_on_from_the_first_call() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [text("t", "Found it."), vec![finish(FinishReason::Stop)]].concat(),
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    let history = vec![user("look it up"), Message::assistant("Searching the web")];
    let mut options = RunOptions::new(model.clone(), history, persister.clone());
    options.paused_turn = true;
    assert_eq!(
        run(options, Cancel::new()).await.unwrap(),
        RunOutcome::Completed { steps: 1 }
    );
    let calls = model.calls();
    assert!(calls[0].options.paused_turn);
    assert_eq!(
        calls[0].messages.last().map(|m| (m.role, m.text())),
        Some((Role::Assistant, "Searching the web".to_owned()))
    );
}

#[tokio::test]
async fn a_refusal_is_published_and_stored_as_a_part_of_its_own() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        vec![
            StreamEvent::RefusalDelta {
                id: "r".into(),
                delta: "I can't ".into(),
            },
            StreamEvent::RefusalDelta {
                id: "r".into(),
                delta: "help with that.".into(),
            },
            finish(FinishReason::Stop),
        ],
        Ending::Done,
    )]);
    let persister = RecordingPersister::new();
    let sink = Arc::new(RecordingSink::default());
    let mut options = RunOptions::new(model, vec![user("hi")], persister.clone());
    options.sink = sink.clone();
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(
        sink.events(),
        vec![
            LiveEvent::RefusalDelta {
                delta: "I can't ".into()
            },
            LiveEvent::RefusalDelta {
                delta: "help with that.".into()
            },
        ]
    );
    let steps = persister.steps();
    let parts: Vec<&PartKind> = assistant(&steps[0]).parts.iter().map(|p| &p.kind).collect();
    assert_eq!(
        parts,
        vec![&PartKind::Refusal {
            text: "I can't help with that.".into()
        }]
    );
}
