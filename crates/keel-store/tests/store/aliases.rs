//! Chat aliases (a name a client chose for a chat, per owner), on both backends.

use crate::common::*;

both_backends!(
    an_alias_names_one_chat_per_owner,
    an_alias_goes_with_its_chat
);

async fn an_alias_names_one_chat_per_owner(db: TestDb) {
    let s = &db.store;
    let first = create(s, "one").await;
    let second = create(s, "two").await;
    assert_eq!(s.chat_by_alias(&first.owner, "c-1").await.unwrap(), None);
    assert_eq!(
        s.claim_alias(&first.owner, "c-1", first.id).await.unwrap(),
        first.id
    );
    // A second claim of a taken name keeps the first chat.
    assert_eq!(
        s.claim_alias(&first.owner, "c-1", second.id).await.unwrap(),
        first.id
    );
    assert_eq!(
        s.chat_by_alias(&first.owner, "c-1").await.unwrap(),
        Some(first.id)
    );
    // Names are per owner.
    assert_eq!(s.chat_by_alias("someone-else", "c-1").await.unwrap(), None);
    assert!(s.claim_alias(&first.owner, "", first.id).await.is_err());
}

async fn an_alias_goes_with_its_chat(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "one").await;
    s.claim_alias(&chat.owner, "gone", chat.id).await.unwrap();
    s.delete_chat(chat.id).await.unwrap();
    assert_eq!(s.chat_by_alias(&chat.owner, "gone").await.unwrap(), None);
    let next = create(s, "two").await;
    assert_eq!(
        s.claim_alias(&next.owner, "gone", next.id).await.unwrap(),
        next.id
    );
}
