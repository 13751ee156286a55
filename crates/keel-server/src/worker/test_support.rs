//! What the worker modules' unit tests share: a store in a temporary directory and chats
//! claimed in it.

use std::sync::{Arc, Mutex};

use keel_core::Part;
use keel_store::{Chat, ChatId, NewChat, Store};

use crate::worker::leases::{SharedLease, current};

/// A fresh SQLite store in `dir`.
pub(super) async fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display());
    keel_store::open(&url).await.unwrap()
}

/// A new chat of alice's, waiting for a worker.
pub(super) async fn new_chat(store: &Arc<dyn Store>) -> Chat {
    store
        .create_chat(NewChat {
            owner: "alice".into(),
            model: "m".into(),
            parts: vec![Part::text("hi")],
            ..NewChat::default()
        })
        .await
        .unwrap()
}

/// A new chat, claimed by worker `w`, as a run holds its lease.
pub(super) async fn claimed(store: &Arc<dyn Store>) -> SharedLease {
    let chat = new_chat(store).await;
    let lease = store
        .acquire("w", 10)
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.chat_id == chat.id)
        .unwrap();
    Arc::new(Mutex::new(lease))
}

/// Edits the first message of the chat `run` holds, so that the new history version
/// fences the run out; returns the chat.
pub(super) async fn fenced_out(store: &Arc<dyn Store>, run: &SharedLease) -> ChatId {
    let chat = current(run).chat_id;
    let first = store.list_messages(chat, None).await.unwrap()[0].id;
    store
        .edit_message(chat, first, vec![Part::text("again")])
        .await
        .unwrap();
    chat
}
