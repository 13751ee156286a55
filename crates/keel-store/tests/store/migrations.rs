//! Migrations are append-only: a shipped file never changes, and a database created by the
//! first released schema upgrades to the current one with its chats intact.

use std::borrow::Cow;
use std::path::Path;

use keel_core::{Part, PartKind, Role};
use keel_store::{Busy, ChatStatus, SendOutcome};
use sha2::{Digest, Sha256};
use sqlx::Connection;
use sqlx::migrate::Migrator;

/// Every migration file that shipped, with its SHA-256. A released file is never edited:
/// a database that applied it would not get the change (and sqlx refuses to start on a
/// changed checksum), and a renumbered one no longer matches the version databases
/// recorded when they applied it. A schema change is a new file with the next number, recorded here when it ships.
const SHIPPED: &[(&str, &str)] = &[
    (
        "postgres/0001_initial.sql",
        "8139a923498fb75c0494611b6dda54f05847c8493f8fca2a8b093bd184805a9b",
    ),
    (
        "postgres/0002_compaction.sql",
        "b4e720ffbbce29765a043bd77a742d774e962d467b39e31e81ac95c5481933d0",
    ),
    (
        "postgres/0003_chat_aliases.sql",
        "989620ebb14797694f8261e39d8a33223683e3e675534e12bfcb9fa46171e43f",
    ),
    (
        "postgres/0004_finish_reason.sql",
        "65c9437c916c5ec7efceedeab74b48208cbec82e83b082c5033fef8542bdc3f5",
    ),
    (
        "postgres/0005_last_error_source.sql",
        "9e145ce635e0f1667cf60311be55dfe2ec255862a585afe10712c2d3bcbca996",
    ),
    (
        "postgres/0006_branches.sql",
        "77bab0a4bb8460a34419994fcc1d95e2d07a8e10bb0678dc734fb3be2bcf790c",
    ),
    (
        "postgres/0007_live_parts_last_seq.sql",
        "b8974a4d1facb7605e1c7d5b9bcb0a85913237693ee80c0702dc1870ed254c98",
    ),
    (
        "postgres/0008_live_parts_unchecked_chat.sql",
        "c097f9b30e1e8b5ad47b3d90b7acb480ca81475b1b59dcafcf57018ce9d1793d",
    ),
    (
        "postgres/0009_usage.sql",
        "2a3ee640e4a08ab90e2928104063ea80fd382915839117048e6b6eba167ef064",
    ),
    (
        "postgres/0010_trace_contexts.sql",
        "6330cf376c3e4af15d0833feff029a289b6c90019a8a957761b183a7918989d3",
    ),
    (
        "sqlite/0001_initial.sql",
        "2ea8aa720d893a6e224236a93ef0df0d4ffe1f5fcc98f8ee3b13ba6ab903fef2",
    ),
    (
        "sqlite/0002_compaction.sql",
        "b4e720ffbbce29765a043bd77a742d774e962d467b39e31e81ac95c5481933d0",
    ),
    (
        "sqlite/0003_chat_aliases.sql",
        "989620ebb14797694f8261e39d8a33223683e3e675534e12bfcb9fa46171e43f",
    ),
    (
        "sqlite/0004_finish_reason.sql",
        "65c9437c916c5ec7efceedeab74b48208cbec82e83b082c5033fef8542bdc3f5",
    ),
    (
        "sqlite/0005_last_error_source.sql",
        "9e145ce635e0f1667cf60311be55dfe2ec255862a585afe10712c2d3bcbca996",
    ),
    (
        "sqlite/0006_branches.sql",
        "3230c4322d4af4897d3788d16b68ab909fc2b93cc259b07a719b00ee9d3df135",
    ),
    (
        "sqlite/0007_live_parts_appended.sql",
        "0f607add69a71d1be00074f514736bd848ec0fc6cf6b448c4c5ccf17cf3eb8a3",
    ),
    (
        "sqlite/0008_usage.sql",
        "b2483d8fba29f0d9281f0f12b5bb503ecaa2c732660d3213a0ddf86ab8f2d981",
    ),
    (
        "sqlite/0009_trace_contexts.sql",
        "6330cf376c3e4af15d0833feff029a289b6c90019a8a957761b183a7918989d3",
    ),
];

fn migrations_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
}

#[test]
fn shipped_migrations_never_change() {
    for (file, sha) in SHIPPED {
        let bytes = std::fs::read(migrations_dir().join(file))
            .unwrap_or_else(|e| panic!("shipped migration {file} is gone: {e}"));
        let actual: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            &actual, sha,
            "{file} shipped and must not change; put the change in a new migration"
        );
    }
}

#[test]
fn new_migrations_come_after_the_shipped_ones() {
    for backend in ["postgres", "sqlite"] {
        let last_shipped = SHIPPED
            .iter()
            .filter_map(|(f, _)| f.strip_prefix(&format!("{backend}/")))
            .max()
            .unwrap()
            .to_owned();
        for entry in std::fs::read_dir(migrations_dir().join(backend)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let shipped = SHIPPED
                .iter()
                .any(|(f, _)| *f == format!("{backend}/{name}"));
            assert!(
                shipped || name > last_shipped,
                "{backend}/{name} is inserted before the shipped {last_shipped}: migrations only append"
            );
        }
    }
}

/// A connection to a database of either backend, as the first release left it.
enum Conn {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl Conn {
    /// Connects and applies only the first released migration.
    async fn first_release(url: &str, migrator: &Migrator) -> Conn {
        let first = Migrator {
            migrations: Cow::Owned(migrator.migrations[..1].to_vec()),
            ..Migrator::DEFAULT
        };
        if url.starts_with("sqlite:") {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            first.run(&mut conn).await.unwrap();
            Conn::Sqlite(conn)
        } else {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            first.run(&mut conn).await.unwrap();
            Conn::Postgres(conn)
        }
    }

    async fn execute(&mut self, sql: &str) {
        match self {
            Conn::Sqlite(conn) => sqlx::raw_sql(sql).execute(conn).await.map(|_| ()),
            Conn::Postgres(conn) => sqlx::raw_sql(sql).execute(conn).await.map(|_| ()),
        }
        .unwrap();
    }
}

/// The parts column of a message holding `text`.
fn text_parts(text: &str) -> String {
    serde_json::to_string(&vec![Part::text(text)]).unwrap()
}

/// The insert of a waiting chat of alice's in the first release's columns, with its
/// counters.
fn a_waiting_chat_row(
    id: &str,
    version: i64,
    history_version: i64,
    event_seq: i64,
    last_message_id: i64,
) -> String {
    format!(
        "INSERT INTO chats (id, owner, model, status, archived, version, history_version, \
         event_seq, last_message_id, created_at, updated_at) \
         VALUES ('{id}', 'alice', 'm', 'waiting', FALSE, {version}, {history_version}, \
         {event_seq}, {last_message_id}, 1000, 1000);"
    )
}

/// A waiting chat with a question and its answer, in the first release's columns.
fn a_chat_of_the_first_release(id: &str) -> String {
    let (user, reply) = (text_parts("question"), text_parts("answer"));
    format!(
        "{} INSERT INTO messages (chat_id, id, role, parts, content_version, interrupted, \
         event_seq, created_at) VALUES \
         ('{id}', 1, 'user', '{user}', 1, FALSE, 1, 1000), \
         ('{id}', 2, 'assistant', '{reply}', 1, FALSE, 2, 1000);",
        a_waiting_chat_row(id, 3, 1, 2, 2)
    )
}

/// A chat whose question was edited before branches existed: the first reply was
/// soft-deleted, the second answers the edited question.
fn an_edited_chat_of_the_first_release(id: &str) -> String {
    let (user, reply) = (text_parts("question, edited"), text_parts("answer"));
    format!(
        "{} INSERT INTO messages (chat_id, id, role, parts, content_version, interrupted, \
         event_seq, created_at, deleted) VALUES \
         ('{id}', 1, 'user', '{user}', 2, FALSE, 3, 1000, FALSE), \
         ('{id}', 2, 'assistant', '{reply}', 1, FALSE, 2, 1000, TRUE), \
         ('{id}', 3, 'assistant', '{reply}', 1, FALSE, 4, 1000, FALSE);",
        a_waiting_chat_row(id, 6, 2, 4, 3)
    )
}

/// A waiting chat whose last step was logged but never committed (the daemon stopped
/// mid-reply): the parts numbered 2 to 4 wait in the live-part log for the resume.
fn a_chat_with_a_logged_step_of_the_first_release(id: &str) -> String {
    let user = text_parts("question");
    format!(
        "{} INSERT INTO messages (chat_id, id, role, parts, content_version, interrupted, \
         event_seq, created_at) VALUES ('{id}', 1, 'user', '{user}', 1, FALSE, 1, 1000); \
         INSERT INTO live_parts (chat_id, first_seq, last_seq, payloads) \
         VALUES ('{id}', 2, 3, '[{{\"n\":2}},{{\"n\":3}}]'), \
         ('{id}', 4, 4, '[{{\"n\":4}}]');",
        a_waiting_chat_row(id, 2, 1, 4, 1)
    )
}

async fn upgrade_and_continue(url: &str, migrator: &Migrator) {
    let mut conn = Conn::first_release(url, migrator).await;
    let id = uuid::Uuid::new_v4();
    conn.execute(&a_chat_of_the_first_release(&id.to_string()))
        .await;
    let edited = uuid::Uuid::new_v4();
    conn.execute(&an_edited_chat_of_the_first_release(&edited.to_string()))
        .await;
    let logged = uuid::Uuid::new_v4();
    conn.execute(&a_chat_with_a_logged_step_of_the_first_release(
        &logged.to_string(),
    ))
    .await;
    drop(conn);

    let store = keel_store::open(url).await.unwrap();
    let chat = store.get_chat(id).await.unwrap();
    assert_eq!(chat.status, ChatStatus::Waiting);
    assert!(!chat.compact_requested);
    let messages = store.list_messages(id, None).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].role, Role::Assistant);
    assert!(matches!(&messages[1].parts[0].kind, PartKind::Text { text } if text == "answer"));
    let outcome = store
        .send_message(id, None, vec![Part::text("more")], Busy::Queue, None)
        .await
        .unwrap();
    assert!(matches!(outcome, SendOutcome::Started { message_id: 3 }));
    // Existing chats became a single chain ending at their last message.
    let messages = store.list_messages(id, None).await.unwrap();
    let links: Vec<_> = messages.iter().map(|m| (m.id, m.parent_id)).collect();
    assert_eq!(links, vec![(1, None), (2, Some(1)), (3, Some(2))]);
    // Rows an edit deleted stay out of the tree: no branch, no sibling.
    let chat = store.get_chat(edited).await.unwrap();
    assert_eq!(chat.leaf_id, 3);
    let messages = store.list_messages(edited, None).await.unwrap();
    let links: Vec<_> = messages
        .iter()
        .map(|m| (m.id, m.parent_id, m.siblings.clone()))
        .collect();
    assert_eq!(links, vec![(1, None, vec![1]), (3, Some(1), vec![3])]);
    assert!(matches!(
        store.switch_branch(edited, 2).await.unwrap_err(),
        keel_store::StoreError::NotFound { .. }
    ));
    // The log of a step in progress survives the upgrade, read from any position.
    let entries = store.live_parts_after(logged, 0).await.unwrap();
    let seqs: Vec<_> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![2, 3, 4]);
    assert_eq!(entries[1].payload, serde_json::json!({ "n": 3 }));
    let after: Vec<_> = store
        .live_parts_after(logged, 3)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(after, vec![4]);
}

#[tokio::test]
async fn a_sqlite_database_of_the_first_release_upgrades() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/keel.db?mode=rwc", dir.path().display());
    upgrade_and_continue(&url, &sqlx::migrate!("./migrations/sqlite")).await;
}

#[tokio::test]
async fn a_postgres_database_of_the_first_release_upgrades() {
    let Ok(base) = std::env::var("KEEL_TEST_DATABASE_URL") else {
        eprintln!("KEEL_TEST_DATABASE_URL is unset: skipping the PostgreSQL upgrade");
        return;
    };
    let name = format!("keel_upgrade_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    let url = format!("{prefix}/{name}");
    upgrade_and_continue(&url, &sqlx::migrate!("./migrations/postgres")).await;
    let _ = sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await;
}
