//! Transitions of the sweeps (stale leases, dead owners, overdue client-side calls), on
//! both backends.

use crate::common::*;
use keel_core::PendingToolCall;
use keel_core::Role;
use keel_store::ChatStatus;
use serde_json::json;

both_backends!(
    recover_stale_leases,
    owners_known_to_be_gone_are_released_at_once,
    taking_over_a_dead_owner_numbers_above_its_unflushed_parts,
    expire_pending_actions,
);

async fn recover_stale_leases(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    claim(s, "a", chat.id).await;
    assert!(s.recover_stale().await.unwrap().is_empty());
    db.clock.advance(chrono::Duration::minutes(5));
    assert_eq!(s.recover_stale().await.unwrap(), vec![chat.id]);
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!((c.status, c.worker_id), (ChatStatus::Running, None));
}

async fn owners_known_to_be_gone_are_released_at_once(db: TestDb) {
    let s = &db.store;
    let gone = create(s, "gone").await;
    let gone_lease = claim(s, "host~node~7", gone.id).await;
    let alive = create(s, "alive").await;
    let alive_lease = claim(s, "host~node~8", alive.id).await;
    let before = s.get_chat(gone.id).await.unwrap().event_seq;
    let owners = s.chat_owners("host~node~").await.unwrap();
    assert_eq!(owners.len(), 2, "{owners:?}");
    assert!(s.chat_owners("other~").await.unwrap().is_empty());
    // Leases still valid: only the named owner loses its chat, and at once.
    let released = s
        .release_owners(std::slice::from_ref(&gone_lease.worker_id))
        .await
        .unwrap();
    assert_eq!(released, vec![gone.id]);
    let c = s.get_chat(gone.id).await.unwrap();
    assert_eq!((c.status, c.worker_id), (ChatStatus::Running, None));
    assert!(c.event_seq >= before + keel_store::RECOVERY_SEQ_GAP);
    assert!(s.renew_lease(&gone_lease).await.is_err());
    s.renew_lease(&alive_lease).await.unwrap();
    assert!(
        s.release_owners(&["host~node~7".into()])
            .await
            .unwrap()
            .is_empty()
    );
}

async fn taking_over_a_dead_owner_numbers_above_its_unflushed_parts(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    s.append_live_parts(&lease, &[json!({"event": "part"})])
        .await
        .unwrap();
    let flushed = s.get_chat(chat.id).await.unwrap().event_seq;
    // Expired and taken over directly...
    db.clock.advance(chrono::Duration::minutes(5));
    claim(s, "b", chat.id).await;
    let taken = s.get_chat(chat.id).await.unwrap().event_seq;
    assert!(
        taken >= flushed + keel_store::RECOVERY_SEQ_GAP,
        "{taken} after {flushed}"
    );
    // ...or swept first: either way the numbers jump once per dead owner.
    db.clock.advance(chrono::Duration::minutes(5));
    assert_eq!(s.recover_stale().await.unwrap(), vec![chat.id]);
    let swept = s.get_chat(chat.id).await.unwrap().event_seq;
    assert!(swept >= taken + keel_store::RECOVERY_SEQ_GAP);
    let lease = claim(s, "c", chat.id).await;
    assert!(s.get_chat(chat.id).await.unwrap().event_seq < swept + keel_store::RECOVERY_SEQ_GAP);
    // Given back (a shutdown, or a database failure mid-run): the same jump.
    s.release_on_shutdown(&lease).await.unwrap();
    let released = s.get_chat(chat.id).await.unwrap().event_seq;
    assert!(released >= swept + keel_store::RECOVERY_SEQ_GAP);
}

async fn expire_pending_actions(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "hi").await;
    let lease = claim(s, "a", chat.id).await;
    s.enter_requires_action(
        &lease,
        vec![PendingToolCall {
            tool_call_id: "c".into(),
            tool_name: "t".into(),
            args: "{}".into(),
        }],
        Some(chrono::Duration::minutes(1)),
    )
    .await
    .unwrap();
    assert!(s.expire_pending_actions().await.unwrap().is_empty());
    db.clock.advance(chrono::Duration::minutes(2));
    assert_eq!(s.expire_pending_actions().await.unwrap(), vec![chat.id]);
    let c = s.get_chat(chat.id).await.unwrap();
    assert_eq!(c.status, ChatStatus::Waiting);
    let last = s.list_messages(chat.id, None).await.unwrap().pop().unwrap();
    assert_eq!(last.role, Role::Tool);
}
