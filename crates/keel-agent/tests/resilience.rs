//! Failures while streaming: retries, watchdogs, mid-stream recovery and checkpoints.
//!
//! Longer than most files: one test per failure and recovery plan, each with its script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use keel_agent::checkpoint::CheckpointError;
use keel_agent::snapshot::{CapturedCall, CapturedReasoning};
use keel_agent::{
    CheckpointStore, Checkpointing, LiveEvent, MemoryCheckpoints, RetryNotice, RunError,
    RunOptions, RunOutcome, StreamCheckpoint, ToolOutput, run,
};
use keel_core::{Cancel, CancelCause, ErrorKind, FinishReason, Role, StreamEvent};
use support::*;
use tokio::sync::Notify;

fn options(model: Arc<ScriptedModel>, persister: Arc<RecordingPersister>) -> RunOptions {
    let mut options = RunOptions::new(model, vec![user("hi")], persister);
    options.jitter_seed = Some(42);
    options
}

fn with_sink(options: &mut RunOptions) -> Arc<RecordingSink> {
    let sink = Arc::new(RecordingSink::default());
    options.sink = sink.clone();
    sink
}

fn final_text(persister: &RecordingPersister) -> String {
    persister
        .steps()
        .last()
        .unwrap()
        .messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .map(|m| m.text())
        .unwrap_or_default()
}

fn connection_reset() -> keel_core::ProviderError {
    provider_error(ErrorKind::Connection, "connection reset by peer")
}

#[tokio::test(start_paused = true)]
async fn r1_text_only_failure_continues_and_stitches_without_reset() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            vec![StreamEvent::TextDelta {
                id: "a".into(),
                delta: "Hello wor".into(),
            }],
            Ending::Fail(connection_reset()),
        ),
        Reply::Stream(
            vec![
                StreamEvent::TextStart { id: "b".into() },
                StreamEvent::TextDelta {
                    id: "b".into(),
                    delta: "ld!".into(),
                },
                finish(FinishReason::Stop),
            ],
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    let sink = with_sink(&mut options);
    assert_eq!(
        run(options, Cancel::new()).await.unwrap(),
        RunOutcome::Completed { steps: 1 }
    );

    let step = &persister.steps()[0];
    let reply = &step.messages[0];
    assert_eq!(reply.parts.len(), 1, "one stitched text part");
    assert_eq!(reply.text(), "Hello world!");
    let calls = model.calls();
    assert_eq!(calls.len(), 2);
    let retry_prompt = &calls[1].messages;
    assert_eq!(retry_prompt[1].role, Role::Assistant);
    assert_eq!(retry_prompt[1].text(), "Hello wor");
    assert_eq!(
        retry_prompt.len(),
        2,
        "the prompt ends in the prefix to continue"
    );
    let events = sink.events();
    assert!(!events.contains(&LiveEvent::StreamReset));
    let published: String = events
        .iter()
        .filter_map(|e| match e {
            LiveEvent::TextDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        published, "Hello world!",
        "nothing doubled, nothing missing"
    );
    assert!(events.iter().any(|e| matches!(
        e,
        LiveEvent::Retry {
            attempt: 2,
            kind: ErrorKind::Connection,
            ..
        }
    )));
}

#[tokio::test(start_paused = true)]
async fn r2_completed_call_synthesizes_tool_use_with_exactly_one_attempt() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            text("t", "Let me read both."),
            tool_call("done-1", "read_file", r#"{"path":"a"}"#),
            partial_call("partial-2", "read_file", r#"{"pa"#),
        ]
        .concat(),
        Ending::Fail(provider_error(
            ErrorKind::Server,
            "502 bad gateway mid-stream",
        )),
    )]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.tools = vec![FnTool::arc("read_file", |req, _| async move {
        Ok(ToolOutput::Text(format!("read {}", req.args)))
    })];
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();

    assert_eq!(model.calls().len(), 1, "no second request");
    let step = &persister.steps()[0];
    assert_eq!(step.finish_reason, FinishReason::ToolCalls);
    let assistant = &step.messages[0];
    let ids: Vec<_> = assistant
        .tool_calls()
        .filter_map(|p| p.tool_call_id())
        .collect();
    assert_eq!(ids, vec!["done-1"]);
    assert_eq!(step.messages[1].parts.len(), 1, "the completed call ran");
    assert!(sink.events().iter().any(|e| matches!(e,
        LiveEvent::ToolCallCancel { tool_call_id, .. } if tool_call_id == "partial-2")));
}

#[tokio::test(start_paused = true)]
async fn r3_text_and_partial_call_drops_the_call_and_continues() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            [
                vec![StreamEvent::TextDelta {
                    id: "t".into(),
                    delta: "I will check. ".into(),
                }],
                partial_call("p1", "read_file", r#"{"path":"ma"#),
            ]
            .concat(),
            Ending::Fail(connection_reset()),
        ),
        Reply::Stream(
            [text("u", "Done."), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();

    let events = sink.events();
    assert!(events.iter().any(
        |e| matches!(e, LiveEvent::ToolCallCancel { tool_call_id, .. } if tool_call_id == "p1")
    ));
    assert!(!events.contains(&LiveEvent::StreamReset));
    assert_eq!(final_text(&persister), "I will check. Done.");
    let step = &persister.steps()[0];
    assert_eq!(step.messages.len(), 1, "the dropped call left no trace");
    assert_eq!(step.messages[0].tool_calls().count(), 0);
}

#[tokio::test(start_paused = true)]
async fn r4_nothing_usable_resets_and_restarts() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            vec![StreamEvent::ReasoningDelta {
                id: "r".into(),
                delta: "pondering".into(),
                metadata: None,
            }],
            Ending::Fail(connection_reset()),
        ),
        Reply::Stream(
            [text("t", "fresh answer"), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();

    assert!(sink.events().contains(&LiveEvent::StreamReset));
    let step = &persister.steps()[0];
    assert_eq!(step.messages[0].text(), "fresh answer");
    assert_eq!(
        step.messages[0].parts.len(),
        1,
        "the voided reasoning is gone"
    );
    assert_eq!(
        model.calls()[1].messages.len(),
        1,
        "restart sends the plain prompt"
    );
}

#[tokio::test(start_paused = true)]
async fn recovery_budget_is_spent_after_three_attempts() {
    let failing = |n: &str| {
        Reply::Stream(
            vec![StreamEvent::TextDelta {
                id: n.into(),
                delta: format!("part {n} "),
            }],
            Ending::Fail(connection_reset()),
        )
    };
    let model = ScriptedModel::new(vec![failing("1"), failing("2"), failing("3"), failing("4")]);
    let persister = RecordingPersister::new();
    let error = run(options(model.clone(), persister.clone()), Cancel::new())
        .await
        .unwrap_err();
    let RunError::StreamInterrupted {
        cause,
        snapshot,
        attempts,
    } = error
    else {
        panic!("expected stream_interrupted, got {error:?}");
    };
    assert_eq!(attempts, 3);
    assert_eq!(model.calls().len(), 3);
    assert_eq!(cause.kind, ErrorKind::Connection);
    assert_eq!(snapshot.partial_text, "part 1 part 2 part 3 ");
    assert!(persister.steps().is_empty());
}

#[tokio::test(start_paused = true)]
async fn idle_stall_is_recovered_on_paused_time() {
    let stalled = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            vec![StreamEvent::TextDelta {
                id: "t".into(),
                delta: "slow ".into(),
            }],
            Ending::Hang(stalled),
        ),
        Reply::Stream(
            [text("u", "but sure"), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    let notices = Arc::new(Mutex::new(Vec::<RetryNotice>::new()));
    let seen = notices.clone();
    options.on_retry = Some(Arc::new(move |n| seen.lock().unwrap().push(n.clone())));
    let started = tokio::time::Instant::now();
    run(options, Cancel::new()).await.unwrap();

    assert_eq!(final_text(&persister), "slow but sure");
    let notices = notices.lock().unwrap();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].kind, ErrorKind::IdleStall);
    assert!(started.elapsed() >= Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn startup_timeout_is_retried() {
    let never = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![
        Reply::Stream(vec![], Ending::Hang(never)),
        Reply::Stream(
            [text("t", "hello"), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.timeouts.startup = Duration::from_secs(5);
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(final_text(&persister), "hello");
    assert!(sink.events().iter().any(|e| matches!(
        e,
        LiveEvent::Retry {
            kind: ErrorKind::StartupTimeout,
            ..
        }
    )));
    assert!(!sink.events().contains(&LiveEvent::StreamReset));
}

#[tokio::test(start_paused = true)]
async fn keepalives_keep_a_silent_stream_alive_past_the_idle_limit() {
    // Content, then pings every 40 s for 10 minutes (idle limit 60 s), then the rest.
    let model = ScriptedModel::new(vec![Reply::Stream(
        text("t", "thinking..."),
        Ending::Pings {
            every: Duration::from_secs(40),
            count: 15,
            then: [text("u", " done"), vec![finish(FinishReason::Stop)]].concat(),
        },
    )]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.timeouts.idle = Duration::from_secs(60);
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(final_text(&persister), "thinking... done");
    assert!(
        !sink
            .events()
            .iter()
            .any(|e| matches!(e, LiveEvent::Retry { .. }))
    );
    assert_eq!(model.calls.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn keepalives_never_extend_the_startup_limit() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            vec![],
            Ending::Pings {
                every: Duration::from_secs(1),
                count: 1000,
                then: vec![],
            },
        ),
        Reply::Stream(
            [text("t", "hello"), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.timeouts.startup = Duration::from_secs(5);
    let sink = with_sink(&mut options);
    let started = tokio::time::Instant::now();
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(final_text(&persister), "hello");
    assert!(sink.events().iter().any(|e| matches!(
        e,
        LiveEvent::Retry {
            kind: ErrorKind::StartupTimeout,
            ..
        }
    )));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_longer_than_the_cap_fails_at_once_as_a_rate_limit() {
    let mut limited = provider_error(ErrorKind::RateLimit, "slow down");
    limited.status = Some(429);
    limited.retry_after = Some(Duration::MAX);
    let model = ScriptedModel::new(vec![Reply::Fail(limited)]);
    let persister = RecordingPersister::new();
    let started = tokio::time::Instant::now();
    let error = run(options(model.clone(), persister.clone()), Cancel::new())
        .await
        .unwrap_err();
    let RunError::Provider(error) = error else {
        panic!("{error:?}");
    };
    assert_eq!(error.kind, ErrorKind::RateLimit);
    assert!(
        error.message.contains("retry_max_delay_ms"),
        "{}",
        error.message
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_waits_for_retry_after() {
    let mut limited = provider_error(ErrorKind::RateLimit, "slow down");
    limited.status = Some(429);
    limited.retry_after = Some(Duration::from_secs(30));
    let model = ScriptedModel::new(vec![
        Reply::Fail(limited),
        Reply::Stream(
            [text("t", "ok"), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let persister = RecordingPersister::new();
    let started = tokio::time::Instant::now();
    run(options(model.clone(), persister.clone()), Cancel::new())
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(30), "{waited:?}");
    assert!(waited < Duration::from_secs(31), "{waited:?}");
    assert_eq!(model.calls().len(), 2);
    // The retry is recorded as the chat's state, as published.
    let retries = persister.retries();
    assert!(
        matches!(
            retries.as_slice(),
            [LiveEvent::Retry { attempt: 2, delay, kind: ErrorKind::RateLimit, .. }]
                if *delay == Duration::from_secs(30)
        ),
        "{retries:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_never_retried() {
    for kind in [
        ErrorKind::Auth,
        ErrorKind::InvalidRequest,
        ErrorKind::ContextOverflow,
        ErrorKind::ContentFilter,
    ] {
        let model = ScriptedModel::new(vec![Reply::Fail(provider_error(kind, "no"))]);
        let error = run(
            options(model.clone(), RecordingPersister::new()),
            Cancel::new(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&error, RunError::Provider(e) if e.kind == kind),
            "{error:?}"
        );
        assert_eq!(model.calls().len(), 1, "{kind}");
    }
    // A permanent error mid-stream does not recover either.
    let model = ScriptedModel::new(vec![Reply::Stream(
        text("t", "partial"),
        Ending::Fail(provider_error(ErrorKind::Auth, "key revoked")),
    )]);
    let error = run(
        options(model.clone(), RecordingPersister::new()),
        Cancel::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, RunError::Provider(_)));
    assert_eq!(model.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn pre_stream_retries_stop_at_max_attempts() {
    let replies = (0..10)
        .map(|_| Reply::Fail(provider_error(ErrorKind::Server, "503 service unavailable")))
        .collect();
    let model = ScriptedModel::new(replies);
    let mut options = options(model.clone(), RecordingPersister::new());
    options.retry.max_attempts = 4;
    let error = run(options, Cancel::new()).await.unwrap_err();
    assert!(matches!(error, RunError::Provider(e) if e.kind == ErrorKind::Server));
    assert_eq!(model.calls().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn truncated_tool_json_is_marked_incomplete_and_never_run() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [
            partial_call("cut", "write_file", r#"{"path":"x","content":"hal"#),
            vec![finish(FinishReason::ToolCalls)],
        ]
        .concat(),
        Ending::Done,
    )]);
    let ran = Arc::new(Mutex::new(0));
    let counter = ran.clone();
    let persister = RecordingPersister::new();
    let mut options = options(model, persister.clone());
    options.tools = vec![FnTool::arc("write_file", move |_, _| {
        *counter.lock().unwrap() += 1;
        async { Ok(ToolOutput::Text("written".into())) }
    })];
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(*ran.lock().unwrap(), 0);
    let step = &persister.steps()[0];
    let result = &step.messages[1].parts[0];
    assert!(matches!(
        &result.kind,
        keel_core::PartKind::ToolResult { is_error: true, .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn cancellation_before_the_stream_persists_nothing_and_calls_no_model() {
    let model = ScriptedModel::new(vec![]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    cancel.cancel(CancelCause::Interrupted);
    assert_eq!(
        run(options(model.clone(), persister.clone()), cancel)
            .await
            .unwrap(),
        RunOutcome::Interrupted
    );
    assert!(model.calls().is_empty());
    assert!(persister.steps().is_empty());
}

#[tokio::test(start_paused = true)]
async fn empty_stream_completes_with_an_empty_step() {
    let model = ScriptedModel::new(vec![Reply::Stream(vec![], Ending::Done)]);
    let persister = RecordingPersister::new();
    assert_eq!(
        run(options(model, persister.clone()), Cancel::new())
            .await
            .unwrap(),
        RunOutcome::Completed { steps: 1 }
    );
    assert!(persister.steps()[0].messages.is_empty());
}

#[tokio::test(start_paused = true)]
async fn interrupt_during_backoff_stops_after_one_attempt() {
    for cause in [CancelCause::Interrupted, CancelCause::Shutdown] {
        let model = ScriptedModel::new(vec![
            Reply::Fail(provider_error(ErrorKind::Overloaded, "overloaded")),
            Reply::Stream(text("t", "never"), Ending::Done),
        ]);
        let persister = RecordingPersister::new();
        let cancel = Cancel::new();
        let mut options = options(model.clone(), persister.clone());
        let hook_cancel = cancel.clone();
        options.on_retry = Some(Arc::new(move |_| hook_cancel.cancel(cause)));
        let result = run(options, cancel).await;
        assert_eq!(model.calls().len(), 1, "{cause:?}");
        match cause {
            CancelCause::Interrupted => assert_eq!(result.unwrap(), RunOutcome::Interrupted),
            CancelCause::Shutdown => assert!(result.unwrap_err().is_cancelled()),
        }
        assert!(persister.steps().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn interrupt_during_recovery_backoff_persists_the_partial_step() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(text("t", "what I had"), Ending::Fail(connection_reset())),
        Reply::Stream(text("u", "never"), Ending::Done),
    ]);
    let persister = RecordingPersister::new();
    let cancel = Cancel::new();
    let mut options = options(model.clone(), persister.clone());
    let hook_cancel = cancel.clone();
    options.on_retry = Some(Arc::new(move |_| {
        hook_cancel.cancel(CancelCause::Interrupted)
    }));
    assert_eq!(run(options, cancel).await.unwrap(), RunOutcome::Interrupted);
    let steps = persister.steps();
    assert_eq!(steps.len(), 1);
    assert!(steps[0].interrupted);
    assert_eq!(final_text(&persister), "what I had");
}

/// Records every checkpoint written, on top of an in-memory store.
#[derive(Default)]
struct RecordingCheckpoints {
    inner: MemoryCheckpoints,
    saved: Mutex<Vec<StreamCheckpoint>>,
}

#[async_trait]
impl CheckpointStore for RecordingCheckpoints {
    async fn save(&self, checkpoint: &StreamCheckpoint) -> Result<(), CheckpointError> {
        self.saved.lock().unwrap().push(checkpoint.clone());
        self.inner.save(checkpoint).await
    }
    async fn load(&self, chat_id: &str) -> Result<Option<StreamCheckpoint>, CheckpointError> {
        self.inner.load(chat_id).await
    }
    async fn delete(&self, chat_id: &str) -> Result<(), CheckpointError> {
        self.inner.delete(chat_id).await
    }
}

fn checkpointing(store: Arc<dyn CheckpointStore>) -> Checkpointing {
    Checkpointing {
        store,
        run_id: "run-1".into(),
        chat_id: "chat-1".into(),
        every: 4,
    }
}

#[tokio::test(start_paused = true)]
async fn checkpoint_is_flushed_on_mid_stream_failure_with_every_delta() {
    let deltas: Vec<StreamEvent> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|d| StreamEvent::TextDelta {
            id: "t".into(),
            delta: (*d).into(),
        })
        .collect();
    let model = ScriptedModel::new(vec![
        Reply::Stream(deltas, Ending::Fail(connection_reset())),
        Reply::Stream(
            [text("u", "g"), vec![finish(FinishReason::Stop)]].concat(),
            Ending::Done,
        ),
    ]);
    let store = Arc::new(RecordingCheckpoints::default());
    let persister = RecordingPersister::new();
    let mut options = options(model, persister.clone());
    options.checkpointing = Some(checkpointing(store.clone()));
    run(options, Cancel::new()).await.unwrap();

    let saved = store.saved.lock().unwrap().clone();
    assert_eq!(saved[0].partial_text, "abcd", "cadence of four deltas");
    assert_eq!(
        saved[1].partial_text, "abcdef",
        "flushed on failure with every delta"
    );
    assert_eq!(saved[1].model, "scripted-1");
    assert_eq!(final_text(&persister), "abcdefg");
    assert!(
        store.inner.get("chat-1").is_none(),
        "deleted when the step completed"
    );
}

#[tokio::test(start_paused = true)]
async fn resume_from_text_checkpoint_continues_and_deletes_it() {
    let model = ScriptedModel::new(vec![Reply::Stream(
        [text("t", " world"), vec![finish(FinishReason::Stop)]].concat(),
        Ending::Done,
    )]);
    let store = Arc::new(MemoryCheckpoints::default());
    store
        .save(&StreamCheckpoint {
            run_id: "old-run".into(),
            chat_id: "chat-1".into(),
            model: "scripted-1".into(),
            reasoning: vec![],
            partial_text: "Hello".into(),
            completed_calls: vec![],
            in_flight: None,
            refused: false,
            provider_calls: Vec::new(),
            saved_at: chrono::Utc::now(),
        })
        .await
        .unwrap();
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.checkpointing = Some(checkpointing(store.clone()));
    options.retry.max_recoveries = 0;
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();

    assert_eq!(final_text(&persister), "Hello world");
    let prompt = &model.calls()[0].messages;
    assert_eq!(prompt[1].text(), "Hello", "continuation injected");
    assert!(store.get("chat-1").is_none());
    assert_eq!(
        sink.events(),
        vec![
            LiveEvent::StreamReset,
            LiveEvent::TextDelta {
                delta: "Hello".into()
            },
            LiveEvent::TextDelta {
                delta: " world".into()
            }
        ],
        "clients' view of the step is reset to what it resumes from, then continues"
    );
}

#[tokio::test(start_paused = true)]
async fn resume_from_completed_tool_checkpoint_never_opens_a_stream() {
    let model = ScriptedModel::new(vec![]);
    let store = Arc::new(MemoryCheckpoints::default());
    store
        .save(&StreamCheckpoint {
            run_id: "old-run".into(),
            chat_id: "chat-1".into(),
            model: "scripted-1".into(),
            reasoning: vec![],
            partial_text: "Reading.".into(),
            completed_calls: vec![CapturedCall {
                tool_call_id: "c1".into(),
                tool_name: "read_file".into(),
                args: r#"{"path":"a"}"#.into(),
            }],
            in_flight: None,
            refused: false,
            provider_calls: Vec::new(),
            saved_at: chrono::Utc::now(),
        })
        .await
        .unwrap();
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.checkpointing = Some(checkpointing(store.clone()));
    run(options, Cancel::new()).await.unwrap();

    assert!(model.calls().is_empty(), "no stream was opened");
    let step = &persister.steps()[0];
    assert_eq!(step.messages[0].text(), "Reading.");
    assert_eq!(step.messages[1].parts[0].tool_call_id(), Some("c1"));
    assert!(store.get("chat-1").is_none());
}

fn tool_checkpoint(reasoning: Vec<CapturedReasoning>) -> StreamCheckpoint {
    StreamCheckpoint {
        run_id: "old-run".into(),
        chat_id: "chat-1".into(),
        model: "scripted-1".into(),
        reasoning,
        partial_text: String::new(),
        completed_calls: vec![CapturedCall {
            tool_call_id: "c1".into(),
            tool_name: "read_file".into(),
            args: r#"{"path":"a"}"#.into(),
        }],
        in_flight: None,
        refused: false,
        provider_calls: Vec::new(),
        saved_at: chrono::Utc::now(),
    }
}

fn signed_thinking() -> CapturedReasoning {
    CapturedReasoning {
        text: "I should read a".into(),
        provider_metadata: Some(serde_json::json!({"anthropic": {"signature": "sig-1"}})),
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumed_tool_step_sends_its_signed_reasoning_back_first() {
    let model = ScriptedModel::requiring_signed_reasoning(vec![]);
    let store = Arc::new(MemoryCheckpoints::default());
    store
        .save(&tool_checkpoint(vec![signed_thinking()]))
        .await
        .unwrap();
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.checkpointing = Some(checkpointing(store.clone()));
    options.max_steps = 1;
    run(options, Cancel::new()).await.unwrap();

    assert!(model.calls().is_empty(), "finished as a tool-use step");
    let assistant = &persister.steps()[0].messages[0];
    match &assistant.parts[0].kind {
        keel_core::PartKind::Reasoning {
            text,
            provider_metadata,
        } => {
            assert_eq!(text, "I should read a");
            assert_eq!(
                provider_metadata.as_ref().unwrap()["anthropic"]["signature"],
                "sig-1"
            );
        }
        other => panic!("the step starts with {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumed_tool_step_without_its_signature_restarts_instead_of_sending_it_unsigned() {
    let model = ScriptedModel::requiring_signed_reasoning(vec![Reply::Stream(
        [text("t", "fresh"), vec![finish(FinishReason::Stop)]].concat(),
        Ending::Done,
    )]);
    let store = Arc::new(MemoryCheckpoints::default());
    let unsigned = CapturedReasoning {
        text: "I should read a".into(),
        provider_metadata: None,
    };
    store.save(&tool_checkpoint(vec![unsigned])).await.unwrap();
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.checkpointing = Some(checkpointing(store.clone()));
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();

    assert_eq!(model.calls().len(), 1, "the step was streamed again");
    assert_eq!(final_text(&persister), "fresh");
    let steps = persister.steps();
    assert_eq!(steps.len(), 1);
    assert!(steps[0].messages[0].tool_calls().next().is_none());
    assert_eq!(sink.events()[0], LiveEvent::StreamReset);
}

fn cut_after(text_so_far: &str) -> Reply {
    Reply::Stream(
        vec![StreamEvent::TextDelta {
            id: "t".into(),
            delta: text_so_far.into(),
        }],
        Ending::Fail(connection_reset()),
    )
}

fn answering(text: &str) -> Reply {
    Reply::Stream(
        [
            vec![StreamEvent::TextDelta {
                id: "t2".into(),
                delta: text.into(),
            }],
            vec![finish(FinishReason::Stop)],
        ]
        .concat(),
        Ending::Done,
    )
}

#[tokio::test(start_paused = true)]
async fn a_continuation_that_restarts_the_reply_is_never_stitched_on() {
    let full = "The leaves fall, adding to the forest floor.";
    let model = ScriptedModel::new(vec![
        cut_after("The leaves fall, adding to the"),
        answering("The leaves fall, adding to the ground a layer of gold."),
        answering(full),
    ]);
    let persister = RecordingPersister::new();
    let mut options = options(model.clone(), persister.clone());
    let sink = with_sink(&mut options);
    run(options, Cancel::new()).await.unwrap();

    assert_eq!(final_text(&persister), full, "no stitched restart");
    let calls = model.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[2].messages.len(), 1, "the step from scratch");
    let events = sink.events();
    assert!(events.contains(&LiveEvent::StreamReset));
    assert!(
        !events.contains(&LiveEvent::TextDelta {
            delta: "The leaves fall, adding to the ground a layer of gold.".into()
        }),
        "the restarted continuation was never shown"
    );
}

#[tokio::test(start_paused = true)]
async fn a_continuation_that_brings_the_seam_whitespace_again_is_not_doubled() {
    let model = ScriptedModel::new(vec![
        cut_after("Hello "),
        answering(" world, and everyone in it."),
    ]);
    let persister = RecordingPersister::new();
    run(options(model, persister.clone()), Cancel::new())
        .await
        .unwrap();
    assert_eq!(final_text(&persister), "Hello world, and everyone in it.");
}

#[tokio::test(start_paused = true)]
async fn a_prefill_refused_after_another_call_made_the_switch_is_retried_by_instruction() {
    let refused = keel_core::ProviderError::new(
        ErrorKind::InvalidRequest,
        "This model does not support assistant message prefill. The conversation must end \
         with a user message.",
    );
    let model = ScriptedModel::prefilling(vec![
        cut_after("Hello "),
        Reply::Fail(refused),
        answering("world, and everyone in it."),
    ]);
    let persister = RecordingPersister::new();
    run(options(model.clone(), persister.clone()), Cancel::new())
        .await
        .unwrap();
    assert_eq!(final_text(&persister), "Hello world, and everyone in it.");
    let calls = model.calls();
    assert_eq!(
        calls.len(),
        3,
        "the refused continuation went again at once"
    );
    // The adapter builds the call by instruction once the model says it takes no prefill.
    assert!(!model.prefill.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(
        calls[1].messages, calls[2].messages,
        "the same continuation again"
    );
}
