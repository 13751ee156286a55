//! OpenAI Responses chain mode: healing a broken `previous_response_id` chain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use keel_agent::{ChainHooks, RunOptions, RunOutcome, run};
use keel_core::{Cancel, ErrorKind, FinishReason, Message};
use support::*;

const CHAIN_BROKEN: &str = "Previous response with id 'resp_poisoned' not found.";

fn chain_broken() -> Reply {
    Reply::Fail(provider_error(ErrorKind::ChainBroken, CHAIN_BROKEN))
}

fn finishing() -> Reply {
    Reply::Stream(
        [text("t", "ok"), vec![finish(FinishReason::Stop)]].concat(),
        Ending::Done,
    )
}

fn reloaded_history() -> Vec<Message> {
    vec![
        Message::system("sys"),
        user("hello"),
        Message::assistant("hi"),
        user("follow up"),
    ]
}

fn chain_filtered() -> Vec<Message> {
    vec![Message::system("sys"), user("follow up")]
}

struct Counters {
    disable: Arc<AtomicUsize>,
    reload: Arc<AtomicUsize>,
}

fn hooks(
    reload_result: Result<Vec<Message>, String>,
    with_disable: bool,
) -> (ChainHooks, Counters) {
    let disable = Arc::new(AtomicUsize::new(0));
    let reload = Arc::new(AtomicUsize::new(0));
    let (d, r) = (disable.clone(), reload.clone());
    let hooks = ChainHooks {
        disable_chain_mode: with_disable.then(|| {
            Arc::new(move || {
                d.fetch_add(1, Ordering::SeqCst);
            }) as Arc<dyn Fn() + Send + Sync>
        }),
        reload_history: Some(Arc::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
            let result = reload_result.clone();
            async move { result }.boxed()
        })),
    };
    (hooks, Counters { disable, reload })
}

fn chained_options(model: Arc<ScriptedModel>, messages: Vec<Message>) -> RunOptions {
    let mut options = RunOptions::new(model, messages, RecordingPersister::new());
    options.call_options.previous_response_id = Some("resp_poisoned".into());
    options.call_options.store = true;
    options.context_limit_fallback = Some(4096);
    options.jitter_seed = Some(1);
    options
}

#[tokio::test(start_paused = true)]
async fn chain_broken_recovers_with_the_full_reloaded_history() {
    let model = ScriptedModel::new(vec![chain_broken(), finishing()]);
    let mut options = chained_options(model.clone(), chain_filtered());
    let (hooks, counters) = hooks(Ok(reloaded_history()), true);
    options.chain = hooks;
    run(options, Cancel::new()).await.unwrap();

    let calls = model.calls();
    assert_eq!(calls.len(), 2, "one failure, one success");
    assert_eq!(counters.disable.load(Ordering::SeqCst), 1);
    assert_eq!(counters.reload.load(Ordering::SeqCst), 1);
    assert_eq!(
        calls[0].options.previous_response_id.as_deref(),
        Some("resp_poisoned")
    );
    assert_eq!(calls[1].options.previous_response_id, None);
    assert_eq!(calls[1].messages, reloaded_history());
}

#[tokio::test(start_paused = true)]
async fn chain_broken_recovery_runs_the_message_preparation_hook_on_reloaded_history() {
    let model = ScriptedModel::new(vec![chain_broken(), finishing()]);
    let mut options = chained_options(model.clone(), chain_filtered());
    options.chain = hooks(Ok(reloaded_history()), true).0;
    options.prepare_messages = Some(Arc::new(|messages: &mut Vec<Message>| {
        messages.insert(0, Message::system("prepared"));
    }));
    run(options, Cancel::new()).await.unwrap();
    let second = &model.calls()[1].messages;
    assert_eq!(second.len(), reloaded_history().len() + 1);
    assert_eq!(second[0].text(), "prepared");
    assert_eq!(second[4].text(), "follow up");
}

#[tokio::test(start_paused = true)]
async fn chain_broken_recovery_applies_provider_prompt_preparation() {
    let model = ScriptedModel::marking(vec![chain_broken(), finishing()]);
    let mut options = chained_options(model.clone(), chain_filtered());
    options.chain = hooks(Ok(reloaded_history()), true).0;
    run(options, Cancel::new()).await.unwrap();
    let second = &model.calls()[1].messages;
    assert_eq!(second.len(), 4);
    assert!(
        second[3].cache_breakpoint,
        "provider preparation ran on the reloaded prompt"
    );
    assert!(!second[0].cache_breakpoint);
}

#[tokio::test(start_paused = true)]
async fn chain_broken_reload_without_disable_hook_still_recovers() {
    let model = ScriptedModel::new(vec![chain_broken(), finishing()]);
    let mut options = chained_options(model.clone(), chain_filtered());
    let (hooks, counters) = hooks(Ok(reloaded_history()), false);
    options.chain = hooks;
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(counters.reload.load(Ordering::SeqCst), 1);
    assert_eq!(model.calls()[1].messages, reloaded_history());
    assert_eq!(model.calls()[1].options.previous_response_id, None);
}

#[tokio::test(start_paused = true)]
async fn chain_broken_composes_with_leaving_chain_mode_after_the_first_step() {
    let model = ScriptedModel::new(vec![
        chain_broken(),
        Reply::Stream(
            [
                tool_call("tc", "read_file", "{}"),
                vec![finish(FinishReason::ToolCalls)],
            ]
            .concat(),
            Ending::Done,
        ),
        finishing(),
    ]);
    let mut options = chained_options(model.clone(), vec![user("hi")]);
    options.tools = vec![FnTool::noop("read_file")];
    options.max_steps = 3;
    options.chain = hooks(Ok(vec![user("hi")]), true).0;
    assert_eq!(
        run(options, Cancel::new()).await.unwrap(),
        RunOutcome::Completed { steps: 2 }
    );
    let calls = model.calls();
    assert_eq!(
        calls.len(),
        3,
        "failure, recovered tool step, follow-up step"
    );
    for call in &calls[1..] {
        assert_eq!(call.options.previous_response_id, None);
    }
}

#[tokio::test(start_paused = true)]
async fn chain_broken_reload_failure_still_clears_the_chain() {
    let model = ScriptedModel::new(vec![chain_broken(), finishing()]);
    let mut options = chained_options(model.clone(), chain_filtered());
    let (hooks, counters) = hooks(Err("database unavailable".into()), true);
    options.chain = hooks;
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(counters.disable.load(Ordering::SeqCst), 1);
    let second = &model.calls()[1];
    assert_eq!(second.options.previous_response_id, None);
    assert_eq!(
        second.messages,
        chain_filtered(),
        "retried with the prompt at hand"
    );
}

#[tokio::test(start_paused = true)]
async fn chain_broken_without_chain_mode_is_a_harmless_retry() {
    let model = ScriptedModel::new(vec![chain_broken(), finishing()]);
    let options = RunOptions::new(model.clone(), vec![user("hi")], RecordingPersister::new());
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(model.calls().len(), 2);
    assert_eq!(model.calls()[1].messages, vec![user("hi")]);
}

#[tokio::test(start_paused = true)]
async fn other_retryable_errors_leave_chain_state_alone() {
    let model = ScriptedModel::new(vec![
        Reply::Fail(provider_error(ErrorKind::Server, "503")),
        finishing(),
    ]);
    let mut options = chained_options(model.clone(), chain_filtered());
    let (hooks, counters) = hooks(Ok(reloaded_history()), true);
    options.chain = hooks;
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(counters.disable.load(Ordering::SeqCst), 0);
    assert_eq!(counters.reload.load(Ordering::SeqCst), 0);
    let second = &model.calls()[1];
    assert_eq!(
        second.options.previous_response_id.as_deref(),
        Some("resp_poisoned")
    );
    assert_eq!(second.messages, chain_filtered());
}

fn answered_with_id(id: &str) -> Reply {
    Reply::Stream(
        [
            vec![keel_core::StreamEvent::ResponseId { id: id.into() }],
            text("t", "ok"),
            vec![finish(FinishReason::Stop)],
        ]
        .concat(),
        Ending::Done,
    )
}

#[tokio::test(start_paused = true)]
async fn a_step_finished_in_one_attempt_records_its_response_id() {
    let model = ScriptedModel::new(vec![answered_with_id("resp_1")]);
    let persister = RecordingPersister::new();
    let options = RunOptions::new(model, vec![user("hi")], persister.clone());
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(
        persister.steps()[0].provider_response_id.as_deref(),
        Some("resp_1")
    );
}

#[tokio::test(start_paused = true)]
async fn a_retried_step_records_no_response_id_to_chain_onto() {
    let model = ScriptedModel::new(vec![
        Reply::Fail(provider_error(ErrorKind::Server, "503")),
        answered_with_id("resp_2"),
    ]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model, vec![user("hi")], persister.clone());
    options.jitter_seed = Some(1);
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(persister.steps()[0].provider_response_id, None);
}

#[tokio::test(start_paused = true)]
async fn a_continued_step_records_no_response_id_to_chain_onto() {
    let cut = Reply::Stream(
        [
            vec![keel_core::StreamEvent::ResponseId {
                id: "resp_a".into(),
            }],
            text("t", "Hello wor"),
        ]
        .concat(),
        Ending::Fail(provider_error(ErrorKind::Connection, "reset")),
    );
    let model = ScriptedModel::new(vec![cut, answered_with_id("resp_b")]);
    let persister = RecordingPersister::new();
    let mut options = RunOptions::new(model, vec![user("hi")], persister.clone());
    options.jitter_seed = Some(1);
    run(options, Cancel::new()).await.unwrap();
    assert_eq!(persister.steps()[0].provider_response_id, None);
}
