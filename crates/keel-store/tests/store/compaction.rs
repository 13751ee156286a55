//! Compaction in the store: the summary boundary, the visible notice, the prompt history
//! after it, and requested compactions, on both backends.

use crate::common::*;
use keel_core::{ErrorKind, Role, SUMMARY_PREFIX, Usage};
use keel_store::{
    Busy, ChatStatus, MessageKind, NewSummary, Next, StoreError, Transition, transitions,
};

both_backends!(
    a_summary_becomes_the_prompt_boundary,
    unanswered_user_messages_survive_a_summary,
    requested_compaction_runs_only_on_idle_chats,
    a_summary_needs_the_lease,
    an_edit_supersedes_a_requested_compaction,
    a_summary_leaves_the_step_in_progress_its_tool_records,
);

fn summary(text: &str) -> NewSummary {
    NewSummary {
        text: text.to_owned(),
        usage: Usage {
            input_tokens: 120_000,
            output_tokens: 300,
            ..Usage::default()
        },
        context_limit: Some(128_000),
        charge: None,
    }
}

async fn a_summary_becomes_the_prompt_boundary(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "build the thing").await;
    let lease = claim(s, "w0", chat.id).await;
    s.commit_step(&lease, vec![assistant("working on it")])
        .await
        .unwrap();
    s.append_live_parts(&lease, &[serde_json::json!({"type": "text", "text": "SU"})])
        .await
        .unwrap();
    let ids = s
        .commit_summary(&lease, summary("goal: build the thing"))
        .await
        .unwrap();
    assert_eq!(ids, vec![3, 4]);
    s.commit_step(&lease, vec![assistant("carrying on")])
        .await
        .unwrap();

    // Clients see every message but the summary, and the notice among them.
    let listed = s.list_messages(chat.id, None).await.unwrap();
    let kinds: Vec<(i64, MessageKind)> = listed.iter().map(|m| (m.id, m.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            (1, MessageKind::Normal),
            (2, MessageKind::Normal),
            (4, MessageKind::CompactionNotice),
            (5, MessageKind::Normal),
        ]
    );
    assert_eq!(listed[2].role, Role::System);
    assert_eq!(
        listed[2].to_message().text(),
        transitions::COMPACTION_NOTICE
    );
    assert!(
        s.messages_after_seq(chat.id, 0)
            .await
            .unwrap()
            .iter()
            .all(|m| m.kind != MessageKind::Summary)
    );
    // The live log the summary streamed into is gone.
    assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());

    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    let texts: Vec<String> = prompt.iter().map(|m| m.text()).collect();
    assert_eq!(
        texts,
        vec![
            format!("{SUMMARY_PREFIX}\n\ngoal: build the thing"),
            "carrying on".to_owned(),
        ]
    );
    assert_eq!(prompt[0].role, Role::User);
    // A run starts from the same prompt, and sees the same end of history clients see.
    let start = s.start_run(chat.id).await.unwrap();
    assert_eq!(start.prompt().messages, prompt);
    let recent: Vec<i64> = start.recent(3).iter().map(|m| m.id).collect();
    assert_eq!(recent, vec![2, 4, 5]);
}

/// A summary ends no step: the records of the step in progress still answer its calls,
/// where a step's commit drops them.
async fn a_summary_leaves_the_step_in_progress_its_tool_records(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "build the thing").await;
    let lease = claim(s, "w0", chat.id).await;
    let record = keel_store::ToolRecord {
        chat_id: chat.id,
        tool_call_id: "call_1".into(),
        tool_name: "read_file".into(),
        args: "{}".into(),
        state: keel_store::ToolState::Started,
        result: None,
        is_error: false,
        started_at: chrono::Utc::now(),
        finished_at: None,
    };
    s.record_tool(&lease, record).await.unwrap();
    let calls = async || -> Vec<String> {
        let records = s.tool_records(chat.id).await.unwrap();
        records.into_iter().map(|r| r.tool_call_id).collect()
    };
    s.commit_summary(&lease, summary("goal: build the thing"))
        .await
        .unwrap();
    assert_eq!(calls().await, vec!["call_1".to_owned()]);
    s.commit_step(&lease, vec![assistant("done")])
        .await
        .unwrap();
    assert!(calls().await.is_empty());
}

async fn unanswered_user_messages_survive_a_summary(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "first task").await;
    let lease = claim(s, "w0", chat.id).await;
    s.fail_run(
        &lease,
        keel_store::LastError::new(ErrorKind::Server, "boom"),
    )
    .await
    .unwrap();
    // The first task was never answered; the user then asks for a compaction.
    s.request_compaction(chat.id).await.unwrap();
    let lease = claim(s, "w1", chat.id).await;
    s.commit_summary(&lease, summary("nothing done yet"))
        .await
        .unwrap();
    s.finish_run(&lease).await.unwrap();

    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    let texts: Vec<String> = prompt.iter().map(|m| m.text()).collect();
    assert_eq!(
        texts,
        vec![
            format!("{SUMMARY_PREFIX}\n\nnothing done yet"),
            "first task".to_owned(),
        ]
    );
}

async fn requested_compaction_runs_only_on_idle_chats(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    // Running: refused.
    let error = s.request_compaction(chat.id).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Conflict {
                status: ChatStatus::Running,
                transition: Transition::RequestCompaction
            }
        ),
        "{error:?}"
    );
    let lease = claim(s, "w0", chat.id).await;
    s.commit_step(&lease, vec![assistant("hello")])
        .await
        .unwrap();
    s.finish_run(&lease).await.unwrap();

    let requested = s.request_compaction(chat.id).await.unwrap();
    assert_eq!(requested.status, ChatStatus::Running);
    assert!(requested.compact_requested);
    let lease = claim(s, "w0", chat.id).await;
    s.commit_summary(&lease, summary("said hello"))
        .await
        .unwrap();
    assert!(!s.get_chat(chat.id).await.unwrap().compact_requested);
    assert_eq!(s.finish_run(&lease).await.unwrap(), Next::Idle);
    let after = s.get_chat(chat.id).await.unwrap();
    assert_eq!(after.status, ChatStatus::Waiting);

    // A failed compaction leaves no request behind either.
    s.request_compaction(chat.id).await.unwrap();
    let lease = claim(s, "w0", chat.id).await;
    s.fail_run(
        &lease,
        keel_store::LastError::new(ErrorKind::Server, "boom"),
    )
    .await
    .unwrap();
    let failed = s.get_chat(chat.id).await.unwrap();
    assert_eq!(failed.status, ChatStatus::Error);
    assert!(!failed.compact_requested);
    // From error it may be asked again.
    assert!(
        s.request_compaction(chat.id)
            .await
            .unwrap()
            .compact_requested
    );
}

async fn a_summary_needs_the_lease(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w0", chat.id).await;
    s.interrupt(chat.id).await.unwrap();
    // Interrupting: the summary is refused, nothing is written.
    assert!(s.commit_summary(&lease, summary("late")).await.is_err());
    let chat = idle(s, "other").await;
    send(s, chat.id, "again", Busy::Queue).await;
    let mut stale = claim(s, "w0", chat.id).await;
    stale.worker_id = "someone-else".into();
    assert!(matches!(
        s.commit_summary(&stale, summary("x")).await.unwrap_err(),
        StoreError::LostOwnership { .. }
    ));
    assert!(
        s.list_messages(chat.id, None)
            .await
            .unwrap()
            .iter()
            .all(|m| m.kind == MessageKind::Normal)
    );
}

async fn an_edit_supersedes_a_requested_compaction(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hello").await;
    let lease = claim(s, "w0", chat.id).await;
    s.commit_step(&lease, vec![assistant("hi")]).await.unwrap();
    s.finish_run(&lease).await.unwrap();
    s.request_compaction(chat.id).await.unwrap();
    claim(s, "w0", chat.id).await;
    // The user edits their message while the summary streams: the run that claims the chat
    // next must answer the edited message, not only summarise.
    let edited = s
        .edit_message(chat.id, 1, text("hello, edited"))
        .await
        .unwrap();
    assert_eq!(edited.status, ChatStatus::Running);
    assert!(!edited.compact_requested);
    assert!(!s.get_chat(chat.id).await.unwrap().compact_requested);
}
