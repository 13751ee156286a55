//! Two things at once, on both backends: queues behind client-side calls, stale writers,
//! edits of owned chats, interrupts seen through renewals, and what the sweeper purges.

use crate::common::*;
use keel_core::{Clock, PendingToolCall};
use keel_core::{ErrorKind, Part, Role};
use keel_store::{
    Busy, ChatStatus, Lease, NewChat, NewMessage, SendOutcome, StoreError, ToolRecord, ToolState,
};
use serde_json::json;

both_backends!(
    interrupting_a_chat_waiting_for_client_tools_runs_its_queue_head,
    an_expired_client_call_runs_the_queue_head,
    a_send_behind_a_stranded_queue_runs_after_it,
    a_renewal_reports_the_chats_status,
    a_checkpoint_from_an_earlier_step_is_never_loaded,
    a_run_that_lost_its_lease_cannot_checkpoint_or_start_tools,
    an_edit_of_an_owned_chat_numbers_above_its_unflushed_parts,
    old_idempotency_keys_and_finished_tool_records_are_purged,
    the_queue_heads_lease_is_granted_after_the_interrupt_of_the_run_before,
    a_read_dropped_while_it_opens_leaves_no_transaction_behind,
    a_catch_up_dropped_in_flight_leaves_its_connection_usable,
);

/// A reader that goes away while its read opens (a client that disconnects): the pooled
/// connection it took must not stay inside that read's transaction, or the next write on
/// it runs in a read-only transaction and fails.
async fn a_read_dropped_while_it_opens_leaves_no_transaction_behind(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    for round in 0..32 {
        // The reader is polled a little longer each round, so that in some round it goes
        // away with its BEGIN sent and not yet answered.
        abandon_after(s.get_chat(chat.id), round + 1).await;
        // Writes only: a read would run in the stale transaction unharmed and end it.
        renames_land(&db, chat.id, round).await;
    }
}

/// Polls `read` at most `polls` times, yielding in between, and drops it, finished or not.
async fn abandon_after<F: std::future::Future>(read: F, polls: usize) {
    let mut read = std::pin::pin!(read);
    for _ in 0..polls {
        if futures::poll!(read.as_mut()).is_ready() {
            break;
        }
        tokio::task::yield_now().await;
    }
}

/// Renames `chat` four times (`round {round}, write {n}`), each rename on a pooled
/// connection of its own, and checks that every one lands.
async fn renames_land(db: &TestDb, chat: keel_store::ChatId, round: usize) {
    for write in 0..4 {
        let title = format!("round {round}, write {write}");
        let update = keel_store::ChatUpdate {
            title: Some(title.clone()),
            model: None,
            system: None,
        };
        let named = db.store.update_chat(chat, update).await;
        assert_eq!(named.map(|c| c.title).ok().flatten(), Some(title));
    }
}

/// A catch-up or a run start (several reads of one snapshot) whose caller goes away while
/// they are in flight, at every point a few polls can reach: the connection goes back to
/// the pool out of any transaction, and its next borrowers read and write as usual.
async fn a_catch_up_dropped_in_flight_leaves_its_connection_usable(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    for round in 0..32 {
        if round % 2 == 0 {
            abandon_after(s.catch_up(chat.id, 0, 200), round + 1).await;
        } else {
            abandon_after(s.start_run(chat.id), round + 1).await;
        }
        renames_land(&db, chat.id, round).await;
        let read = s.catch_up(chat.id, 0, 200).await.unwrap();
        assert_eq!(
            read.chat.title.as_deref(),
            Some(&*format!("round {round}, write 3"))
        );
        assert_eq!(read.messages.len(), 1, "the user's message");
    }
}

/// Claims `chat` and leaves it `requires_action` with one pending call `c1`.
async fn waiting_for_a_client_call(db: &TestDb, chat: keel_store::ChatId) -> Lease {
    let s = &db.store;
    let lease = claim(s, "w", chat).await;
    s.commit_step(
        &lease,
        vec![NewMessage::new(
            Role::Assistant,
            vec![Part::tool_call("c1", "pick", "{}", false)],
        )],
    )
    .await
    .unwrap();
    let call = PendingToolCall {
        tool_call_id: "c1".into(),
        tool_name: "pick".into(),
        args: "{}".into(),
    };
    s.enter_requires_action(&lease, vec![call], Some(chrono::Duration::minutes(1)))
        .await
        .unwrap();
    lease
}

fn user_texts(messages: &[keel_store::StoredMessage]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| {
            m.parts
                .iter()
                .filter_map(|p| match &p.kind {
                    keel_core::PartKind::Text { text } => Some(text.clone()),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

async fn interrupting_a_chat_waiting_for_client_tools_runs_its_queue_head(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    waiting_for_a_client_call(&db, chat.id).await;
    assert!(matches!(
        send(s, chat.id, "queued", Busy::Queue).await,
        SendOutcome::Queued { .. }
    ));
    let c = s.interrupt(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Running, "the queued message runs");
    assert!(c.queued.is_empty());
    assert_eq!(c.worker_id, None, "any worker claims it");
    let messages = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(user_texts(&messages), ["hi", "queued"]);
    // The call's error result comes before the queued message.
    assert_eq!(messages[2].role, Role::Tool);
    claim(s, "w2", chat.id).await;
}

async fn an_expired_client_call_runs_the_queue_head(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    waiting_for_a_client_call(&db, chat.id).await;
    send(s, chat.id, "first", Busy::Queue).await;
    send(s, chat.id, "second", Busy::Queue).await;
    db.clock.advance(hours(1));
    assert_eq!(s.expire_pending_actions().await.unwrap(), vec![chat.id]);
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Running);
    assert_eq!(c.queued.len(), 1);
    let messages = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(user_texts(&messages), ["hi", "first"]);
}

async fn a_send_behind_a_stranded_queue_runs_after_it(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    send(s, chat.id, "queued", Busy::Queue).await;
    s.fail_run(
        &lease,
        keel_store::LastError::new(ErrorKind::InvalidRequest, "bad"),
    )
    .await
    .unwrap();
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!((c.status, c.queued.len()), (ChatStatus::Error, 1));

    let outcome = send(s, chat.id, "later", Busy::Queue).await;
    assert!(matches!(outcome, SendOutcome::Queued { .. }), "{outcome:?}");
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Running);
    assert_eq!(c.queued.len(), 1);
    assert_eq!(c.queued[0].parts, text("later"));
    let messages = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(user_texts(&messages), ["hi", "queued"]);
}

async fn a_renewal_reports_the_chats_status(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    assert_eq!(lease.status, ChatStatus::Running);
    assert_eq!(
        s.renew_lease(&lease).await.unwrap().status,
        ChatStatus::Running
    );
    s.interrupt(chat.id).await.unwrap();
    assert_eq!(
        s.renew_lease(&lease).await.unwrap().status,
        ChatStatus::Interrupting
    );
}

async fn a_checkpoint_from_an_earlier_step_is_never_loaded(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    s.put_checkpoint(&lease, json!({"text": "step one"}))
        .await
        .unwrap();
    assert_eq!(
        s.get_checkpoint(chat.id).await.unwrap(),
        Some(json!({"text": "step one"}))
    );
    s.commit_step(&lease, vec![assistant("step one")])
        .await
        .unwrap();
    assert_eq!(s.get_checkpoint(chat.id).await.unwrap(), None);
    // A checkpoint write that raced the commit lands after it: still not the next step's.
    s.put_checkpoint(&lease, json!({"text": "late"}))
        .await
        .unwrap();
    s.commit_step(&lease, vec![assistant("step two")])
        .await
        .unwrap();
    s.finish_run(&lease).await.unwrap();
    send(s, chat.id, "again", Busy::Queue).await;
    claim(s, "w2", chat.id).await;
    assert_eq!(s.get_checkpoint(chat.id).await.unwrap(), None);
}

async fn a_run_that_lost_its_lease_cannot_checkpoint_or_start_tools(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let stale = claim(s, "old", chat.id).await;
    db.clock.advance(hours(1));
    claim(s, "new", chat.id).await;
    let err = s
        .put_checkpoint(&stale, json!({"text": "foreign"}))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LostOwnership { .. }), "{err}");
    let record = ToolRecord {
        chat_id: chat.id,
        tool_call_id: "c1".into(),
        tool_name: "bash".into(),
        args: "{}".into(),
        state: ToolState::Started,
        result: None,
        is_error: false,
        started_at: db.clock.now(),
        finished_at: None,
    };
    let err = s.record_tool(&stale, record).await.unwrap_err();
    assert!(matches!(err, StoreError::LostOwnership { .. }), "{err}");
    assert_eq!(s.get_checkpoint(chat.id).await.unwrap(), None);
    assert!(s.tool_records(chat.id).await.unwrap().is_empty());
}

async fn an_edit_of_an_owned_chat_numbers_above_its_unflushed_parts(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    let seq = s.get_chat(chat.id).await.unwrap().event_seq;
    // The owner sent clients parts numbered above `seq` that its log never received.
    let user = s.list_messages(chat.id, None).await.unwrap()[0].id;
    let edited = s.edit_message(chat.id, user, text("edited")).await.unwrap();
    assert!(
        edited.event_seq > seq + keel_store::RECOVERY_SEQ_GAP,
        "{} after {seq}",
        edited.event_seq
    );
    let message = &s.messages_after_seq(chat.id, seq).await.unwrap()[0];
    assert!(message.event_seq > seq + keel_store::RECOVERY_SEQ_GAP);
    assert!(s.renew_lease(&lease).await.is_err());
}

async fn old_idempotency_keys_and_finished_tool_records_are_purged(db: TestDb) {
    let s = &db.store;
    let first = s
        .create_chat(NewChat {
            owner: "alice".into(),
            model: "m".into(),
            parts: text("hi"),
            idempotency_key: Some("k".into()),
            ..NewChat::default()
        })
        .await
        .unwrap();
    let lease = claim(s, "w", first.id).await;
    let record = ToolRecord {
        chat_id: first.id,
        tool_call_id: "c1".into(),
        tool_name: "bash".into(),
        args: "{}".into(),
        state: ToolState::Finished,
        result: Some(json!("ok")),
        is_error: false,
        started_at: db.clock.now(),
        finished_at: Some(db.clock.now()),
    };
    s.record_tool(&lease, record).await.unwrap();
    db.clock.advance(hours(25));
    // A running chat keeps its records: its run may resume from them.
    assert_eq!(s.purge_tool_records().await.unwrap(), 0);
    // A committed step clears its records at once; a run that failed before committing
    // leaves them behind for the purge.
    s.fail_run(
        &lease,
        keel_store::LastError::new(keel_core::ErrorKind::Server, "boom"),
    )
    .await
    .unwrap();
    assert_eq!(s.purge_tool_records().await.unwrap(), 1);
    assert!(s.tool_records(first.id).await.unwrap().is_empty());
    assert_eq!(s.purge_idempotency_keys().await.unwrap(), 1);
    assert_eq!(s.purge_idempotency_keys().await.unwrap(), 0);
}

/// A run's lease names the version its grant wrote. The queue head handed over when an
/// interrupted run ends runs on the same history version as that run, so only this tells
/// the interrupt (notified to other replicas, and read by renewals, possibly late) apart
/// from one of the queue head's run.
async fn the_queue_heads_lease_is_granted_after_the_interrupt_of_the_run_before(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "first").await;
    let lease = claim(s, "w", chat.id).await;
    assert_eq!(
        lease.granted_version,
        s.get_chat(chat.id).await.unwrap().version
    );
    send(s, chat.id, "queued", Busy::Queue).await;
    let interrupted = s.interrupt(chat.id).await.unwrap();
    assert_eq!(interrupted.status, ChatStatus::Interrupting);
    let renewed = s.renew_lease(&lease).await.unwrap();
    assert_eq!(renewed.status, ChatStatus::Interrupting);
    assert_eq!(
        renewed.granted_version, lease.granted_version,
        "renewals keep it"
    );
    let keel_store::Next::Continue { lease: head, .. } =
        s.finish_interruption(&lease).await.unwrap()
    else {
        panic!("the queued message runs next");
    };
    let now = s.get_chat(chat.id).await.unwrap();
    assert_eq!(head.history_version, lease.history_version);
    assert_eq!(head.granted_version, now.version);
    assert!(head.granted_version > interrupted.version);
}

/// PostgreSQL: the live path (the grouped log writer and reader) has connections of its
/// own. With every pooled connection of the store waiting on a chat row another session
/// holds, a run of another chat still logs its parts and its followers still read them:
/// followers on other replicas see parts only through the log, and a burst of requests
/// must not hold them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_path_is_not_held_back_by_a_pool_whose_connections_all_wait() {
    use sqlx::Connection;
    let pool_size = 2;
    let Some(db) = postgres_with(|o| o.max_connections = pool_size).await else {
        return;
    };
    let s = &db.store;
    // One locked chat per pooled connection: a second writer of one row would wait on the
    // first writer's tuple lock, not on the holder.
    let mut locked = Vec::new();
    for name in ["locked 1", "locked 2"] {
        let chat = create(s, name).await;
        locked.push((chat.id, claim(s, "w", chat.id).await));
    }
    let streaming = create(s, "streaming").await;
    let streaming_lease = claim(s, "w", streaming.id).await;
    let first = s.get_chat(streaming.id).await.unwrap().event_seq + 1;

    let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut holder)
        .await
        .unwrap();
    let mut held = holder.begin().await.unwrap();
    for (chat, _) in &locked {
        sqlx::query("SELECT id FROM chats WHERE id = $1 FOR UPDATE")
            .bind(chat.to_string())
            .execute(&mut *held)
            .await
            .unwrap();
    }
    // A write of each locked chat: each takes a pooled connection and waits on its row.
    let waiting: Vec<_> = locked
        .iter()
        .map(|(_, lease)| {
            let (s, lease) = (s.clone(), lease.clone());
            tokio::spawn(
                async move { s.set_retry_state(&lease, Some(json!({"attempt": 2}))).await },
            )
        })
        .collect();
    let mut watcher = sqlx::PgConnection::connect(&db.url).await.unwrap();
    loop {
        let blocked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
        )
        .bind(holder_pid)
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if blocked == i64::try_from(locked.len()).unwrap() {
            break;
        }
        tokio::task::yield_now().await;
    }

    // Without connections of its own, this would wait for the pool until its acquire
    // timeout and fail.
    let part = keel_store::NewLiveEntry {
        seq: first,
        payload: keel_store::JsonText::of(&json!({"event": "part", "data": "hello"})),
    };
    s.append_live_entries(&streaming_lease, std::slice::from_ref(&part))
        .await
        .unwrap();
    let read = s.live_parts_of(&[(streaming.id, first - 1)]).await.unwrap();
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].0, streaming.id);
    assert_eq!(read[0].1.iter().map(|e| e.seq).collect::<Vec<_>>(), [first]);

    held.rollback().await.unwrap();
    for write in waiting {
        write.await.unwrap().unwrap();
    }
}
