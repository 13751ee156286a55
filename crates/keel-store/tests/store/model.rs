//! Random interleavings of API transitions and worker actions, sequential (proptest) and
//! concurrent (tokio tasks), checked against the store's invariants: versions only grow,
//! at most one worker owns a chat, no acknowledged message is lost or duplicated, and
//! every chat can be driven back to `waiting`.
//!
//! Longer than most files: the reference model, its action generator and both drivers
//! are read together.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::*;
use chrono::Duration;
use keel_core::PendingToolCall;
use keel_core::{ErrorKind, Part, PartKind, Role};
use keel_store::{
    Busy, ChatId, ChatStatus, Lease, MessageId, NewMessage, Next, SendOutcome, StoreError,
    ToolResultInput,
};
use proptest::prelude::*;
use serde_json::json;

const CHATS: usize = 2;
const WORKERS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Send {
        chat: usize,
        interrupt: bool,
    },
    Edit {
        chat: usize,
        pick: usize,
    },
    Interrupt {
        chat: usize,
    },
    SubmitResults {
        chat: usize,
        correct: bool,
    },
    DeleteQueued {
        chat: usize,
        pick: usize,
    },
    PromoteQueued {
        chat: usize,
        pick: usize,
    },
    Acquire {
        worker: usize,
    },
    Append {
        worker: usize,
        chat: usize,
        n: usize,
    },
    Commit {
        worker: usize,
        chat: usize,
        interrupted: bool,
        tool_call: bool,
    },
    FinishRun {
        worker: usize,
        chat: usize,
    },
    FinishInterruption {
        worker: usize,
        chat: usize,
    },
    Fail {
        worker: usize,
        chat: usize,
    },
    EnterRequiresAction {
        worker: usize,
        chat: usize,
    },
    Release {
        worker: usize,
        chat: usize,
    },
    Renew {
        worker: usize,
        chat: usize,
    },
    Advance {
        secs: i64,
    },
    RecoverStale,
    ExpirePending,
}

fn op() -> impl Strategy<Value = Op> {
    let c = 0..CHATS;
    let w = 0..WORKERS;
    prop_oneof![
        3 => (c.clone(), any::<bool>()).prop_map(|(chat, interrupt)| Op::Send { chat, interrupt }),
        1 => (c.clone(), 0..8usize).prop_map(|(chat, pick)| Op::Edit { chat, pick }),
        2 => c.clone().prop_map(|chat| Op::Interrupt { chat }),
        1 => (c.clone(), any::<bool>()).prop_map(|(chat, correct)| Op::SubmitResults { chat, correct }),
        1 => (c.clone(), 0..4usize).prop_map(|(chat, pick)| Op::DeleteQueued { chat, pick }),
        1 => (c.clone(), 0..4usize).prop_map(|(chat, pick)| Op::PromoteQueued { chat, pick }),
        4 => w.clone().prop_map(|worker| Op::Acquire { worker }),
        2 => (w.clone(), c.clone(), 1..5usize).prop_map(|(worker, chat, n)| Op::Append { worker, chat, n }),
        4 => (w.clone(), c.clone(), any::<bool>(), any::<bool>())
            .prop_map(|(worker, chat, interrupted, tool_call)| Op::Commit { worker, chat, interrupted, tool_call }),
        3 => (w.clone(), c.clone()).prop_map(|(worker, chat)| Op::FinishRun { worker, chat }),
        2 => (w.clone(), c.clone()).prop_map(|(worker, chat)| Op::FinishInterruption { worker, chat }),
        1 => (w.clone(), c.clone()).prop_map(|(worker, chat)| Op::Fail { worker, chat }),
        1 => (w.clone(), c.clone()).prop_map(|(worker, chat)| Op::EnterRequiresAction { worker, chat }),
        1 => (w.clone(), c.clone()).prop_map(|(worker, chat)| Op::Release { worker, chat }),
        1 => (w.clone(), c.clone()).prop_map(|(worker, chat)| Op::Renew { worker, chat }),
        1 => (1..90i64).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::RecoverStale),
        1 => Just(Op::ExpirePending),
    ]
}

/// What the test knows: the leases each worker was ever given (kept after they went
/// stale, to exercise fencing), acknowledged message ids and the last seen versions.
struct Model {
    chats: Vec<ChatId>,
    leases: HashMap<(usize, ChatId), Lease>,
    acked: HashMap<ChatId, BTreeSet<MessageId>>,
    seen: HashMap<ChatId, (i64, i64, i64)>,
    next_text: usize,
}

/// Errors a well-behaved caller can get from a random sequence. Anything else (database
/// errors in particular) fails the test.
fn expected(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::Conflict { .. }
            | StoreError::LostOwnership { .. }
            | StoreError::Fenced { .. }
            | StoreError::QueueFull { .. }
            | StoreError::NotFound { .. }
            | StoreError::InvalidInput(_)
    )
}

fn ok_or_expected<T>(r: Result<T, StoreError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if expected(&e) => None,
        Err(e) => panic!("unexpected error: {e:?}"),
    }
}

impl Model {
    fn text(&mut self) -> String {
        self.next_text += 1;
        format!("m{}", self.next_text)
    }

    async fn apply(&mut self, db: &TestDb, op: &Op) {
        let s = &db.store;
        match *op {
            Op::Send { chat, interrupt } => {
                let id = self.chats[chat];
                let busy = if interrupt {
                    Busy::Interrupt
                } else {
                    Busy::Queue
                };
                let t = self.text();
                if let Some(SendOutcome::Started { message_id }) =
                    ok_or_expected(s.send_message(id, None, text(&t), busy, None).await)
                {
                    self.acked.entry(id).or_default().insert(message_id);
                }
            }
            Op::Edit { chat, pick } => {
                let id = self.chats[chat];
                let users: Vec<_> = s
                    .list_messages(id, None)
                    .await
                    .unwrap()
                    .into_iter()
                    .filter(|m| m.role == Role::User)
                    .collect();
                if users.is_empty() {
                    return;
                }
                let target = users[pick % users.len()].id;
                let t = self.text();
                if let Some(edited) = ok_or_expected(s.edit_message(id, target, text(&t)).await) {
                    // The edited message and what followed it move to a branch of their
                    // own; the new version is the current branch's last message.
                    let acked = self.acked.entry(id).or_default();
                    acked.retain(|m| *m < target);
                    acked.insert(edited.leaf_id);
                }
            }
            Op::Interrupt { chat } => {
                ok_or_expected(s.interrupt(self.chats[chat]).await);
            }
            Op::SubmitResults { chat, correct } => {
                let id = self.chats[chat];
                let c = s.get_chat(id).await.unwrap();
                let mut results: Vec<_> = c
                    .pending_tool_calls
                    .iter()
                    .map(|p| ToolResultInput {
                        tool_call_id: p.tool_call_id.clone(),
                        result: json!("ok"),
                        is_error: false,
                    })
                    .collect();
                if !correct {
                    results.push(ToolResultInput {
                        tool_call_id: "bogus".into(),
                        result: json!(null),
                        is_error: true,
                    });
                }
                let r = s.submit_tool_results(id, results).await;
                if !correct {
                    assert!(r.is_err(), "wrong tool ids must be refused");
                    assert_eq!(
                        s.get_chat(id).await.unwrap(),
                        c,
                        "a refused call changes nothing"
                    );
                }
                ok_or_expected(r);
            }
            Op::DeleteQueued { chat, pick } | Op::PromoteQueued { chat, pick } => {
                let id = self.chats[chat];
                let c = s.get_chat(id).await.unwrap();
                if c.queued.is_empty() {
                    return;
                }
                let q = c.queued[pick % c.queued.len()].id;
                if matches!(op, Op::DeleteQueued { .. }) {
                    ok_or_expected(s.delete_queued(id, q).await);
                } else {
                    ok_or_expected(s.promote_queued(id, q).await);
                }
            }
            Op::Acquire { worker } => {
                for lease in s.acquire(&format!("w{worker}"), 10).await.unwrap() {
                    // A claim makes every other worker's lease on the chat useless.
                    let c = s.get_chat(lease.chat_id).await.unwrap();
                    assert_eq!(c.worker_id.as_deref(), Some(lease.worker_id.as_str()));
                    self.leases.insert((worker, lease.chat_id), lease);
                }
            }
            Op::Append { worker, chat, n } => {
                let Some(lease) = self.lease(worker, chat) else {
                    return;
                };
                let parts: Vec<_> = (0..n).map(|i| json!({"delta": i})).collect();
                if let Some(range) = ok_or_expected(s.append_live_parts(&lease, &parts).await) {
                    assert_eq!(range.clone().count(), n);
                    self.assert_owner(db, &lease, false).await;
                }
            }
            Op::Commit {
                worker,
                chat,
                interrupted,
                tool_call,
            } => {
                let Some(lease) = self.lease(worker, chat) else {
                    return;
                };
                let t = self.text();
                let mut parts = vec![Part::text(t)];
                if tool_call {
                    parts.push(Part::tool_call(
                        format!("call-{}", self.next_text),
                        "pick",
                        "{}",
                        false,
                    ));
                }
                let mut msg = NewMessage::new(Role::Assistant, parts);
                msg.interrupted = interrupted;
                if let Some(ids) = ok_or_expected(s.commit_step(&lease, vec![msg]).await) {
                    self.acked.entry(lease.chat_id).or_default().extend(ids);
                    self.assert_owner(db, &lease, interrupted).await;
                    assert!(
                        s.live_parts_after(lease.chat_id, 0)
                            .await
                            .unwrap()
                            .is_empty()
                    );
                }
            }
            Op::FinishRun { worker, chat } | Op::FinishInterruption { worker, chat } => {
                let Some(lease) = self.lease(worker, chat) else {
                    return;
                };
                let r = if matches!(op, Op::FinishRun { .. }) {
                    s.finish_run(&lease).await
                } else {
                    s.finish_interruption(&lease).await
                };
                if let Some(Next::Continue {
                    lease: next,
                    message_id,
                }) = ok_or_expected(r)
                {
                    self.acked
                        .entry(next.chat_id)
                        .or_default()
                        .insert(message_id);
                    self.leases.insert((worker, next.chat_id), next);
                }
            }
            Op::Fail { worker, chat } => {
                let Some(lease) = self.lease(worker, chat) else {
                    return;
                };
                ok_or_expected(
                    s.fail_run(
                        &lease,
                        keel_store::LastError::new(ErrorKind::Server, "boom"),
                    )
                    .await,
                );
            }
            Op::EnterRequiresAction { worker, chat } => {
                let Some(lease) = self.lease(worker, chat) else {
                    return;
                };
                let call = format!("client-{}", self.next_text);
                self.next_text += 1;
                let step = NewMessage::new(
                    Role::Assistant,
                    vec![Part::tool_call(&call, "ask", "{}", false)],
                );
                if let Some(ids) = ok_or_expected(s.commit_step(&lease, vec![step]).await) {
                    self.acked.entry(lease.chat_id).or_default().extend(ids);
                    let deadline = Some(Duration::seconds(60));
                    let pending = vec![PendingToolCall {
                        tool_call_id: call,
                        tool_name: "ask".into(),
                        args: "{}".into(),
                    }];
                    ok_or_expected(s.enter_requires_action(&lease, pending, deadline).await);
                }
            }
            Op::Release { worker, chat } => {
                let Some(lease) = self.lease(worker, chat) else {
                    return;
                };
                ok_or_expected(s.release_on_shutdown(&lease).await);
            }
            Op::Renew { worker, chat } => {
                let Some(lease) = self.lease(worker, chat) else {
                    return;
                };
                if let Some(l) = ok_or_expected(s.renew_lease(&lease).await) {
                    self.leases.insert((worker, l.chat_id), l);
                }
            }
            Op::Advance { secs } => db.clock.advance(Duration::seconds(secs)),
            Op::RecoverStale => {
                s.recover_stale().await.unwrap();
            }
            Op::ExpirePending => {
                s.expire_pending_actions().await.unwrap();
            }
        }
    }

    fn lease(&self, worker: usize, chat: usize) -> Option<Lease> {
        self.leases.get(&(worker, self.chats[chat])).cloned()
    }

    /// A successful worker write means the worker owned the chat (or, for interrupted
    /// output, the chat was interrupting and released).
    async fn assert_owner(&self, db: &TestDb, lease: &Lease, interrupted: bool) {
        let c = db.store.get_chat(lease.chat_id).await.unwrap();
        let owned = c.worker_id.as_deref() == Some(lease.worker_id.as_str());
        let released_interrupting =
            interrupted && c.worker_id.is_none() && c.status == ChatStatus::Interrupting;
        assert!(
            owned || released_interrupting,
            "write by a non-owner: {c:?}"
        );
        assert_eq!(c.history_version, lease.history_version);
    }

    async fn check(&mut self, db: &TestDb) {
        for &id in &self.chats {
            let c = db.store.get_chat(id).await.unwrap();
            let prev = self.seen.get(&id).copied().unwrap_or((0, 0, 0));
            let now = (c.version, c.history_version, c.event_seq);
            assert!(
                now.0 >= prev.0 && now.1 >= prev.1 && now.2 >= prev.2,
                "{prev:?} -> {now:?}"
            );
            self.seen.insert(id, now);
            match c.status {
                ChatStatus::Waiting | ChatStatus::Error => {
                    assert!(c.worker_id.is_none(), "idle chat owned: {c:?}");
                    assert!(c.pending_tool_calls.is_empty());
                }
                ChatStatus::RequiresAction => {
                    assert!(c.worker_id.is_none());
                    assert!(!c.pending_tool_calls.is_empty());
                }
                ChatStatus::Running | ChatStatus::Interrupting => {
                    assert!(c.pending_tool_calls.is_empty());
                }
            }
            assert!(c.queued.len() <= 20);
            let msgs = db.store.list_messages(id, None).await.unwrap();
            let ids: Vec<_> = msgs.iter().map(|m| m.id).collect();
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "ids not increasing: {ids:?}"
            );
            assert!(ids.iter().all(|i| *i <= c.last_message_id));
            let stored: BTreeSet<_> = ids.iter().copied().collect();
            let acked = self.acked.get(&id).cloned().unwrap_or_default();
            assert!(
                acked.is_subset(&stored),
                "lost: {:?}",
                acked.difference(&stored).collect::<Vec<_>>()
            );
            let mut texts = BTreeSet::new();
            for m in &msgs {
                for p in &m.parts {
                    if let PartKind::Text { text } = &p.kind
                        && m.role == Role::Assistant
                    {
                        assert!(texts.insert(text.clone()), "duplicated {text}");
                    }
                }
            }
            let seqs: Vec<_> = db
                .store
                .messages_after_seq(id, 0)
                .await
                .unwrap()
                .iter()
                .map(|m| m.event_seq)
                .collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]));
            assert!(seqs.iter().all(|s| *s <= c.event_seq));
        }
    }
}

/// Drives a chat to `waiting` with ordinary moves.
async fn drive_to_waiting(db: &TestDb, id: ChatId) {
    let s = &db.store;
    for _ in 0..100 {
        let c = s.get_chat(id).await.unwrap();
        match c.status {
            ChatStatus::Waiting => return,
            ChatStatus::Error => {
                s.send_message(id, None, text("again"), Busy::Queue, None)
                    .await
                    .unwrap();
            }
            ChatStatus::RequiresAction => {
                s.interrupt(id).await.unwrap();
            }
            ChatStatus::Running | ChatStatus::Interrupting => {
                // Outlive any lease a test worker still holds.
                db.clock.advance(Duration::seconds(120));
                let leases = s.acquire("drainer", 100).await.unwrap();
                let lease = leases
                    .into_iter()
                    .find(|l| l.chat_id == id)
                    .expect("claimable");
                if c.status == ChatStatus::Interrupting {
                    s.finish_interruption(&lease).await.unwrap();
                } else {
                    s.finish_run(&lease).await.unwrap();
                }
                // Other chats claimed along the way are released again.
                s.recover_stale().await.unwrap();
            }
        }
    }
    panic!("chat {id} did not reach waiting");
}

async fn run_sequence(db: TestDb, ops: Vec<Op>) {
    let mut model = Model {
        chats: Vec::new(),
        leases: HashMap::new(),
        acked: HashMap::new(),
        seen: HashMap::new(),
        next_text: 0,
    };
    for i in 0..CHATS {
        let c = create(&db.store, &format!("start {i}")).await;
        model.acked.entry(c.id).or_default().insert(1);
        model.chats.push(c.id);
    }
    for op in &ops {
        model.apply(&db, op).await;
        model.check(&db).await;
    }
    for id in model.chats.clone() {
        drive_to_waiting(&db, id).await;
        // Any released chat got claimed by the drainer; give the clock room and recover.
        db.clock.advance(Duration::seconds(120));
        db.store.recover_stale().await.unwrap();
    }
    model.check(&db).await;
    for id in model.chats.clone() {
        drive_to_waiting(&db, id).await;
        assert_eq!(
            db.store.get_chat(id).await.unwrap().status,
            ChatStatus::Waiting
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, max_shrink_iters: 200, ..ProptestConfig::default() })]
    #[test]
    fn sqlite_random_sequences(ops in proptest::collection::vec(op(), 1..60)) {
        runtime().block_on(async { run_sequence(sqlite().await, ops).await });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, max_shrink_iters: 100, ..ProptestConfig::default() })]
    #[test]
    fn postgres_random_sequences(ops in proptest::collection::vec(op(), 1..60)) {
        runtime().block_on(async {
            if let Some(db) = postgres().await {
                run_sequence(db, ops).await;
            }
        });
    }
}

/// A small deterministic generator for the concurrent tasks.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

both_backends!(concurrent_workers_and_clients);

async fn concurrent_workers_and_clients(db: TestDb) {
    let store = db.store.clone();
    let mut chats = Vec::new();
    for i in 0..3 {
        chats.push(create(&store, &format!("c{i}")).await.id);
    }
    let owned: Arc<HashMap<ChatId, AtomicBool>> =
        Arc::new(chats.iter().map(|c| (*c, AtomicBool::new(false))).collect());
    let acked: Arc<std::sync::Mutex<Vec<(ChatId, MessageId)>>> = Arc::default();

    let mut tasks = Vec::new();
    for w in 0..3u64 {
        let store = store.clone();
        let owned = owned.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w + 1));
            let name = format!("w{w}");
            for _ in 0..25 {
                for mut lease in store.acquire(&name, 2).await.unwrap() {
                    assert!(
                        !owned[&lease.chat_id].swap(true, Ordering::SeqCst),
                        "two owners"
                    );
                    loop {
                        store
                            .append_live_parts(&lease, &[json!("a"), json!("b")])
                            .await
                            .unwrap();
                        let msg = NewMessage::new(
                            Role::Assistant,
                            vec![Part::text(format!("{name}-{}", rng.next(1 << 40)))],
                        );
                        let ids = store.commit_step(&lease, vec![msg]).await.unwrap();
                        acked
                            .lock()
                            .unwrap()
                            .extend(ids.into_iter().map(|i| (lease.chat_id, i)));
                        let status = store.get_chat(lease.chat_id).await.unwrap().status;
                        owned[&lease.chat_id].store(false, Ordering::SeqCst);
                        let next = if status == ChatStatus::Interrupting {
                            store.finish_interruption(&lease).await.unwrap()
                        } else if rng.next(5) == 0 {
                            store
                                .fail_run(
                                    &lease,
                                    keel_store::LastError::new(ErrorKind::Server, "x"),
                                )
                                .await
                                .unwrap();
                            Next::Idle
                        } else {
                            store.finish_run(&lease).await.unwrap()
                        };
                        match next {
                            Next::Idle => break,
                            Next::Continue {
                                lease: l,
                                message_id,
                            } => {
                                assert!(
                                    !owned[&l.chat_id].swap(true, Ordering::SeqCst),
                                    "two owners"
                                );
                                acked.lock().unwrap().push((l.chat_id, message_id));
                                lease = l;
                            }
                        }
                    }
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    {
        let store = store.clone();
        let chats = chats.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(42);
            for i in 0..60 {
                let chat = chats[rng.next(3) as usize];
                match rng.next(4) {
                    0 => {
                        store.interrupt(chat).await.unwrap();
                    }
                    n => {
                        let busy = if n == 1 { Busy::Interrupt } else { Busy::Queue };
                        match store
                            .send_message(chat, None, text(&format!("u{i}")), busy, None)
                            .await
                        {
                            Ok(SendOutcome::Started { message_id }) => {
                                acked.lock().unwrap().push((chat, message_id));
                            }
                            Ok(SendOutcome::Queued { .. }) | Err(StoreError::QueueFull { .. }) => {}
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for &chat in &chats {
        drive_to_waiting(&db, chat).await;
    }
    for &chat in &chats {
        drive_to_waiting(&db, chat).await;
        let ids: BTreeSet<_> = store
            .list_messages(chat, None)
            .await
            .unwrap()
            .iter()
            .map(|m| m.id)
            .collect();
        for (c, id) in acked.lock().unwrap().iter() {
            if *c == chat {
                assert!(ids.contains(id), "message {id} of {chat} lost");
            }
        }
    }
}
