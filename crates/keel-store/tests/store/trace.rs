//! Trace contexts, kept only while the daemon exports traces: a run starts from the request
//! that started it, a queued message's run from the request that queued it, and a deleted
//! chat or queued message leaves no context behind. With tracing off, none is written.

use keel_store::{Busy, SendOutcome, StoreOptions, trace};
use sqlx::Connection;

use crate::common::*;

const FIRST: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const QUEUED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn traced(options: &mut StoreOptions) {
    options.trace_runs = true;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_starts_from_its_requests_context_and_a_deleted_chat_keeps_none_sqlite() {
    runs_start_from_their_requests_context(sqlite_with(traced).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_starts_from_its_requests_context_and_a_deleted_chat_keeps_none_postgres() {
    if let Some(db) = postgres_with(traced).await {
        runs_start_from_their_requests_context(db).await;
    }
}

both_backends!(with_tracing_off_no_context_is_written);

async fn runs_start_from_their_requests_context(db: TestDb) {
    let s = &db.store;
    let chat = trace::scope(Some(FIRST.into()), create(s, "hi")).await;
    let start = s.start_run(chat.id).await.unwrap();
    assert_eq!(start.trace.parent.as_deref(), Some(FIRST));
    let lease = claim(s, "w", chat.id).await;
    let queued = trace::scope(Some(QUEUED.into()), send(s, chat.id, "later", Busy::Queue)).await;
    assert!(matches!(queued, SendOutcome::Queued { .. }), "{queued:?}");
    // The run ends and the queue head starts: its run is the queuing request's child.
    s.finish_run(&lease).await.unwrap();
    let start = s.start_run(chat.id).await.unwrap();
    assert_eq!(start.trace.parent.as_deref(), Some(QUEUED));
    assert_eq!(trace_rows(&db.url, "%").await, 1);

    let other = create(s, "another").await;
    let SendOutcome::Queued { queue_id } =
        trace::scope(Some(QUEUED.into()), send(s, other.id, "later", Busy::Queue)).await
    else {
        panic!("queued behind the run")
    };
    assert_eq!(trace_rows(&db.url, &queue_id.to_string()).await, 1);
    s.delete_queued(other.id, queue_id).await.unwrap();
    s.delete_chat(chat.id).await.unwrap();
    s.delete_chat(other.id).await.unwrap();
    assert_eq!(trace_rows(&db.url, "%").await, 0);
}

async fn with_tracing_off_no_context_is_written(db: TestDb) {
    let s = &db.store;
    let chat = trace::scope(Some(FIRST.into()), create(s, "hi")).await;
    let _lease = claim(s, "w", chat.id).await;
    trace::scope(Some(QUEUED.into()), send(s, chat.id, "later", Busy::Queue)).await;
    assert_eq!(
        s.start_run(chat.id).await.unwrap().trace,
        Default::default()
    );
    assert_eq!(trace_rows(&db.url, "%").await, 0);
}

/// The stored contexts whose id is like `pattern`.
async fn trace_rows(url: &str, pattern: &str) -> i64 {
    const SQL: &str = "SELECT COUNT(*) FROM trace_contexts WHERE id LIKE $1";
    if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        let count = sqlx::query_scalar(SQL).bind(pattern);
        count.fetch_one(&mut conn).await.unwrap()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        let count = sqlx::query_scalar(SQL).bind(pattern);
        count.fetch_one(&mut conn).await.unwrap()
    }
}
