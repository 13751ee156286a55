//! Transitions a client starts through the API, allowed and disallowed, on both backends.
//!
//! Longer than most files: one test per named transition, allowed and disallowed.

use crate::common::*;
use keel_core::{ErrorKind, Part, PartKind, Role};
use keel_store::{
    Busy, ChatStatus, ChatUpdate, NewChat, NewMessage, Next, SendOutcome, StoreError,
    ToolResultInput, Transition,
};
use serde_json::json;

both_backends!(
    create_then_read,
    a_chat_created_with_history_stores_its_turns_before_the_new_message,
    a_history_with_nothing_to_answer_is_refused_and_stores_nothing,
    send_to_idle_chat_starts_a_run,
    busy_queue_and_interrupt,
    edit_branches_and_fences,
    edit_rejects_bad_targets,
    interrupt_moves,
    tool_results_round_trip,
    queued_messages_delete_and_promote,
    archive_and_delete,
    idempotent_create_and_send,
    concurrent_repeats_of_one_key_create_one_chat,
    notices_are_published,
    prompt_history_is_repaired,
    rename_and_model_switch_change_only_what_they_name,
    a_generated_title_never_replaces_one_already_set,
    list_notices_name_the_owner_and_skip_live_parts,
    a_listing_carries_each_chats_own_queue,
    deleting_a_streaming_chat_deletes_its_log,
    status_and_queue_changes_take_no_event_number,
);

async fn create_then_read(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    assert_eq!(chat.status, ChatStatus::Running);
    assert_eq!((chat.version, chat.history_version), (1, 1));
    let read = s.get_chat(chat.id).await.unwrap();
    assert_eq!(read, chat);
    let msgs = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!((msgs[0].id, msgs[0].role), (1, Role::User));
    assert_eq!(msgs[0].parts, text("hi"));
    let other = create(s, "second").await;
    let list = s.list_chats(Some("alice"), None, 10).await.unwrap();
    assert_eq!(list.len(), 2);
    let page = s
        .list_chats(Some("alice"), Some(list[0].id), 10)
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id, list[1].id);
    assert!(
        s.list_chats(Some("bob"), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!([chat.id, other.id].contains(&list[0].id));
}

async fn send_to_idle_chat_starts_a_run(db: TestDb) {
    let s = &db.store;
    let chat = idle(s, "hi").await;
    assert_eq!(chat.status, ChatStatus::Waiting);
    assert_eq!(chat.worker_id, None);
    let out = send(s, chat.id, "again", Busy::Queue).await;
    assert_eq!(out, SendOutcome::Started { message_id: 3 });
    let after = s.get_chat(chat.id).await.unwrap();
    assert_eq!(after.status, ChatStatus::Running);
    assert!(after.version > chat.version);
}

async fn busy_queue_and_interrupt(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w1", chat.id).await;
    let SendOutcome::Queued { queue_id: q1 } = send(s, chat.id, "later", Busy::Queue).await else {
        panic!("expected queued");
    };
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().status,
        ChatStatus::Running
    );
    let SendOutcome::Queued { queue_id: q2 } = send(s, chat.id, "now", Busy::Interrupt).await
    else {
        panic!("expected queued");
    };
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Interrupting);
    assert_eq!(
        c.queued.iter().map(|q| q.id).collect::<Vec<_>>(),
        vec![q2, q1]
    );
    let next = s.finish_interruption(&lease).await.unwrap();
    let Next::Continue { lease, message_id } = next else {
        panic!("expected the queue head to run");
    };
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Running);
    assert_eq!(c.worker_id.as_deref(), Some(lease.worker_id.as_str()));
    assert!(lease.worker_id.starts_with("w1."), "{}", lease.worker_id);
    assert_eq!(c.queued.len(), 1);
    let msgs = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(msgs.last().unwrap().id, message_id);
    assert_eq!(msgs.last().unwrap().parts, text("now"));
    // The next finishes run the remaining queued message, then the chat idles.
    let Next::Continue { lease, .. } = s.finish_run(&lease).await.unwrap() else {
        panic!("expected the last queued message to run");
    };
    assert_eq!(s.finish_run(&lease).await.unwrap(), Next::Idle);
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().status,
        ChatStatus::Waiting
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_limit_is_enforced() {
    for db in [
        Some(sqlite_with(|o| o.max_queue = 2).await),
        postgres_with(|o| o.max_queue = 2).await,
    ]
    .into_iter()
    .flatten()
    {
        let s = &db.store;
        let chat = create(s, "hi").await;
        send(s, chat.id, "1", Busy::Queue).await;
        send(s, chat.id, "2", Busy::Queue).await;
        let before = s.get_chat(chat.id).await.unwrap();
        let err = s
            .send_message(chat.id, None, text("3"), Busy::Interrupt, None)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::QueueFull { limit: 2 }), "{err}");
        assert_eq!(s.get_chat(chat.id).await.unwrap(), before);
    }
}

async fn edit_branches_and_fences(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "first").await;
    let lease = claim(s, "w1", chat.id).await;
    s.commit_step(&lease, vec![assistant("reply")])
        .await
        .unwrap();
    s.append_live_parts(&lease, &[json!({"text": "par"})])
        .await
        .unwrap();
    send(s, chat.id, "queued", Busy::Queue).await;
    let edited = s
        .edit_message(chat.id, 1, text("first, edited"))
        .await
        .unwrap();
    assert_eq!(edited.status, ChatStatus::Running);
    assert_eq!(edited.history_version, chat.history_version + 1);
    assert_eq!(edited.worker_id, None);
    assert!(edited.queued.is_empty());
    // The edit is a new first message beside the old one, which keeps its reply.
    let msgs = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!((msgs[0].id, msgs[0].parent_id), (3, None));
    assert_eq!(msgs[0].parts, text("first, edited"));
    assert_eq!(msgs[0].siblings, vec![1, 3]);
    let old = s.branch_messages(chat.id, 1, None, None).await.unwrap();
    assert_eq!(old.iter().map(|m| m.id).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(old[0].parts, text("first"));
    assert_eq!(old[1].parent_id, Some(1));
    assert!(s.live_parts_after(chat.id, 0).await.unwrap().is_empty());
    // The worker that generated from the old history is fenced out.
    let err = s
        .commit_step(&lease, vec![assistant("stale")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Fenced {
                expected: 1,
                actual: 2,
                ..
            }
        ),
        "{err}"
    );
    let mut stale = assistant("stale partial");
    stale.interrupted = true;
    let err = s.commit_step(&lease, vec![stale]).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    assert!(matches!(
        s.append_live_parts(&lease, &[json!(1)]).await.unwrap_err(),
        StoreError::Fenced { .. }
    ));
    assert_eq!(s.list_messages(chat.id, None).await.unwrap().len(), 1);
    // A fresh claim works at the new history version; message ids are never reused.
    let lease2 = claim(s, "w2", chat.id).await;
    assert_eq!(lease2.history_version, 2);
    let ids = s
        .commit_step(&lease2, vec![assistant("new")])
        .await
        .unwrap();
    assert_eq!(ids, vec![4]);
    let msgs = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(msgs[1].parent_id, Some(3));
    assert_eq!(s.get_chat(chat.id).await.unwrap().leaf_id, 4);
}

async fn edit_rejects_bad_targets(db: TestDb) {
    let s = &db.store;
    let chat = idle(s, "hi").await;
    let err = s.edit_message(chat.id, 2, text("x")).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err}");
    let err = s.edit_message(chat.id, 99, text("x")).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    assert_eq!(s.get_chat(chat.id).await.unwrap(), chat);
    assert_eq!(s.list_messages(chat.id, None).await.unwrap().len(), 2);
}

async fn interrupt_moves(db: TestDb) {
    let s = &db.store;
    // idle: nothing changes
    let chat = idle(s, "hi").await;
    let same = s.interrupt(chat.id).await.unwrap();
    assert_eq!(same.version, chat.version);
    assert_eq!(same.status, ChatStatus::Waiting);
    // running -> interrupting, idempotent
    let chat = create(s, "run").await;
    let c = s.interrupt(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Interrupting);
    let again = s.interrupt(chat.id).await.unwrap();
    assert_eq!(again.version, c.version);
    let lease = claim(s, "w", chat.id).await;
    assert_eq!(s.finish_interruption(&lease).await.unwrap(), Next::Idle);
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().status,
        ChatStatus::Waiting
    );
    // requires_action -> waiting with error results
    let chat = create(s, "tools").await;
    let lease = claim(s, "w", chat.id).await;
    enter_ra(s, &lease).await;
    let c = s.interrupt(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Waiting);
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

async fn tool_results_round_trip(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "tools").await;
    let err = s.submit_tool_results(chat.id, vec![]).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                status: ChatStatus::Running,
                transition: Transition::SubmitToolResults
            }
        ),
        "{err}"
    );
    let lease = claim(s, "w", chat.id).await;
    enter_ra(s, &lease).await;
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::RequiresAction);
    assert_eq!(c.worker_id, None);
    let r = |id: &str| ToolResultInput {
        tool_call_id: id.into(),
        result: json!({"ok": id}),
        is_error: false,
    };
    for bad in [
        vec![r("c1")],
        vec![r("c1"), r("c3")],
        vec![r("c1"), r("c1")],
        vec![r("c1"), r("c2"), r("c3")],
    ] {
        let err = s.submit_tool_results(chat.id, bad).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{err}");
        assert_eq!(s.get_chat(chat.id).await.unwrap(), c);
    }
    let c2 = s
        .submit_tool_results(chat.id, vec![r("c2"), r("c1")])
        .await
        .unwrap();
    assert_eq!(c2.status, ChatStatus::Running);
    let last = s.list_messages(chat.id, None).await.unwrap().pop().unwrap();
    assert_eq!(last.role, Role::Tool);
    let ids: Vec<_> = last.parts.iter().filter_map(|p| p.tool_call_id()).collect();
    assert_eq!(ids, vec!["c1", "c2"]);
    // requires_action + interrupting send answers the calls and runs the message.
    let lease = claim(s, "w", chat.id).await;
    enter_ra(s, &lease).await;
    let out = send(s, chat.id, "never mind", Busy::Interrupt).await;
    assert!(matches!(out, SendOutcome::Started { .. }));
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Running);
    assert!(c.pending_tool_calls.is_empty());
}

async fn queued_messages_delete_and_promote(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    let mut ids = Vec::new();
    for t in ["a", "b", "c"] {
        let SendOutcome::Queued { queue_id } = send(s, chat.id, t, Busy::Queue).await else {
            panic!()
        };
        ids.push(queue_id);
    }
    let c = s.promote_queued(chat.id, ids[2]).await.unwrap();
    assert_eq!(c.status, ChatStatus::Interrupting);
    assert_eq!(
        c.queued.iter().map(|q| q.id).collect::<Vec<_>>(),
        vec![ids[2], ids[0], ids[1]]
    );
    let c = s.delete_queued(chat.id, ids[0]).await.unwrap();
    assert_eq!(c.queued.len(), 2);
    let err = s.delete_queued(chat.id, ids[0]).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }));
    let err = s
        .promote_queued(chat.id, uuid::Uuid::new_v4())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }));
    let Next::Continue { lease, .. } = s.finish_interruption(&lease).await.unwrap() else {
        panic!()
    };
    let msgs = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(msgs.last().unwrap().parts, text("c"));
    // Promoting on an idle chat starts the message at once.
    let Next::Continue { lease, .. } = s.finish_run(&lease).await.unwrap() else {
        panic!()
    };
    s.fail_run(
        &lease,
        keel_store::LastError::new(ErrorKind::Server, "boom"),
    )
    .await
    .unwrap();
    let q = match send(s, chat.id, "x", Busy::Queue).await {
        SendOutcome::Started { .. } => None,
        SendOutcome::Queued { queue_id } => Some(queue_id),
    };
    assert!(q.is_none(), "an errored chat takes new messages at once");
}

async fn archive_and_delete(db: TestDb) {
    let s = &db.store;
    let chat = idle(s, "hi").await;
    let a = s.set_archived(chat.id, true).await.unwrap();
    assert!(a.archived);
    let again = s.set_archived(chat.id, true).await.unwrap();
    assert_eq!(again.version, a.version);
    assert!(!s.set_archived(chat.id, false).await.unwrap().archived);
    s.delete_chat(chat.id).await.unwrap();
    assert!(matches!(
        s.get_chat(chat.id).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
    assert!(matches!(
        s.delete_chat(chat.id).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
    assert!(matches!(
        s.list_messages(chat.id, None).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
    assert!(matches!(
        s.get_checkpoint(chat.id).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
}

async fn a_chat_created_with_history_stores_its_turns_before_the_new_message(db: TestDb) {
    let s = &db.store;
    let history = vec![
        NewMessage::new(Role::User, text("first")),
        NewMessage::new(
            Role::Assistant,
            vec![Part::tool_call("c1", "lookup", "{}", false)],
        ),
        NewMessage::new(
            Role::Tool,
            vec![Part::tool_result("c1", "lookup", json!("42"), false, false)],
        ),
        assistant("it is 42"),
    ];
    let chat = s
        .create_chat(NewChat {
            owner: "alice".into(),
            model: "m".into(),
            history: history.clone(),
            parts: text("second"),
            ..NewChat::default()
        })
        .await
        .unwrap();
    assert_eq!(chat.status, ChatStatus::Running);
    let stored = s.list_messages(chat.id, None).await.unwrap();
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User
        ]
    );
    assert_eq!(stored[2].parts, history[2].parts);
    assert_eq!(stored[4].parts, text("second"));
    // Tool results at the end are what the first run answers: no new user message.
    let answered = s
        .create_chat(NewChat {
            owner: "alice".into(),
            model: "m".into(),
            history: history[..3].to_vec(),
            ..NewChat::default()
        })
        .await
        .unwrap();
    let stored = s.list_messages(answered.id, None).await.unwrap();
    assert_eq!(stored.last().map(|m| m.role), Some(Role::Tool));
    assert_eq!(s.load_prompt_history(answered.id).await.unwrap().len(), 3);
}

async fn a_history_with_nothing_to_answer_is_refused_and_stores_nothing(db: TestDb) {
    let s = &db.store;
    let refused = [
        // Ends with the model's own reply.
        (
            vec![NewMessage::new(Role::User, text("q")), assistant("a")],
            vec![],
        ),
        // A system message is not a turn.
        (
            vec![NewMessage::new(Role::System, text("be brief"))],
            text("q"),
        ),
        // An empty turn.
        (vec![NewMessage::new(Role::Assistant, vec![])], text("q")),
    ];
    for (history, parts) in refused {
        let error = s
            .create_chat(NewChat {
                owner: "alice".into(),
                model: "m".into(),
                history,
                parts,
                ..NewChat::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
    }
    assert!(s.list_chats(None, None, 10).await.unwrap().is_empty());
}

async fn idempotent_create_and_send(db: TestDb) {
    let s = &db.store;
    let req = NewChat {
        owner: "alice".into(),
        model: "m".into(),
        parts: text("hi"),
        idempotency_key: Some("k1".into()),
        ..NewChat::default()
    };
    let a = s.create_chat(req.clone()).await.unwrap();
    let b = s.create_chat(req.clone()).await.unwrap();
    assert_eq!(a.id, b.id);
    assert_eq!(s.list_chats(None, None, 10).await.unwrap().len(), 1);
    // Another user's key is another key.
    let mut other = req.clone();
    other.owner = "bob".into();
    assert_ne!(s.create_chat(other).await.unwrap().id, a.id);
    let lease = claim(s, "w", a.id).await;
    s.finish_run(&lease).await.unwrap();
    let first = s
        .send_message(a.id, None, text("x"), Busy::Queue, Some("s1"))
        .await
        .unwrap();
    let again = s
        .send_message(a.id, None, text("x"), Busy::Queue, Some("s1"))
        .await
        .unwrap();
    assert_eq!(first, again);
    assert_eq!(s.list_messages(a.id, None).await.unwrap().len(), 2);
    // Sent as another owner, the chat is not there: not its key's first answer, not a new
    // message, not a change of the chat.
    let before = s.get_chat(a.id).await.unwrap();
    for key in [Some("s1"), Some("s2"), None] {
        let refused = s
            .send_message(a.id, Some("bob"), text("y"), Busy::Queue, key)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, StoreError::NotFound { what: "chat" }),
            "{refused}"
        );
    }
    assert_eq!(s.get_chat(a.id).await.unwrap(), before);
    assert_eq!(s.list_messages(a.id, None).await.unwrap().len(), 2);
    // As its owner, the key still answers as before, and a new one sends.
    let owned = s
        .send_message(a.id, Some("alice"), text("x"), Busy::Queue, Some("s1"))
        .await
        .unwrap();
    assert_eq!(owned, first);
    s.send_message(a.id, Some("alice"), text("z"), Busy::Queue, Some("s2"))
        .await
        .unwrap();
    let sent = s.list_messages(a.id, None).await.unwrap().len()
        + s.get_chat(a.id).await.unwrap().queued.len();
    assert_eq!(sent, 2 + before.queued.len() + 1);
    // After a day the key is forgotten.
    db.clock.advance(hours(25));
    assert!(s.purge_idempotency_keys().await.unwrap() >= 1);
    let c = s.create_chat(req).await.unwrap();
    assert_ne!(c.id, a.id);
}

async fn concurrent_repeats_of_one_key_create_one_chat(db: TestDb) {
    let req = NewChat {
        owner: "alice".into(),
        model: "m".into(),
        parts: text("hi"),
        idempotency_key: Some("same".into()),
        ..NewChat::default()
    };
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let s = db.store.clone();
            let req = req.clone();
            tokio::spawn(async move { s.create_chat(req).await.unwrap().id })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(db.store.list_chats(None, None, 10).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_changes_nothing() {
    for db in [
        Some(sqlite_with(|o| o.max_content_bytes = 200).await),
        postgres_with(|o| o.max_content_bytes = 200).await,
    ]
    .into_iter()
    .flatten()
    {
        let s = &db.store;
        let chat = idle(s, "hi").await;
        let big = text(&"x".repeat(500));
        let unknown = uuid::Uuid::new_v4();
        let errs = [
            s.send_message(chat.id, None, big.clone(), Busy::Queue, None)
                .await
                .map(|_| ())
                .unwrap_err(),
            s.send_message(chat.id, None, vec![], Busy::Queue, None)
                .await
                .map(|_| ())
                .unwrap_err(),
            s.edit_message(chat.id, 1, big.clone())
                .await
                .map(|_| ())
                .unwrap_err(),
            s.create_chat(NewChat {
                owner: "alice".into(),
                parts: big.clone(),
                ..NewChat::default()
            })
            .await
            .map(|_| ())
            .unwrap_err(),
        ];
        for e in errs {
            assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
        }
        let not_found = [
            s.send_message(unknown, None, text("x"), Busy::Queue, None)
                .await
                .map(|_| ())
                .unwrap_err(),
            s.interrupt(unknown).await.map(|_| ()).unwrap_err(),
            s.get_chat(unknown).await.map(|_| ()).unwrap_err(),
            s.set_archived(unknown, true).await.map(|_| ()).unwrap_err(),
        ];
        for e in not_found {
            assert!(matches!(e, StoreError::NotFound { .. }), "{e}");
        }
        assert_eq!(s.get_chat(chat.id).await.unwrap(), chat);
        assert_eq!(s.list_messages(chat.id, None).await.unwrap().len(), 2);
        assert_eq!(s.list_chats(None, None, 10).await.unwrap().len(), 1);
    }
}

async fn notices_are_published(db: TestDb) {
    let s = &db.store;
    let mut local = s.subscribe();
    let mut remote = s.subscribe_remote().await.unwrap();
    let chat = create(s, "hi").await;
    let n = local.recv().await.unwrap();
    assert_eq!(
        (n.chat_id, n.version, n.status),
        (chat.id, 1, ChatStatus::Running)
    );
    s.interrupt(chat.id).await.unwrap();
    let n = local.recv().await.unwrap();
    assert_eq!((n.version, n.status), (2, ChatStatus::Interrupting));
    use futures::StreamExt;
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            if let keel_store::RemoteNotice::Changed(n) = remote.next().await.unwrap()
                && n.chat_id == chat.id
                && n.version == 2
            {
                return n;
            }
        }
    })
    .await
    .expect("remote notice");
    assert_eq!(got.status, ChatStatus::Interrupting);
    s.delete_chat(chat.id).await.unwrap();
    assert!(local.recv().await.unwrap().deleted);
}

async fn prompt_history_is_repaired(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    s.commit_step(
        &lease,
        vec![NewMessage::new(
            Role::Assistant,
            vec![
                Part::text("let me look"),
                Part::tool_call("c1", "read", "{\"pa", false),
            ],
        )],
    )
    .await
    .unwrap();
    let history = s.load_prompt_history(chat.id).await.unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[2].role, Role::Tool);
    assert!(matches!(
        &history[2].parts[0].kind,
        PartKind::ToolResult { tool_call_id, is_error: true, result, .. }
            if tool_call_id == "c1" && result == &json!(keel_core::INTERRUPTED_RESULT)
    ));
    // Stored history is untouched.
    assert_eq!(s.list_messages(chat.id, None).await.unwrap().len(), 2);
}

#[tokio::test]
async fn migrate_creates_the_file_and_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/keel.db");
    keel_store::migrate(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert!(path.exists());
    // Twice is fine.
    keel_store::migrate(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert!(matches!(
        keel_store::open("mysql://x").await.map(|_| ()).unwrap_err(),
        StoreError::InvalidInput(_)
    ));
}

async fn rename_and_model_switch_change_only_what_they_name(db: TestDb) {
    let s = &db.store;
    let chat = idle(s, "hi").await;
    let renamed = s
        .update_chat(
            chat.id,
            ChatUpdate {
                title: Some("Trip plans".into()),
                model: None,
                system: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed.title.as_deref(), Some("Trip plans"));
    assert_eq!(renamed.model, chat.model);
    assert_eq!(renamed.status, chat.status);
    assert_eq!(renamed.event_seq, chat.event_seq, "no chat event is taken");
    let switched = s
        .update_chat(
            chat.id,
            ChatUpdate {
                title: None,
                model: Some("other".into()),
                system: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(switched.model, "other");
    assert_eq!(switched.title.as_deref(), Some("Trip plans"));
    // The same values again write nothing.
    let same = s
        .update_chat(
            chat.id,
            ChatUpdate {
                title: Some("Trip plans".into()),
                model: Some("other".into()),
                system: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(same.version, switched.version);
    // A new system prompt changes only that, and holds for the chat's next prompts.
    let instructed = s
        .update_chat(
            chat.id,
            ChatUpdate {
                system: Some("Be brief.".into()),
                ..ChatUpdate::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(instructed.system.as_deref(), Some("Be brief."));
    assert_eq!(instructed.model, "other");
    assert_eq!(instructed.title.as_deref(), Some("Trip plans"));
    assert_eq!(s.get_chat(chat.id).await.unwrap().system, instructed.system);
    let missing = s
        .update_chat(uuid::Uuid::new_v4(), ChatUpdate::default())
        .await
        .unwrap_err();
    assert!(matches!(missing, StoreError::NotFound { .. }), "{missing}");
}

async fn a_generated_title_never_replaces_one_already_set(db: TestDb) {
    let s = &db.store;
    let chat = idle(s, "hi").await;
    assert!(s.name_chat(chat.id, "Greeting").await.unwrap());
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().title.as_deref(),
        Some("Greeting")
    );
    assert!(!s.name_chat(chat.id, "Something else").await.unwrap());
    s.update_chat(
        chat.id,
        ChatUpdate {
            title: Some("Mine".into()),
            model: None,
            system: None,
        },
    )
    .await
    .unwrap();
    assert!(!s.name_chat(chat.id, "Later").await.unwrap());
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().title.as_deref(),
        Some("Mine")
    );
}

async fn list_notices_name_the_owner_and_skip_live_parts(db: TestDb) {
    let s = &db.store;
    let mut local = s.subscribe();
    let chat = create(s, "hi").await;
    let n = local.recv().await.unwrap();
    assert!(n.listing && n.owner == chat.owner, "{n:?}");
    let lease = claim(s, "w", chat.id).await;
    while local.try_recv().is_ok() {}
    s.append_live_parts(&lease, &[json!({"type": "text", "text": "x"})])
        .await
        .unwrap();
    let n = local.recv().await.unwrap();
    assert!(!n.listing, "a live part leaves the list alone: {n:?}");
    s.update_chat(
        chat.id,
        ChatUpdate {
            title: Some("T".into()),
            model: None,
            system: None,
        },
    )
    .await
    .unwrap();
    assert!(local.recv().await.unwrap().listing);
    s.set_archived(chat.id, true).await.unwrap();
    assert!(local.recv().await.unwrap().listing);
    s.finish_run(&lease).await.unwrap();
    let n = local.recv().await.unwrap();
    assert!(n.listing, "a status change shows in the list: {n:?}");
    s.delete_chat(chat.id).await.unwrap();
    let n = local.recv().await.unwrap();
    assert!(n.listing && n.deleted && n.owner == chat.owner, "{n:?}");
}

async fn a_listing_carries_each_chats_own_queue(db: TestDb) {
    let s = &db.store;
    let busy = create(s, "busy").await;
    let idle = create(s, "idle").await;
    let SendOutcome::Queued { queue_id: first } = send(s, busy.id, "first", Busy::Queue).await
    else {
        panic!("a running chat queues")
    };
    let SendOutcome::Queued { queue_id: second } = send(s, busy.id, "second", Busy::Queue).await
    else {
        panic!("a running chat queues")
    };
    let list = s.list_chats(Some("alice"), None, 10).await.unwrap();
    let listed = |id| list.iter().find(|c| c.id == id).unwrap();
    let queued: Vec<_> = listed(busy.id).queued.iter().map(|q| q.id).collect();
    assert_eq!(queued, vec![first, second]);
    assert!(listed(idle.id).queued.is_empty());
    // The listing says what reading the chat alone says.
    assert_eq!(listed(busy.id), &s.get_chat(busy.id).await.unwrap());
}

/// On PostgreSQL the live-part log has no foreign key to cascade by: deleting a chat in
/// the middle of a step removes its log rows itself, and the run's next append is refused.
async fn deleting_a_streaming_chat_deletes_its_log(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w1", chat.id).await;
    s.append_live_parts(&lease, &[json!({"type": "text", "text": "par"})])
        .await
        .unwrap();
    let kept = create(s, "other").await;
    let kept_lease = claim(s, "w1", kept.id).await;
    s.append_live_parts(&kept_lease, &[json!({"type": "text", "text": "tial"})])
        .await
        .unwrap();
    s.delete_chat(chat.id).await.unwrap();
    assert_eq!(log_rows(&db.url, chat.id).await, 0);
    assert_eq!(log_rows(&db.url, kept.id).await, 1);
    assert!(matches!(
        s.append_live_parts(&lease, &[json!({"type": "text", "text": "late"})])
            .await
            .unwrap_err(),
        StoreError::NotFound { .. }
    ));
    assert_eq!(log_rows(&db.url, chat.id).await, 0);
}

/// Rows of the chat's live-part log, counted past the store.
async fn log_rows(url: &str, chat: keel_store::ChatId) -> i64 {
    use sqlx::Connection;
    const SQL: &str = "SELECT COUNT(*) FROM live_parts WHERE chat_id = $1";
    if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(SQL)
            .bind(chat.to_string())
            .fetch_one(&mut conn)
            .await
            .unwrap()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query_scalar(SQL)
            .bind(chat.to_string())
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }
}

/// A running chat's owner numbers live parts the store does not hold yet: a state change
/// numbered from the stored row would take one of their numbers.
async fn status_and_queue_changes_take_no_event_number(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    let seq = s.get_chat(chat.id).await.unwrap().event_seq;
    let SendOutcome::Queued { queue_id } = send(s, chat.id, "later", Busy::Queue).await else {
        panic!("queued behind the run")
    };
    assert_eq!(s.get_chat(chat.id).await.unwrap().event_seq, seq, "queued");
    let deleted = s.delete_queued(chat.id, queue_id).await.unwrap();
    assert_eq!(deleted.event_seq, seq, "deleted from the queue");
    let interrupted = s.interrupt(chat.id).await.unwrap();
    assert_eq!(interrupted.status, ChatStatus::Interrupting);
    assert_eq!(interrupted.event_seq, seq, "interrupted");
    s.finish_interruption(&lease).await.unwrap();
    let idle = s.get_chat(chat.id).await.unwrap();
    assert_eq!(idle.status, ChatStatus::Waiting);
    assert_eq!(idle.event_seq, seq, "finished");
}
