//! Carrying on a reply the user stopped (`RunOptions::continue_reply`): the history ends in
//! the stopped reply, the step holds only what follows it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use keel_agent::{RunError, RunOptions, RunOutcome, run};
use keel_core::{Cancel, ErrorKind, FinishReason, Message, Role, StreamEvent};
use support::*;

const STOPPED: &str = "Once upon a time there ";

fn continuing(model: Arc<ScriptedModel>, persister: Arc<RecordingPersister>) -> RunOptions {
    let history = vec![user("tell me a story"), Message::assistant(STOPPED)];
    let mut options = RunOptions::new(model, history, persister);
    options.continue_reply = Some(STOPPED.to_owned());
    options.jitter_seed = Some(7);
    options
}

fn answering(text: &str) -> Reply {
    Reply::Stream(
        vec![
            StreamEvent::TextDelta {
                id: "t".into(),
                delta: text.into(),
            },
            finish(FinishReason::Stop),
        ],
        Ending::Done,
    )
}

fn persisted_text(persister: &RecordingPersister) -> Vec<String> {
    persister
        .steps()
        .iter()
        .flat_map(|s| s.messages.iter())
        .filter(|m| m.role == Role::Assistant)
        .map(Message::text)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_step_holds_only_the_continuation_of_the_stopped_reply() {
    let model = ScriptedModel::new(vec![answering(" was a fox who could count to ten.")]);
    let persister = RecordingPersister::new();
    let outcome = run(continuing(model.clone(), persister.clone()), Cancel::new())
        .await
        .unwrap();
    assert_eq!(outcome, RunOutcome::Completed { steps: 1 });
    assert_eq!(
        persisted_text(&persister),
        vec!["was a fox who could count to ten."],
        "the prefix is not repeated, and its trailing space is not doubled"
    );
    let calls = model.calls();
    assert_eq!(calls.len(), 1);
    let prompt = &calls[0].messages;
    assert_eq!(
        prompt.len(),
        2,
        "the stopped reply is the prompt's last turn"
    );
    assert_eq!(prompt[1].role, Role::Assistant);
    assert_eq!(prompt[1].text(), STOPPED);
    assert!(
        persister.steps()[0].provider_response_id.is_none(),
        "a continuation is never chained onto"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cut_continuation_is_recovered_as_one_assistant_turn() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            vec![StreamEvent::TextDelta {
                id: "t".into(),
                delta: "was a fox ".into(),
            }],
            Ending::Fail(provider_error(ErrorKind::Connection, "reset")),
        ),
        answering("who could count to ten."),
    ]);
    let persister = RecordingPersister::new();
    run(continuing(model.clone(), persister.clone()), Cancel::new())
        .await
        .unwrap();
    assert_eq!(
        persisted_text(&persister),
        vec!["was a fox who could count to ten."]
    );
    let retry = &model.calls()[1].messages;
    assert_eq!(
        retry.len(),
        2,
        "the recovered text extends the stopped turn"
    );
    assert_eq!(retry[1].text(), format!("{STOPPED}was a fox "));
}

#[tokio::test(start_paused = true)]
async fn a_model_that_starts_the_stopped_reply_over_fails_the_run() {
    let model = ScriptedModel::new(vec![answering(
        "Once upon a time there was a fox who could count.",
    )]);
    let persister = RecordingPersister::new();
    let error = run(continuing(model, persister.clone()), Cancel::new())
        .await
        .unwrap_err();
    let RunError::Provider(error) = error else {
        panic!("{error:?}");
    };
    assert_eq!(error.kind, ErrorKind::InvalidRequest);
    assert!(
        error.message.contains("started it over"),
        "{}",
        error.message
    );
    assert!(persister.steps().is_empty(), "nothing said twice");
}

#[tokio::test(start_paused = true)]
async fn later_steps_are_ordinary() {
    let model = ScriptedModel::new(vec![
        Reply::Stream(
            [
                tool_call("c1", "noop", "{}"),
                vec![finish(FinishReason::ToolCalls)],
            ]
            .concat(),
            Ending::Done,
        ),
        answering("Done."),
    ]);
    let persister = RecordingPersister::new();
    let mut options = continuing(model.clone(), persister.clone());
    options.tools = vec![FnTool::noop("noop")];
    options.max_steps = 4;
    run(options, Cancel::new()).await.unwrap();
    let calls = model.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1].messages.last().unwrap().role,
        Role::Tool,
        "the second step answers the tool, it does not continue anything"
    );
}
