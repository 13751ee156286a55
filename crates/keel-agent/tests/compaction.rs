//! Context compaction in the loop: each trigger, the end of a run, overflow, and interrupts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use keel_agent::compaction::{SUMMARY_INSTRUCTION, SUMMARY_PREFIX, summary_message};
use keel_agent::{
    Compaction, CompactionHooks, PersistError, RunError, RunOptions, RunOutcome, SummaryRecord, run,
};
use keel_core::{
    Cancel, CancelCause, ErrorKind, FinishReason, Message, Role, StreamEvent, ToolChoice,
    ToolDefinition, Usage,
};
use support::*;
use tokio::sync::Notify;

/// Records summaries and answers with the summary plus the messages it was told to carry.
#[derive(Default)]
struct RecordingHooks {
    summaries: Mutex<Vec<SummaryRecord>>,
    carried: Vec<Message>,
}

impl RecordingHooks {
    fn summaries(&self) -> Vec<SummaryRecord> {
        self.summaries.lock().unwrap().clone()
    }
}

#[async_trait]
impl CompactionHooks for RecordingHooks {
    async fn commit_summary(&self, summary: SummaryRecord) -> Result<Vec<Message>, PersistError> {
        let mut history = vec![summary_message(&summary.text)];
        history.extend(self.carried.iter().cloned());
        self.summaries.lock().unwrap().push(summary);
        Ok(history)
    }
}

fn finish_using(reason: FinishReason, input_tokens: u64) -> StreamEvent {
    StreamEvent::Finish {
        reason,
        usage: Usage {
            input_tokens,
            output_tokens: 5,
            ..Usage::default()
        },
        provider_metadata: None,
    }
}

fn reply_text(body: &str, input_tokens: u64) -> Reply {
    Reply::Stream(
        [
            text("t", body),
            vec![finish_using(FinishReason::Stop, input_tokens)],
        ]
        .concat(),
        Ending::Done,
    )
}

fn reply_tool(id: &str, name: &str, input_tokens: u64) -> Reply {
    Reply::Stream(
        [
            tool_call(id, name, "{}"),
            vec![finish_using(FinishReason::ToolCalls, input_tokens)],
        ]
        .concat(),
        Ending::Done,
    )
}

fn summary(body: &str) -> Reply {
    reply_text(body, 10)
}

/// Options with a 100-token context and the default threshold (compact at 80).
fn compacting(
    model: Arc<ScriptedModel>,
    hooks: Arc<RecordingHooks>,
) -> (RunOptions, Arc<RecordingPersister>) {
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model, vec![user("build it")], persister.clone());
    options.tools = vec![FnTool::noop("read_file")];
    options.max_steps = 5;
    options.context_limit_fallback = Some(100);
    options.compaction = Some(Compaction {
        threshold: keel_agent::compaction::DEFAULT_THRESHOLD,
        hooks,
    });
    (options, persister)
}

fn is_summary_request(call: &keel_core::ModelCall) -> bool {
    call.messages.last().map(Message::text).as_deref() == Some(SUMMARY_INSTRUCTION)
}

fn starts_from_summary(call: &keel_core::ModelCall, body: &str) -> bool {
    call.messages.first().map(Message::text) == Some(format!("{SUMMARY_PREFIX}\n\n{body}"))
}

#[tokio::test(start_paused = true)]
async fn compacts_inline_after_a_step_over_the_threshold() {
    let model = ScriptedModel::new(vec![
        reply_tool("c1", "read_file", 90),
        summary("SUM-1"),
        reply_text("done", 20),
    ]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, persister) = compacting(model.clone(), hooks.clone());

    let outcome = run(options, Cancel::new()).await.unwrap();

    assert_eq!(outcome, RunOutcome::Completed { steps: 2 });
    let calls = model.calls();
    assert_eq!(calls.len(), 3);
    assert!(is_summary_request(&calls[1]));
    assert_eq!(calls[1].options.tool_choice, ToolChoice::None);
    assert_eq!(calls[1].tools.len(), 1, "tools stay defined");
    // The summary saw the whole history, including the tool step.
    assert!(calls[1].messages.iter().any(|m| m.role == Role::Tool));
    assert_eq!(calls[2].messages.len(), 1);
    assert!(starts_from_summary(&calls[2], "SUM-1"));
    assert_eq!(calls[2].options.tool_choice, ToolChoice::Auto);
    let summaries = hooks.summaries();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].text, "SUM-1");
    assert_eq!(summaries[0].context_limit, Some(100));
    assert_eq!(persister.steps().len(), 2, "the summary is not a step");
}

#[tokio::test(start_paused = true)]
async fn below_the_threshold_or_without_a_limit_nothing_is_compacted() {
    let model = ScriptedModel::new(vec![reply_text("done", 79)]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, _) = compacting(model.clone(), hooks.clone());
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(model.calls().len(), 1);

    let model = ScriptedModel::new(vec![reply_text("done", 1_000_000)]);
    let (mut options, _) = compacting(model.clone(), hooks.clone());
    options.context_limit_fallback = None;
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(model.calls().len(), 1);
    assert!(hooks.summaries().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_final_reply_over_the_threshold_is_summarised_and_the_run_ends() {
    let model = ScriptedModel::new(vec![
        reply_text("the answer", 85),
        summary("SUM-1"),
        reply_text("an answer to the summary", 15),
    ]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, persister) = compacting(model.clone(), hooks.clone());

    let outcome = run(options, Cancel::new()).await.unwrap();

    // The summary is not a message to answer: the reply the user asked for is the only one.
    assert_eq!(outcome, RunOutcome::Completed { steps: 1 });
    let calls = model.calls();
    assert_eq!(calls.len(), 2);
    assert!(is_summary_request(&calls[1]));
    assert_eq!(hooks.summaries().len(), 1);
    assert_eq!(persister.steps().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_reply_cut_at_its_output_limit_over_the_threshold_also_ends_the_run() {
    let cut = Reply::Stream(
        [
            text("t", "half an ans"),
            vec![finish_using(FinishReason::Length, 85)],
        ]
        .concat(),
        Ending::Done,
    );
    let model = ScriptedModel::new(vec![cut, summary("SUM-1"), reply_text("more", 15)]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, _) = compacting(model.clone(), hooks.clone());

    let outcome = run(options, Cancel::new()).await.unwrap();

    // As without a compaction: a cut reply is the run's last step.
    assert_eq!(outcome, RunOutcome::Completed { steps: 1 });
    assert_eq!(model.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_early_exit_with_pending_client_tools_compacts_first() {
    let model = ScriptedModel::new(vec![reply_tool("c1", "ask_user", 95), summary("SUM-1")]);
    let hooks = Arc::new(RecordingHooks::default());
    let (mut options, persister) = compacting(model.clone(), hooks.clone());
    options.dynamic_tools = vec![ToolDefinition::function(
        "ask_user",
        "asks",
        serde_json::Value::Null,
    )];

    let outcome = run(options, Cancel::new()).await.unwrap();

    let RunOutcome::PendingToolCalls(pending) = outcome else {
        panic!("expected pending calls, got {outcome:?}");
    };
    assert_eq!(pending[0].tool_call_id, "c1");
    let calls = model.calls();
    assert_eq!(calls.len(), 2);
    assert!(is_summary_request(&calls[1]));
    // The pending call has no result yet: sending it would be an orphaned tool call, which
    // every provider rejects. The summary sees the history without it.
    assert!(
        calls[1]
            .messages
            .iter()
            .all(|m| m.tool_calls().next().is_none()),
        "{:?}",
        calls[1].messages
    );
    assert_eq!(
        calls[1].messages.len(),
        2,
        "the question and the instruction"
    );
    assert_eq!(hooks.summaries().len(), 1);
    assert_eq!(persister.steps().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_context_overflow_compacts_then_retries_the_step_once() {
    let model = ScriptedModel::new(vec![
        Reply::Fail(provider_error(
            ErrorKind::ContextOverflow,
            "prompt is too long: 210000 tokens > 200000 maximum",
        )),
        summary("SUM-1"),
        reply_text("done", 20),
    ]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, persister) = compacting(model.clone(), hooks.clone());

    let outcome = run(options, Cancel::new()).await.unwrap();

    assert_eq!(outcome, RunOutcome::Completed { steps: 1 });
    let calls = model.calls();
    assert_eq!(calls.len(), 3);
    assert!(is_summary_request(&calls[1]));
    assert!(starts_from_summary(&calls[2], "SUM-1"));
    let steps = persister.steps();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].step_index, 0);
}

#[tokio::test(start_paused = true)]
async fn a_second_overflow_after_compacting_fails_once() {
    let overflow = || {
        Reply::Fail(provider_error(
            ErrorKind::ContextOverflow,
            "prompt is too long",
        ))
    };
    let model = ScriptedModel::new(vec![overflow(), summary("SUM-1"), overflow()]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, _) = compacting(model.clone(), hooks.clone());

    let error = run(options, Cancel::new()).await.unwrap_err();

    assert!(
        error
            .to_string()
            .contains("still too long after compaction"),
        "{error}"
    );
    assert_eq!(model.calls().len(), 3);
    assert_eq!(hooks.summaries().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn max_steps_bounds_the_whole_run_across_compactions() {
    let model = ScriptedModel::new(vec![
        reply_tool("c0", "read_file", 90),
        summary("SUM-0"),
        reply_tool("c1", "read_file", 10),
        reply_tool("c2", "read_file", 10),
        reply_text("never asked", 10),
    ]);
    let hooks = Arc::new(RecordingHooks::default());
    let (mut options, persister) = compacting(model.clone(), hooks.clone());
    options.max_steps = 3;

    let outcome = run(options, Cancel::new()).await.unwrap();

    // A step, a summary, and two steps after it: three steps in all.
    assert_eq!(outcome, RunOutcome::Completed { steps: 3 });
    assert_eq!(model.calls().len(), 4);
    let indexes: Vec<usize> = persister.steps().iter().map(|s| s.step_index).collect();
    assert_eq!(indexes, [0, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn still_over_the_limit_after_compacting_fails_once_with_a_clear_error() {
    let model = ScriptedModel::new(vec![
        reply_tool("c1", "read_file", 90),
        summary("SUM-1"),
        reply_tool("c2", "read_file", 95),
        summary("never requested"),
    ]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, persister) = compacting(model.clone(), hooks.clone());

    let error = run(options, Cancel::new()).await.unwrap_err();

    assert!(
        matches!(
            error,
            RunError::ContextStillTooLong {
                tokens: 95,
                limit: 100
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "the conversation is still too long after compaction (95 tokens of a 100-token context)"
    );
    assert_eq!(model.calls().len(), 3, "no second summary");
    assert_eq!(hooks.summaries().len(), 1);
    assert_eq!(persister.steps().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_user_message_survives_compaction() {
    let model = ScriptedModel::new(vec![
        reply_tool("c1", "read_file", 90),
        summary("SUM-1"),
        reply_text("done", 20),
    ]);
    let hooks = Arc::new(RecordingHooks {
        carried: vec![user("and also update the docs")],
        ..RecordingHooks::default()
    });
    let (options, _) = compacting(model.clone(), hooks.clone());

    run(options, Cancel::new()).await.unwrap();

    let calls = model.calls();
    let after: Vec<String> = calls[2].messages.iter().map(Message::text).collect();
    assert_eq!(after.len(), 2);
    assert!(after[0].starts_with(SUMMARY_PREFIX));
    assert_eq!(after[1], "and also update the docs");
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_during_summarisation_commits_nothing() {
    let started = Arc::new(Notify::new());
    let model = ScriptedModel::new(vec![
        reply_text("answer", 90),
        Reply::Stream(
            text("s", "half a summ"),
            Ending::CancelledError(started.clone()),
        ),
    ]);
    let hooks = Arc::new(RecordingHooks::default());
    let (options, persister) = compacting(model.clone(), hooks.clone());
    let cancel = Cancel::new();
    let interrupter = cancel.clone();
    tokio::spawn(async move {
        started.notified().await;
        interrupter.cancel(CancelCause::Interrupted);
    });

    let outcome = run(options, cancel).await.unwrap();

    assert_eq!(outcome, RunOutcome::Interrupted);
    assert!(hooks.summaries().is_empty(), "nothing committed");
    let steps = persister.steps();
    assert_eq!(
        steps.len(),
        1,
        "the partial summary is not persisted as a step"
    );
    assert!(!steps[0].interrupted);
    assert_eq!(model.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_requested_compaction_only_summarises() {
    let model = ScriptedModel::new(vec![summary("SUM-1")]);
    let hooks = Arc::new(RecordingHooks::default());
    let (mut options, persister) = compacting(model.clone(), hooks.clone());
    options.compact_only = true;

    let outcome = run(options, Cancel::new()).await.unwrap();

    assert_eq!(outcome, RunOutcome::Completed { steps: 0 });
    assert_eq!(model.calls().len(), 1);
    assert!(is_summary_request(&model.calls()[0]));
    assert_eq!(hooks.summaries().len(), 1);
    assert!(persister.steps().is_empty());
}
