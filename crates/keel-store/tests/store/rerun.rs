//! Continuing a stopped reply and retrying a failed run (`continue reply`, `retry run`), and
//! the source a failed run's error keeps, on both backends.

use crate::common::*;
use keel_core::{ErrorKind, Part, Role};
use keel_store::{ChatStatus, LastError, NewMessage, StoreError, Transition};

both_backends!(
    continue_needs_an_idle_chat_ending_in_a_stopped_reply,
    retry_needs_a_failed_chat,
    a_failed_run_keeps_the_provider_and_address_of_its_error,
);

async fn continue_needs_an_idle_chat_ending_in_a_stopped_reply(db: TestDb) {
    let s = &db.store;
    let chat = idle(s, "hi").await;
    let err = s.continue_reply(chat.id).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NothingToContinue),
        "a whole reply: {err}"
    );

    // A run stopped by the user: its partial reply is stored, marked interrupted.
    send(s, chat.id, "tell me a story", keel_store::Busy::Queue).await;
    let lease = claim(s, "w1", chat.id).await;
    let err = s.continue_reply(chat.id).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                status: ChatStatus::Running,
                transition: Transition::ContinueReply
            }
        ),
        "{err}"
    );
    s.interrupt(chat.id).await.unwrap();
    let mut stopped = NewMessage::new(Role::Assistant, vec![Part::text("Once upon a ")]);
    stopped.interrupted = true;
    s.commit_step(&lease, vec![stopped]).await.unwrap();
    s.finish_interruption(&lease).await.unwrap();
    let before = s.list_messages(chat.id, None).await.unwrap();

    let running = s.continue_reply(chat.id).await.unwrap();
    assert_eq!(running.status, ChatStatus::Running);
    assert_eq!(running.worker_id, None, "any worker claims it");
    assert_eq!(
        s.list_messages(chat.id, None).await.unwrap(),
        before,
        "nothing is added: the worker continues the stopped reply"
    );
    let again = s.continue_reply(chat.id).await.unwrap_err();
    assert!(matches!(again, StoreError::Conflict { .. }), "{again}");
}

async fn retry_needs_a_failed_chat(db: TestDb) {
    let s = &db.store;
    let chat = idle(s, "hi").await;
    let err = s.retry_run(chat.id).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                status: ChatStatus::Waiting,
                transition: Transition::RetryRun
            }
        ),
        "{err}"
    );
    send(s, chat.id, "again", keel_store::Busy::Queue).await;
    let lease = claim(s, "w1", chat.id).await;
    s.fail_run(&lease, LastError::new(ErrorKind::Server, "boom"))
        .await
        .unwrap();
    let before = s.list_messages(chat.id, None).await.unwrap();
    let running = s.retry_run(chat.id).await.unwrap();
    assert_eq!(running.status, ChatStatus::Running);
    assert_eq!(running.last_error, None);
    assert_eq!(s.list_messages(chat.id, None).await.unwrap(), before);
    assert!(claim(s, "w2", chat.id).await.chat_id == chat.id);
}

async fn a_failed_run_keeps_the_provider_and_address_of_its_error(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w1", chat.id).await;
    let error = LastError {
        provider: Some("local".into()),
        url: Some("http://127.0.0.1:9/v1/chat/completions".into()),
        ..LastError::new(ErrorKind::InvalidRequest, "HTTP status 404")
    };
    s.fail_run(&lease, error.clone()).await.unwrap();
    assert_eq!(s.get_chat(chat.id).await.unwrap().last_error, Some(error));
}
