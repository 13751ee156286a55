//! Transitions of the worker holding a lease (claim, renew, write, end), on both backends.
//!
//! Longer than most files: one test per named transition, alone and grouped.

use std::sync::Arc;

use crate::common::*;
use keel_core::{ErrorKind, FinishReason, PartKind, Role};
use keel_store::{
    Busy, Chat, ChatStatus, JsonText, Lease, NewLiveEntry, Next, Store, StoreError, ToolRecord,
    ToolState, Transition,
};
use serde_json::json;

both_backends!(
    acquire_is_exclusive_until_the_lease_expires,
    renew_and_release,
    a_renewal_is_no_change_a_client_sees,
    leases_renew_together_and_a_fenced_one_is_refused,
    a_lease_is_one_acquisition,
    client_tool_calls_made_while_interrupting_are_answered_at_once,
    fail_run_then_recover,
    disallowed_worker_moves,
    live_parts_share_the_event_sequence,
    a_cleared_log_never_takes_the_event_sequence_back,
    interrupted_persist_is_allowed_while_interrupting,
    checkpoints_users_and_tool_records,
    a_group_append_writes_every_chat_it_may_and_refuses_a_fenced_one,
    a_log_write_larger_than_a_statements_parameters_lands_whole,
    a_steps_finish_reason_is_stored_with_its_message,
    grouped_step_commits_number_like_single_ones_and_refuse_only_the_fenced,
    grouped_run_finishes_end_like_single_ones_and_refuse_only_the_fenced,
    a_catch_up_reads_the_log_the_messages_and_the_chat_after_a_position,
    only_a_chat_waiting_for_a_worker_is_noticed_as_unowned,
    only_changes_without_an_event_number_are_noticed_as_unnumbered,
    a_committed_steps_parts_stay_logged_for_followers_until_a_newer_step_or_the_sweep,
    a_grouped_commit_keeps_the_newest_step_and_a_finish_drops_what_no_message_commits,
    a_run_starts_from_one_read_of_the_chat_its_step_its_history_and_its_tool_records,
    the_steps_in_progress_of_many_chats_are_one_read,
);

async fn the_steps_in_progress_of_many_chats_are_one_read(db: TestDb) {
    let s = &db.store;
    let (a, b, c) = (
        create(s, "a").await,
        create(s, "b").await,
        create(s, "c").await,
    );
    let leases = s.acquire("w", 10).await.unwrap();
    let lease = |id| lease_for(&leases, id);
    let a1 = s
        .append_live_parts(&lease(a.id), &[json!({"t": 1}), json!({"t": 2})])
        .await
        .unwrap();
    let a2 = s
        .append_live_parts(&lease(a.id), &[json!({"t": 3})])
        .await
        .unwrap();
    // b's step is committed: nothing of it is in progress any more.
    s.append_live_parts(&lease(b.id), &[json!({"t": 1})])
        .await
        .unwrap();
    s.commit_step(&lease(b.id), vec![assistant("b")])
        .await
        .unwrap();
    let gone = uuid::Uuid::new_v4();
    let found = s
        .live_parts_of(&[(a.id, *a1.start()), (b.id, 0), (c.id, 0), (gone, 0)])
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, a.id);
    // After the position, across batches, as `live_parts_after` reads them one chat alone.
    let mut expected: Vec<i64> = a1.skip(1).collect();
    expected.extend(a2);
    assert_eq!(seqs_of(&found[0].1), expected);
    assert_eq!(
        found[0].1,
        s.live_parts_after(a.id, expected[0] - 1).await.unwrap()
    );
    assert!(s.live_parts_of(&[]).await.unwrap().is_empty());
}

async fn a_run_starts_from_one_read_of_the_chat_its_step_its_history_and_its_tool_records(
    db: TestDb,
) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    s.append_live_parts(&lease, &[json!({"t": "a"})])
        .await
        .unwrap();
    s.commit_step(&lease, vec![assistant("first")])
        .await
        .unwrap();
    let step = s
        .append_live_parts(&lease, &[json!({"t": "b"}), json!({"t": "c"})])
        .await
        .unwrap();
    s.record_tool(&lease, started_call(chat.id)).await.unwrap();
    let start = s.start_run(chat.id).await.unwrap();
    assert_eq!(start.chat, s.get_chat(chat.id).await.unwrap());
    // Only the step in progress: the committed step's kept parts are not resumed.
    assert_eq!(seqs_of(&start.log), step.collect::<Vec<_>>());
    assert_eq!(start.log, s.live_parts_after(chat.id, 0).await.unwrap());
    let roles: Vec<Role> = start.history.iter().map(|m| m.role).collect();
    assert_eq!(roles, vec![Role::User, Role::Assistant]);
    let recent: Vec<i64> = start.recent(2).iter().map(|m| m.id).collect();
    let listed = s.recent_messages(chat.id, 2).await.unwrap();
    assert_eq!(recent, listed.iter().map(|m| m.id).collect::<Vec<_>>());
    assert_eq!(start.recent(5).len(), 2);
    assert_eq!(start.prompt().messages.len(), 2);
    assert_eq!(start.tool_records.len(), 1);
    assert_eq!(start.tool_records[0].tool_call_id, "call_1");
    assert!(matches!(
        s.start_run(uuid::Uuid::new_v4()).await,
        Err(StoreError::NotFound { .. })
    ));
}

/// The record of a call `call_1` of tool `t` that started now.
fn started_call(chat: keel_store::ChatId) -> ToolRecord {
    ToolRecord {
        chat_id: chat,
        tool_call_id: "call_1".into(),
        tool_name: "t".into(),
        args: "{}".into(),
        state: ToolState::Started,
        result: None,
        is_error: false,
        started_at: chrono::Utc::now(),
        finished_at: None,
    }
}

fn seqs_of(entries: &[keel_store::LiveEntry]) -> Vec<i64> {
    entries.iter().map(|e| e.seq).collect()
}

async fn a_committed_steps_parts_stay_logged_for_followers_until_a_newer_step_or_the_sweep(
    db: TestDb,
) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let user_seq = s.get_chat(chat.id).await.unwrap().event_seq;
    let lease = claim(s, "a", chat.id).await;
    let first = s
        .append_live_parts(&lease, &[json!({"t": "a"}), json!({"t": "b"})])
        .await
        .unwrap();
    s.commit_step(&lease, vec![assistant("ab")]).await.unwrap();
    // Nothing is in progress, but a follower still at the user message gets the parts, then
    // the message that commits them.
    assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());
    let behind = s.catch_up(chat.id, user_seq, 10).await.unwrap();
    assert_eq!(seqs_of(&behind.parts), first.clone().collect::<Vec<_>>());
    assert_eq!(behind.messages.len(), 1);
    assert!(behind.messages[0].event_seq > *first.end());
    // The next step's parts are the step in progress; the committed step's stay.
    let second = s
        .append_live_parts(&lease, &[json!({"t": "c"})])
        .await
        .unwrap();
    assert_eq!(
        seqs_of(&s.live_parts_after(chat.id, 0).await.unwrap()),
        second.clone().collect::<Vec<_>>()
    );
    let both = s.catch_up(chat.id, user_seq, 10).await.unwrap();
    assert_eq!(both.parts.len(), 3);
    // Its commit drops the older step's parts and keeps its own, past the run's end.
    s.commit_step(&lease, vec![assistant("c")]).await.unwrap();
    assert_eq!(s.finish_run(&lease).await.unwrap(), Next::Idle);
    let after_end = s.catch_up(chat.id, user_seq, 10).await.unwrap();
    assert_eq!(
        seqs_of(&after_end.parts),
        second.clone().collect::<Vec<_>>()
    );
    assert_eq!(after_end.messages.len(), 2);
    assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());
    // The sweep leaves them until the chat has been settled for a lease period.
    assert_eq!(s.purge_settled_logs().await.unwrap(), 0);
    db.clock.advance(chrono::Duration::seconds(31));
    assert_eq!(s.purge_settled_logs().await.unwrap(), 1);
    assert!(
        s.catch_up(chat.id, user_seq, 10)
            .await
            .unwrap()
            .parts
            .is_empty()
    );
    // A running chat's log is never swept, however old.
    send(s, chat.id, "again", Busy::Queue).await;
    let lease = claim(s, "a", chat.id).await;
    s.append_live_parts(&lease, &[json!({"t": "d"})])
        .await
        .unwrap();
    db.clock.advance(chrono::Duration::seconds(120));
    assert_eq!(s.purge_settled_logs().await.unwrap(), 0);
    assert_eq!(s.live_parts_after(chat.id, 0).await.unwrap().len(), 1);
}

async fn a_grouped_commit_keeps_the_newest_step_and_a_finish_drops_what_no_message_commits(
    db: TestDb,
) {
    let s = &db.store;
    let (a, b) = (create(s, "a").await, create(s, "b").await);
    let user_seq = s.get_chat(a.id).await.unwrap().event_seq;
    let leases = s.acquire("w", 10).await.unwrap();
    let lease = |id| lease_for(&leases, id);
    let (la, lb) = (lease(a.id), lease(b.id));
    let a1 = s.append_live_parts(&la, &[json!({"t": 1})]).await.unwrap();
    s.append_live_parts(&lb, &[json!({"t": 1})]).await.unwrap();
    s.commit_steps(vec![
        (la.clone(), vec![assistant("1")]),
        (lb.clone(), vec![assistant("1")]),
    ])
    .await
    .unwrap();
    let a2 = s.append_live_parts(&la, &[json!({"t": 2})]).await.unwrap();
    // A step with no parts of its own (here: one of b) keeps the newest step logged.
    let outcomes = s
        .commit_steps(vec![
            (la.clone(), vec![assistant("2")]),
            (lb.clone(), vec![assistant("2")]),
        ])
        .await
        .unwrap();
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let logged = |id| async move { seqs_of(&s.catch_up(id, 0, 10).await.unwrap().parts) };
    assert_eq!(logged(a.id).await, a2.clone().collect::<Vec<_>>());
    assert_eq!(logged(b.id).await.len(), 1);
    assert!(!logged(a.id).await.contains(a1.start()));
    // Parts no message commits are void at the run's end; the committed step's stay.
    s.append_live_parts(&la, &[json!({"t": "void"})])
        .await
        .unwrap();
    for outcome in s.finish_runs(&[la, lb]).await.unwrap() {
        assert_eq!(outcome.unwrap(), Next::Idle);
    }
    assert_eq!(logged(a.id).await, a2.collect::<Vec<_>>());
    assert!(s.live_parts_after(a.id, 0).await.unwrap().is_empty());
    assert!(user_seq < s.get_chat(a.id).await.unwrap().event_seq);
}

async fn a_catch_up_reads_the_log_the_messages_and_the_chat_after_a_position(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let first = s.list_messages(chat.id, None).await.unwrap()[0].clone();
    let lease = claim(s, "a", chat.id).await;
    let parts = s
        .append_live_parts(&lease, &[json!({"t": "a"}), json!({"t": "b"})])
        .await
        .unwrap();
    // From the start: the user message, both parts, the running chat.
    let all = s.catch_up(chat.id, 0, 10).await.unwrap();
    assert_eq!(all.messages.len(), 1);
    assert_eq!(all.messages[0].id, first.id);
    assert_eq!(
        all.parts.iter().map(|e| e.seq).collect::<Vec<_>>(),
        parts.clone().collect::<Vec<_>>()
    );
    assert_eq!(all.chat.status, ChatStatus::Running);
    assert_eq!(all.chat.id, chat.id);
    // After the first part: only the second, and no message.
    let later = s.catch_up(chat.id, *parts.start(), 10).await.unwrap();
    assert!(later.messages.is_empty());
    assert_eq!(later.parts.len(), 1);
    assert_eq!(later.parts[0].payload, json!({"t": "b"}));
    // The commit replaces the parts with its message; a page holds at most `limit`.
    s.commit_step(&lease, vec![assistant("ab")]).await.unwrap();
    let committed = s.catch_up(chat.id, *parts.end(), 10).await.unwrap();
    assert!(committed.parts.is_empty());
    assert_eq!(committed.messages.len(), 1);
    assert!(committed.messages[0].event_seq > *parts.end());
    assert_eq!(s.catch_up(chat.id, 0, 1).await.unwrap().messages.len(), 1);
    // Nothing after the end is nothing, and a chat that is not there is not found.
    let end = committed.chat.event_seq;
    let none = s.catch_up(chat.id, end, 10).await.unwrap();
    assert!(none.parts.is_empty() && none.messages.is_empty());
    assert!(matches!(
        s.catch_up(uuid::Uuid::new_v4(), 0, 10).await,
        Err(StoreError::NotFound { .. })
    ));
    // Reads that find nothing still tell a missing chat from an empty one.
    assert!(matches!(
        s.live_parts_after(uuid::Uuid::new_v4(), 0).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());
    assert!(matches!(
        s.tool_records(uuid::Uuid::new_v4()).await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn only_a_chat_waiting_for_a_worker_is_noticed_as_unowned(db: TestDb) {
    let s = &db.store;
    let mut notices = s.subscribe();
    let chat = create(s, "hi").await;
    let created = notices.recv().await.unwrap();
    assert_eq!(created.chat_id, chat.id);
    assert!(
        created.unowned,
        "a new chat waits for a worker: {created:?}"
    );
    let lease = claim(s, "a", chat.id).await;
    let claimed = notices.recv().await.unwrap();
    assert!(!claimed.unowned, "{claimed:?}");
    s.commit_step(&lease, vec![assistant("done")])
        .await
        .unwrap();
    let committed = notices.recv().await.unwrap();
    assert!(!committed.unowned, "{committed:?}");
    // A message queued behind the run starts on the same lease: still owned.
    send(s, chat.id, "next", Busy::Queue).await;
    let queued = notices.recv().await.unwrap();
    assert!(!queued.unowned, "{queued:?}");
}

/// A follower that has sent every numbered event reads the chat again only for what a
/// notice marks as changed without a number: a retry, an error, an end of run.
async fn only_changes_without_an_event_number_are_noticed_as_unnumbered(db: TestDb) {
    let s = &db.store;
    let mut notices = s.subscribe();
    let chat = create(s, "hi").await;
    assert!(notices.recv().await.unwrap().unnumbered_change);
    let lease = claim(s, "a", chat.id).await;
    let claimed = notices.recv().await.unwrap();
    assert!(!claimed.unnumbered_change, "a claim: {claimed:?}");
    s.append_live_parts(&lease, &[json!({"type": "text", "text": "x"})])
        .await
        .unwrap();
    let part = notices.recv().await.unwrap();
    assert!(!part.unnumbered_change, "a live part: {part:?}");
    s.set_retry_state(&lease, Some(json!({"attempt": 1})))
        .await
        .unwrap();
    let retry = notices.recv().await.unwrap();
    assert!(retry.unnumbered_change, "a retry: {retry:?}");
    assert_eq!(retry.event_seq, part.event_seq, "a retry takes no number");
    s.commit_step(&lease, vec![assistant("one")]).await.unwrap();
    let committed = notices.recv().await.unwrap();
    assert!(
        !committed.unnumbered_change,
        "a step's commit: {committed:?}"
    );
    assert!(committed.event_seq > retry.event_seq, "{committed:?}");
    let grouped = s
        .commit_steps(vec![(lease.clone(), vec![assistant("two")])])
        .await
        .unwrap();
    assert!(grouped[0].is_ok(), "{grouped:?}");
    let committed = notices.recv().await.unwrap();
    assert!(
        !committed.unnumbered_change,
        "a grouped commit: {committed:?}"
    );
    s.finish_run(&lease).await.unwrap();
    let finished = notices.recv().await.unwrap();
    assert!(finished.unnumbered_change, "a run's end: {finished:?}");
    // The commit cleared the retry: nothing of it is left to report.
    assert_eq!(s.get_chat(chat.id).await.unwrap().retry_state, None);
}

async fn grouped_run_finishes_end_like_single_ones_and_refuse_only_the_fenced(db: TestDb) {
    let s = &db.store;
    let (a, b, c, d) = (
        create(s, "a").await,
        create(s, "b").await,
        create(s, "c").await,
        create(s, "d").await,
    );
    let leases = s.acquire("w", 10).await.unwrap();
    let lease = |id| lease_for(&leases, id);
    let (la, lb, lc, ld) = (lease(a.id), lease(b.id), lease(c.id), lease(d.id));
    for l in [&la, &lb, &lc, &ld] {
        s.commit_step(l, vec![assistant("done")]).await.unwrap();
    }
    // `a` has a logged part and a checkpoint left: the finish voids both.
    let seq = s.get_chat(a.id).await.unwrap().event_seq + 1;
    s.append_live_entries(&la, &[entry(seq)]).await.unwrap();
    s.put_checkpoint(&la, json!({"partial": true}))
        .await
        .unwrap();
    // `b` is edited under its run: it must not end. `c` has a message queued: it runs next.
    let first = s.list_messages(b.id, None).await.unwrap()[0].id;
    s.edit_message(b.id, first, text("b again")).await.unwrap();
    send(s, c.id, "next, please", Busy::Queue).await;
    let before_a = s.get_chat(a.id).await.unwrap();
    let before_c = s.get_chat(c.id).await.unwrap();
    let outcomes = s
        .finish_runs(&[la.clone(), lb.clone(), lc.clone(), ld.clone()])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(matches!(outcomes[0], Ok(Next::Idle)), "{outcomes:?}");
    assert!(
        matches!(outcomes[1], Err(StoreError::Fenced { .. })),
        "{outcomes:?}"
    );
    let Ok(Next::Continue { lease: next_c, .. }) = &outcomes[2] else {
        panic!("{outcomes:?}");
    };
    assert!(matches!(outcomes[3], Ok(Next::Idle)), "{outcomes:?}");
    // As a single finish moves it: waiting, released, one new version. The status change
    // takes no event number, and the voided log's number is kept, never taken back.
    let after_a = s.get_chat(a.id).await.unwrap();
    assert_eq!(after_a.status, ChatStatus::Waiting);
    assert_eq!(after_a.worker_id, None);
    assert_eq!(after_a.version, before_a.version + 1);
    assert_eq!(after_a.event_seq, before_a.event_seq);
    assert_eq!(after_a.event_seq, seq);
    assert!(s.live_parts_after(a.id, 0).await.unwrap().is_empty());
    assert!(s.get_checkpoint(a.id).await.unwrap().is_none());
    assert_eq!(s.get_chat(d.id).await.unwrap().status, ChatStatus::Waiting);
    // The queue head is in history and runs on the same worker's renewed lease.
    let after_c = s.get_chat(c.id).await.unwrap();
    assert_eq!(after_c.status, ChatStatus::Running);
    assert!(after_c.queued.is_empty());
    assert_eq!(after_c.last_message_id, before_c.last_message_id + 1);
    assert_eq!(next_c.granted_version, after_c.version);
    s.commit_step(next_c, vec![assistant("next done")])
        .await
        .unwrap();
    // `b` runs on for whoever claims its edit; the old lease ends nothing.
    assert_eq!(s.get_chat(b.id).await.unwrap().status, ChatStatus::Running);
    // A finished run's lease finishes nothing again.
    let again = s.finish_runs(&[la.clone(), ld.clone()]).await.unwrap();
    assert!(again.iter().all(Result::is_err), "{again:?}");
}

/// Chats `a`, `b` and `c` claimed by worker `w`, then `b` edited under its run: the new
/// history version fences that run out, the other two runs still hold.
async fn three_claimed_with_b_fenced(s: &Arc<dyn Store>) -> ([Chat; 3], [Lease; 3]) {
    let chats = [
        create(s, "a").await,
        create(s, "b").await,
        create(s, "c").await,
    ];
    let leases = s.acquire("w", 10).await.unwrap();
    let leases = chats.each_ref().map(|chat| lease_for(&leases, chat.id));
    let b = chats[1].id;
    let first = s.list_messages(b, None).await.unwrap()[0].id;
    s.edit_message(b, first, text("b again")).await.unwrap();
    (chats, leases)
}

/// A logged live part numbered `seq`.
fn entry(seq: i64) -> NewLiveEntry {
    NewLiveEntry {
        seq,
        payload: JsonText::of(&json!({"event": "part", "data": seq})),
    }
}

async fn grouped_step_commits_number_like_single_ones_and_refuse_only_the_fenced(db: TestDb) {
    let s = &db.store;
    let ([a, b, c], [la, lb, lc]) = three_claimed_with_b_fenced(s).await;
    // Each chat has a logged part and a tool record: the commit voids both.
    for (l, chat) in [(&la, &a), (&lc, &c)] {
        let seq = s.get_chat(chat.id).await.unwrap().event_seq + 1;
        s.append_live_entries(l, &[entry(seq)]).await.unwrap();
        s.record_tool(l, started_call(chat.id)).await.unwrap();
    }
    // `b` was edited under its run: its step must not land, the others must.
    let before_a = s.get_chat(a.id).await.unwrap();
    let outcomes = s
        .commit_steps(vec![
            (la.clone(), vec![assistant("to a")]),
            (lb.clone(), vec![assistant("to b")]),
            (
                lc.clone(),
                vec![assistant("to c, one"), assistant("to c, two")],
            ),
        ])
        .await
        .unwrap();
    assert!(
        matches!(outcomes[1], Err(StoreError::Fenced { .. })),
        "{outcomes:?}"
    );
    let ids_a = outcomes[0].as_ref().unwrap().clone();
    let ids_c = outcomes[2].as_ref().unwrap().clone();
    assert_eq!(ids_a.len(), 1);
    assert_eq!(ids_c.len(), 2);
    // Numbered as a single commit numbers: the next message id and event numbers, one new
    // snapshot version, the log and tool records voided.
    let after_a = s.get_chat(a.id).await.unwrap();
    assert_eq!(ids_a[0], before_a.last_message_id + 1);
    assert_eq!(after_a.last_message_id, ids_a[0]);
    assert_eq!(after_a.event_seq, before_a.event_seq + 1);
    assert_eq!(after_a.version, before_a.version + 1);
    assert_eq!(after_a.status, ChatStatus::Running);
    let listed = s.list_messages(c.id, None).await.unwrap();
    let texts: Vec<_> = listed
        .iter()
        .skip(1)
        .map(|m| match &m.parts[0].kind {
            PartKind::Text { text } => text.clone(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(texts, vec!["to c, one", "to c, two"]);
    assert_eq!(listed[2].parent_id, Some(listed[1].id));
    for chat in [a.id, c.id] {
        assert!(s.live_parts_after(chat, 0).await.unwrap().is_empty());
        assert!(s.tool_records(chat).await.unwrap().is_empty());
    }
    assert_eq!(s.list_messages(b.id, None).await.unwrap().len(), 1);
    // The leases still hold: the runs carry on as after a commit of their own.
    s.commit_step(&la, vec![assistant("again")]).await.unwrap();
    s.finish_run(&lc).await.unwrap();
}

async fn a_steps_finish_reason_is_stored_with_its_message(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "look it up").await;
    let lease = s.acquire("w", 1).await.unwrap().remove(0);
    let mut paused = assistant("Searching the web.");
    paused.finish_reason = Some(FinishReason::PauseTurn);
    // The single-message commit and the multi-message one take different paths.
    s.commit_step(&lease, vec![paused]).await.unwrap();
    let mut called = assistant("reading");
    called.finish_reason = Some(FinishReason::ToolCalls);
    s.commit_step(&lease, vec![called, assistant("no reason")])
        .await
        .unwrap();
    let reasons: Vec<_> = s
        .list_messages(chat.id, None)
        .await
        .unwrap()
        .iter()
        .map(|m| m.finish_reason)
        .collect();
    assert_eq!(
        reasons,
        vec![
            None,
            Some(FinishReason::PauseTurn),
            Some(FinishReason::ToolCalls),
            None
        ]
    );
}

async fn a_group_append_writes_every_chat_it_may_and_refuses_a_fenced_one(db: TestDb) {
    let s = &db.store;
    let ([a, b, c], [la, lb, lc]) = three_claimed_with_b_fenced(s).await;
    // `b` was edited under its run: that run's parts must not land.
    let base = |chat: &keel_store::Chat| chat.event_seq;
    let (sa, sb, sc) = (
        base(&s.get_chat(a.id).await.unwrap()),
        base(&s.get_chat(b.id).await.unwrap()),
        base(&s.get_chat(c.id).await.unwrap()),
    );
    let for_a = [entry(sa + 1), entry(sa + 2)];
    let for_b = [entry(sb + 1)];
    // Two runs of numbers for `c`: stored as two batches, read back as one sequence.
    let for_c = [entry(sc + 1), entry(sc + 5)];
    let outcomes = s
        .append_live_groups(&[
            (la.clone(), &for_a[..]),
            (lb.clone(), &for_b[..]),
            (lc.clone(), &for_c[..]),
        ])
        .await
        .unwrap();
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    assert!(
        matches!(outcomes[1], Err(StoreError::Fenced { .. })),
        "{outcomes:?}"
    );
    let seqs =
        |entries: Vec<keel_store::LiveEntry>| entries.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(s.live_parts_after(a.id, 0).await.unwrap()),
        vec![sa + 1, sa + 2]
    );
    assert!(s.live_parts_after(b.id, 0).await.unwrap().is_empty());
    assert_eq!(
        seqs(s.live_parts_after(c.id, 0).await.unwrap()),
        vec![sc + 1, sc + 5]
    );
    assert_eq!(s.get_chat(a.id).await.unwrap().event_seq, sa + 2);
    assert_eq!(s.get_chat(c.id).await.unwrap().event_seq, sc + 5);
    // The next commit clears each chat's log as before.
    s.commit_step(&la, vec![assistant("done")]).await.unwrap();
    assert!(s.live_parts_after(a.id, 0).await.unwrap().is_empty());
}

/// A window's write may hold more batches than one statement can bind parameters for
/// (65,535 on PostgreSQL, 32,766 on SQLite; four a batch): it lands whole, in order, and
/// the notice of it says how far the log reaches.
async fn a_log_write_larger_than_a_statements_parameters_lands_whole(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "long").await;
    let lease = claim(s, "w1", chat.id).await;
    let base = s.get_chat(chat.id).await.unwrap().event_seq;
    // Every other number: each entry is a batch of its own.
    let entries: Vec<NewLiveEntry> = (1..=20_000).map(|n| entry(base + 2 * n)).collect();
    let outcomes = s
        .append_live_groups(&[(lease.clone(), &entries[..])])
        .await
        .unwrap();
    assert!(outcomes[0].is_ok(), "{outcomes:?}");
    let logged: Vec<i64> = s
        .live_parts_after(chat.id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    let expected: Vec<i64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(logged, expected);
    assert_eq!(s.get_chat(chat.id).await.unwrap().event_seq, base + 40_000);
    let read = s.live_parts_of(&[(chat.id, base + 39_990)]).await.unwrap();
    assert_eq!(read.len(), 1);
    let tail: Vec<i64> = read[0].1.iter().map(|e| e.seq).collect();
    assert_eq!(
        tail,
        vec![
            base + 39_992,
            base + 39_994,
            base + 39_996,
            base + 39_998,
            base + 40_000
        ]
    );
}

async fn acquire_is_exclusive_until_the_lease_expires(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let a = claim(s, "a", chat.id).await;
    assert!(s.acquire("b", 10).await.unwrap().is_empty());
    db.clock.advance(chrono::Duration::seconds(31));
    let b = claim(s, "b", chat.id).await;
    let err = s
        .commit_step(&a, vec![assistant("late")])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LostOwnership { .. }), "{err}");
    s.commit_step(&b, vec![assistant("mine")]).await.unwrap();
    assert_eq!(s.list_messages(chat.id, None).await.unwrap().len(), 2);
    // Waiting chats are not claimable.
    s.finish_run(&b).await.unwrap();
    assert!(s.acquire("c", 10).await.unwrap().is_empty());
}

async fn renew_and_release(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    db.clock.advance(chrono::Duration::seconds(20));
    let renewed = s.renew_lease(&lease).await.unwrap();
    assert!(renewed.expires_at > lease.expires_at);
    db.clock.advance(chrono::Duration::seconds(20));
    assert!(
        s.acquire("b", 10).await.unwrap().is_empty(),
        "renewed lease holds"
    );
    s.release_on_shutdown(&renewed).await.unwrap();
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!((c.status, c.worker_id.clone()), (ChatStatus::Running, None));
    assert!(matches!(
        s.renew_lease(&renewed).await.unwrap_err(),
        StoreError::LostOwnership { .. }
    ));
    claim(s, "b", chat.id).await;
}

async fn a_renewal_is_no_change_a_client_sees(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    let before = s.get_chat(chat.id).await.unwrap();
    let mut notices = s.subscribe();
    db.clock.advance(chrono::Duration::seconds(20));
    let renewed = s.renew_lease(&lease).await.unwrap();
    assert!(renewed.expires_at > lease.expires_at);
    let after = s.get_chat(chat.id).await.unwrap();
    assert_eq!(after.version, before.version, "no new snapshot version");
    assert_eq!(after.event_seq, before.event_seq);
    assert_eq!(after.lease_expires_at, Some(renewed.expires_at));
    assert!(
        notices.try_recv().is_err(),
        "a renewal wakes no follower of the chat"
    );
}

async fn leases_renew_together_and_a_fenced_one_is_refused(db: TestDb) {
    let s = &db.store;
    let ([a, _, c], [la, lb, lc]) = three_claimed_with_b_fenced(s).await;
    s.interrupt(c.id).await.unwrap();
    db.clock.advance(chrono::Duration::seconds(20));
    let outcomes = s
        .renew_leases(&[la.clone(), lb.clone(), lc.clone()])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 3);
    let renewed_a = outcomes[0].as_ref().unwrap();
    assert!(renewed_a.expires_at > la.expires_at);
    assert!(
        matches!(outcomes[1], Err(StoreError::Fenced { .. })),
        "{outcomes:?}"
    );
    // The renewal tells a run its chat is being interrupted.
    assert_eq!(
        outcomes[2].as_ref().unwrap().status,
        ChatStatus::Interrupting
    );
    db.clock.advance(chrono::Duration::seconds(20));
    let claimed: Vec<_> = s
        .acquire("other", 10)
        .await
        .unwrap()
        .iter()
        .map(|l| l.chat_id)
        .collect();
    assert!(
        !claimed.contains(&a.id) && !claimed.contains(&c.id),
        "renewed leases hold"
    );
    assert!(s.renew_leases(&[]).await.unwrap().is_empty());
}

async fn a_lease_is_one_acquisition(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let first = claim(s, "w", chat.id).await;
    db.clock.advance(chrono::Duration::minutes(5));
    // The same worker claims the chat again after its lease expired: the first run is
    // fenced out, it cannot write beside the second.
    let second = claim(s, "w", chat.id).await;
    assert_ne!(first.worker_id, second.worker_id);
    let err = s
        .append_live_parts(&first, &[json!({"event": "part"})])
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, StoreError::LostOwnership { .. }), "{err}");
    assert!(s.renew_lease(&first).await.is_err());
    s.renew_lease(&second).await.unwrap();
}

async fn client_tool_calls_made_while_interrupting_are_answered_at_once(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    s.interrupt(chat.id).await.unwrap();
    enter_ra(s, &lease).await;
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!((c.status, c.worker_id.clone()), (ChatStatus::Waiting, None));
    assert!(c.pending_tool_calls.is_empty());
    let last = s.list_messages(chat.id, None).await.unwrap().pop().unwrap();
    assert_eq!(last.role, Role::Tool);
    assert_eq!(last.parts.len(), 2);
    assert!(
        last.parts
            .iter()
            .all(|p| matches!(p.kind, PartKind::ToolResult { is_error: true, .. }))
    );
}

async fn fail_run_then_recover(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    s.append_live_parts(&lease, &[json!("x")]).await.unwrap();
    s.fail_run(
        &lease,
        keel_store::LastError::new(ErrorKind::RateLimit, "slow down"),
    )
    .await
    .unwrap();
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Error);
    let e = c.last_error.unwrap();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::RateLimit, "slow down")
    );
    assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());
    send(s, chat.id, "retry", Busy::Queue).await;
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!((c.status, c.last_error), (ChatStatus::Running, None));
}

async fn disallowed_worker_moves(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    let before = s.get_chat(chat.id).await.unwrap();
    let err = s.finish_interruption(&lease).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                status: ChatStatus::Running,
                transition: Transition::FinishInterruption
            }
        ),
        "{err}"
    );
    s.interrupt(chat.id).await.unwrap();
    let err = s
        .enter_requires_action(&lease, vec![], None)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::Conflict { .. } | StoreError::InvalidInput(_)
    ));
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().version,
        before.version + 1
    );
    s.finish_interruption(&lease).await.unwrap();
    // Released: every worker write is refused, nothing changes.
    let idle = s.get_chat(chat.id).await.unwrap();
    for err in [
        s.commit_step(&lease, vec![assistant("x")])
            .await
            .unwrap_err(),
        s.finish_run(&lease).await.map(|_| ()).unwrap_err(),
        s.fail_run(&lease, keel_store::LastError::new(ErrorKind::Server, "x"))
            .await
            .unwrap_err(),
        s.release_on_shutdown(&lease).await.unwrap_err(),
        s.append_live_parts(&lease, &[json!(1)])
            .await
            .map(|_| ())
            .unwrap_err(),
        s.set_retry_state(&lease, None).await.unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::LostOwnership { .. }), "{err}");
    }
    assert_eq!(s.get_chat(chat.id).await.unwrap(), idle);
}

async fn live_parts_share_the_event_sequence(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let first_msg_seq = s.list_messages(chat.id, None).await.unwrap()[0].event_seq;
    let lease = claim(s, "a", chat.id).await;
    let r1 = s
        .append_live_parts(&lease, &[json!({"t": "a"}), json!({"t": "b"})])
        .await
        .unwrap();
    let r2 = s
        .append_live_parts(&lease, &[json!({"t": "c"})])
        .await
        .unwrap();
    assert!(*r1.start() > first_msg_seq);
    assert_eq!(*r2.start(), r1.end() + 1);
    let live = s.live_parts_after(chat.id, *r1.start()).await.unwrap();
    assert_eq!(
        live.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![r1.end().to_owned(), *r2.start()]
    );
    assert_eq!(live[1].payload, json!({"t": "c"}));
    // Committing voids the log; the message takes a later sequence number.
    let ids = s.commit_step(&lease, vec![assistant("abc")]).await.unwrap();
    assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());
    let committed = s.messages_after_seq(chat.id, *r2.end()).await.unwrap();
    assert_eq!(committed.len(), 1);
    assert_eq!(committed[0].id, ids[0]);
    assert!(committed[0].event_seq > *r2.end());
    let all = s.messages_after_seq(chat.id, 0).await.unwrap();
    assert_eq!(all.len(), 2);
    let c = s.get_chat(chat.id).await.unwrap();
    assert!(c.event_seq >= committed[0].event_seq);
}

/// Appends two parts after the chat's current number; a read of the chat reaches them
/// (the log's writes leave the chat's row as it was).
async fn log_two(s: &Arc<dyn Store>, lease: &Lease) -> i64 {
    let start = s.get_chat(lease.chat_id).await.unwrap().event_seq;
    s.append_live_entries(lease, &[entry(start + 1), entry(start + 2)])
        .await
        .unwrap();
    assert_eq!(
        s.get_chat(lease.chat_id).await.unwrap().event_seq,
        start + 2
    );
    start + 2
}

async fn a_cleared_log_never_takes_the_event_sequence_back(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let reaches = |logged: i64| async move {
        assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());
        let seq = s.get_chat(chat.id).await.unwrap().event_seq;
        assert!(seq >= logged, "{seq} < {logged}");
    };
    // A failed run's log is dropped.
    let lease = claim(s, "a", chat.id).await;
    let logged = log_two(s, &lease).await;
    s.fail_run(
        &lease,
        keel_store::LastError::new(ErrorKind::RateLimit, "slow down"),
    )
    .await
    .unwrap();
    reaches(logged).await;
    // So is the log of a run that ends without committing a step.
    send(s, chat.id, "again", Busy::Queue).await;
    let lease = claim(s, "a", chat.id).await;
    let logged = log_two(s, &lease).await;
    s.finish_run(&lease).await.unwrap();
    reaches(logged).await;
    // And an edit under a run drops that run's log: the new branch is numbered above it.
    send(s, chat.id, "third", Busy::Queue).await;
    let lease = claim(s, "a", chat.id).await;
    let logged = log_two(s, &lease).await;
    let first = s.list_messages(chat.id, None).await.unwrap()[0].id;
    s.edit_message(chat.id, first, text("edited"))
        .await
        .unwrap();
    reaches(logged).await;
    let branch = s.list_messages(chat.id, None).await.unwrap();
    let edited = branch.last().unwrap();
    assert!(
        edited.event_seq > logged,
        "{} <= {logged}",
        edited.event_seq
    );
}

async fn interrupted_persist_is_allowed_while_interrupting(db: TestDb) {
    let s = &db.store;
    // Owned and interrupting.
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    s.interrupt(chat.id).await.unwrap();
    let mut partial = assistant("half a rep");
    partial.interrupted = true;
    s.commit_step(&lease, vec![partial.clone()]).await.unwrap();
    s.finish_interruption(&lease).await.unwrap();
    let last = s.list_messages(chat.id, None).await.unwrap().pop().unwrap();
    assert!(last.interrupted);
    // Released while interrupting: the partial output still lands, a normal step does not.
    let chat = create(s, "again").await;
    let lease = claim(s, "a", chat.id).await;
    s.interrupt(chat.id).await.unwrap();
    s.release_on_shutdown(&lease).await.unwrap();
    let err = s
        .commit_step(&lease, vec![assistant("full")])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LostOwnership { .. }), "{err}");
    s.commit_step(&lease, vec![partial.clone()]).await.unwrap();
    let msgs = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(msgs.len(), 2);
    assert!(msgs[1].interrupted);
    // Once another worker claimed it, the old worker is out even for partial output.
    let _b = claim(s, "b", chat.id).await;
    let err = s.commit_step(&lease, vec![partial]).await.unwrap_err();
    assert!(matches!(err, StoreError::LostOwnership { .. }), "{err}");
}

async fn checkpoints_users_and_tool_records(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    assert_eq!(s.get_checkpoint(chat.id).await.unwrap(), None);
    let lease = claim(s, "w", chat.id).await;
    s.put_checkpoint(&lease, json!({"step": 1})).await.unwrap();
    s.put_checkpoint(&lease, json!({"step": 2})).await.unwrap();
    assert_eq!(
        s.get_checkpoint(chat.id).await.unwrap(),
        Some(json!({"step": 2}))
    );
    s.delete_checkpoint(chat.id).await.unwrap();
    assert_eq!(s.get_checkpoint(chat.id).await.unwrap(), None);

    assert!(!s.has_users().await.unwrap());
    s.upsert_user("alice", "secret-token").await.unwrap();
    assert!(s.has_users().await.unwrap());
    assert_eq!(
        s.user_by_token("secret-token").await.unwrap().unwrap().name,
        "alice"
    );
    assert!(s.user_by_token("wrong").await.unwrap().is_none());

    let now = db.clock_now();
    let mut rec = ToolRecord {
        chat_id: chat.id,
        tool_call_id: "c1".into(),
        tool_name: "bash".into(),
        args: "{}".into(),
        state: ToolState::Started,
        result: None,
        is_error: false,
        started_at: now,
        finished_at: None,
    };
    s.record_tool(&lease, rec.clone()).await.unwrap();
    rec.state = ToolState::Finished;
    rec.result = Some(json!("done"));
    rec.finished_at = Some(now);
    s.record_tool(&lease, rec.clone()).await.unwrap();
    assert_eq!(s.tool_records(chat.id).await.unwrap(), vec![rec]);
    // Records serve the step in progress only: committing it clears them, so a later call
    // with the same id is never answered from them.
    s.commit_step(&lease, vec![assistant("reply")])
        .await
        .unwrap();
    assert_eq!(s.tool_records(chat.id).await.unwrap(), vec![]);
    s.set_retry_state(&lease, Some(json!({"attempt": 2})))
        .await
        .unwrap();
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().retry_state,
        Some(json!({"attempt": 2}))
    );
    // A retry is the state of its step: the step's commit ends it.
    s.commit_step(&lease, vec![assistant("after the retry")])
        .await
        .unwrap();
    assert_eq!(s.get_chat(chat.id).await.unwrap().retry_state, None);
}

/// The log's write is what tells other replicas how far each chat's log now reaches: its
/// notices go with the insert, and a refused group sends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_write_tells_other_replicas_how_far_each_chats_log_reaches() {
    use futures::StreamExt;
    let Some(db) = postgres().await else { return };
    let s = &db.store;
    let ([a, b, c], [la, lb, lc]) = three_claimed_with_b_fenced(s).await;
    let mut remote = s.subscribe_remote().await.unwrap();
    let start = |chat: &Chat| chat.event_seq;
    let (sa, sb, sc) = (
        start(&s.get_chat(a.id).await.unwrap()),
        start(&s.get_chat(b.id).await.unwrap()),
        start(&s.get_chat(c.id).await.unwrap()),
    );
    let (for_a, for_b, for_c) = (
        [entry(sa + 1), entry(sa + 2)],
        [entry(sb + 1)],
        [entry(sc + 1)],
    );
    s.append_live_groups(&[(la, &for_a[..]), (lb, &for_b[..]), (lc, &for_c[..])])
        .await
        .unwrap();
    let mut heard = std::collections::HashMap::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while heard.get(&a.id) != Some(&(sa + 2)) || heard.get(&c.id) != Some(&(sc + 1)) {
            if let Some(keel_store::RemoteNotice::Changed(n)) = remote.next().await {
                heard.insert(n.chat_id, n.event_seq);
            }
        }
    })
    .await
    .expect("both written chats' notices");
    assert_eq!(heard.get(&b.id), None, "{heard:?}");
}

/// A grouped claim has a notice per chat; they leave together (on PostgreSQL, in a
/// payload or a few) and every one reaches the other replicas, with the version the claim
/// gave its chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_claim_tells_other_replicas_of_every_chat_it_claims() {
    use futures::StreamExt;
    let Some(db) = postgres().await else { return };
    let s = &db.store;
    let chats = [
        create(s, "a").await,
        create(s, "b").await,
        create(s, "c").await,
    ];
    let mut remote = s.subscribe_remote().await.unwrap();
    let leases = s.acquire("w1", 10).await.unwrap();
    assert_eq!(leases.len(), 3);
    let mut heard = std::collections::HashMap::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while heard.len() < 3 {
            if let Some(keel_store::RemoteNotice::Changed(n)) = remote.next().await {
                heard.insert(n.chat_id, n.version);
            }
        }
    })
    .await
    .expect("a notice for every claimed chat");
    for chat in &chats {
        let claimed = s.get_chat(chat.id).await.unwrap();
        assert_eq!(heard.get(&chat.id), Some(&claimed.version), "{heard:?}");
        assert!(claimed.version > chat.version);
    }
}
