use super::*;
use crate::worker::test_support::{claimed, fenced_out, store};
use keel_core::{Part, Role};
use serde_json::json;

/// A store in `dir`, a group log on it, and `N` claimed chats each with its own run.
async fn runs<const N: usize>(
    dir: &tempfile::TempDir,
) -> (Arc<dyn Store>, GroupLog, [(RunKey, SharedLease); N]) {
    let store = store(dir).await;
    let mut runs = Vec::with_capacity(N);
    for _ in 0..N {
        runs.push((next_run_key(), claimed(&store).await));
    }
    let log = GroupLog::start(
        store.clone(),
        Arc::new(crate::hub::Hub::new()),
        crate::metrics::Metrics::new().live_log_writes,
    );
    let Ok(runs) = runs.try_into() else {
        unreachable!("N runs were pushed")
    };
    (store, log, runs)
}

fn entry(seq: i64) -> NewLiveEntry {
    NewLiveEntry {
        seq,
        payload: keel_store::JsonText::of(&json!({"event": "part", "data": seq})),
    }
}

#[tokio::test]
async fn one_flush_writes_the_waiting_parts_of_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, [(ka, a), (kb, b)]) = runs(&dir).await;
    let start_a = store.get_chat(current(&a).chat_id).await.unwrap().event_seq;
    let start_b = store.get_chat(current(&b).chat_id).await.unwrap().event_seq;
    log.append(ka, &a, entry(start_a + 1));
    log.append(kb, &b, entry(start_b + 1));
    log.append(ka, &a, entry(start_a + 2));
    // Flushing `a` writes `b`'s parts in the same transaction.
    log.flush(ka).await.unwrap();
    let logged = |chat| {
        let store = store.clone();
        async move { store.live_parts_after(chat, 0).await.unwrap().len() }
    };
    assert_eq!(logged(current(&a).chat_id).await, 2);
    assert_eq!(logged(current(&b).chat_id).await, 1);
    log.flush(kb).await.unwrap();
}

#[tokio::test]
async fn a_run_that_lost_its_chat_is_refused_and_its_commit_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, [(ka, a), (kb, b)]) = runs(&dir).await;
    // `b`'s chat is edited under its run: the history version fences it out.
    let chat_b = fenced_out(&store, &b).await;
    log.append(ka, &a, entry(1_000));
    log.append(kb, &b, entry(1_000));
    log.flush(ka).await.unwrap();
    let refused = log.flush(kb).await.unwrap_err();
    assert!(matches!(refused, StoreError::Fenced { .. }), "{refused}");
    assert!(store.live_parts_after(chat_b, 0).await.unwrap().is_empty());
    // The refusal is reported once; the run's commit is fenced by the store as well.
    log.flush(kb).await.unwrap();
    let commit = store
        .commit_step(
            &current(&b),
            vec![NewMessage::new(Role::Assistant, vec![Part::text("x")])],
        )
        .await;
    assert!(commit.is_err());
}

#[tokio::test]
async fn steps_committed_together_are_one_group_and_a_fenced_one_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (store, log, [(ka, a), (kb, b), (kc, c)]) = runs(&dir).await;
    let chat_b = fenced_out(&store, &b).await;
    let start_a = store.get_chat(current(&a).chat_id).await.unwrap().event_seq;
    log.append(ka, &a, entry(start_a + 1));
    let step = |text: &str| vec![NewMessage::new(Role::Assistant, vec![Part::text(text)])];
    let (ra, rb, rc) = tokio::join!(
        log.commit(ka, current(&a), step("to a")),
        log.commit(kb, current(&b), step("to b")),
        log.commit(kc, current(&c), step("to c")),
    );
    assert_eq!(ra.unwrap().len(), 1);
    assert!(matches!(rb, Err(StoreError::Fenced { .. })), "{rb:?}");
    assert_eq!(rc.unwrap().len(), 1);
    // `a`'s part was logged before its step, and the commit voided it.
    let chat_a = store.get_chat(current(&a).chat_id).await.unwrap();
    assert!(chat_a.event_seq > start_a + 1);
    assert!(
        store
            .live_parts_after(chat_a.id, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.list_messages(chat_b, None).await.unwrap().len(), 1);
    assert_eq!(
        store
            .list_messages(current(&c).chat_id, None)
            .await
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn only_a_database_of_this_process_alone_gets_the_long_window() {
    assert_eq!(batch_window("sqlite"), SOLE_WRITER_WINDOW);
    assert_eq!(batch_window("postgres"), SHARED_WINDOW);
    assert!(SOLE_WRITER_WINDOW > SHARED_WINDOW);
}

#[tokio::test]
async fn appended_parts_are_written_when_their_window_closes_without_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (a, b) = (claimed(&store).await, claimed(&store).await);
    let log = GroupLog::start(
        store.clone(),
        Arc::new(crate::hub::Hub::new()),
        crate::metrics::Metrics::new().live_log_writes,
    );
    let (ka, kb) = (next_run_key(), next_run_key());
    let (chat_a, chat_b) = (current(&a).chat_id, current(&b).chat_id);
    let start_a = store.get_chat(chat_a).await.unwrap().event_seq;
    let start_b = store.get_chat(chat_b).await.unwrap().event_seq;
    log.append(ka, &a, entry(start_a + 1));
    log.append(kb, &b, entry(start_b + 1));
    log.append(ka, &a, entry(start_a + 2));
    let logged = |chat| {
        let store = store.clone();
        async move { store.live_parts_after(chat, 0).await.unwrap().len() }
    };
    // Only the first part woke the writer; the window it opened writes all three. The
    // bound is generous: it only stops a writer that never writes from hanging the test.
    let mut windows = 0;
    while logged(chat_a).await < 2 || logged(chat_b).await < 1 {
        windows += 1;
        assert!(windows < 400, "the parts were never written");
        tokio::time::sleep(SHARED_WINDOW).await;
    }
    assert_eq!(store.get_chat(chat_a).await.unwrap().event_seq, start_a + 2);
    log.flush(ka).await.unwrap();
    log.flush(kb).await.unwrap();
}

#[tokio::test]
async fn runs_finished_together_are_one_group_and_a_fenced_one_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (a, b, c) = (
        claimed(&store).await,
        claimed(&store).await,
        claimed(&store).await,
    );
    let log = GroupLog::start(
        store.clone(),
        Arc::new(crate::hub::Hub::new()),
        crate::metrics::Metrics::new().live_log_writes,
    );
    let chat_b = current(&b).chat_id;
    let first = store.list_messages(chat_b, None).await.unwrap()[0].id;
    store
        .edit_message(chat_b, first, vec![Part::text("again")])
        .await
        .unwrap();
    let (ra, rb, rc) = tokio::join!(
        log.finish_run(current(&a)),
        log.finish_run(current(&b)),
        log.finish_run(current(&c)),
    );
    assert_eq!(ra.unwrap(), Next::Idle);
    assert!(matches!(rb, Err(StoreError::Fenced { .. })), "{rb:?}");
    assert_eq!(rc.unwrap(), Next::Idle);
    let status = |chat| {
        let store = store.clone();
        async move { store.get_chat(chat).await.unwrap().status }
    };
    assert_eq!(
        status(current(&a).chat_id).await,
        keel_store::ChatStatus::Waiting
    );
    assert_eq!(status(chat_b).await, keel_store::ChatStatus::Running);
    assert_eq!(
        status(current(&c).chat_id).await,
        keel_store::ChatStatus::Waiting
    );
}
