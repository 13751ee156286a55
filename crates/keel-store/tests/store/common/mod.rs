//! Test databases for both backends and small conveniences shared by the suites.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use keel_core::{ManualClock, PendingToolCall};
use keel_core::{Part, Role};
use keel_store::{Busy, Chat, ChatId, Lease, NewChat, NewMessage, Store, StoreOptions};
use sqlx::Connection;

pub mod proxy;

/// A store on a fresh database, with a clock the test moves.
pub struct TestDb {
    pub store: Arc<dyn Store>,
    pub clock: Arc<ManualClock>,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    /// PostgreSQL: the base URL and the schema to drop afterwards.
    pg_schema: Option<(String, String)>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((base, schema)) = self.pg_schema.take() else {
            return;
        };
        // Best effort, on a thread of its own: Drop cannot await.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&base).await {
                    // A test that failed mid-transaction must not hang the suite here.
                    let _ = sqlx::query("SET lock_timeout = '3s'")
                        .execute(&mut conn)
                        .await;
                    let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

pub fn options(clock: &Arc<ManualClock>) -> StoreOptions {
    StoreOptions {
        clock: clock.clone(),
        max_connections: 4,
        // The tests' dates are the manual clock's.
        follow_database_clock: false,
        ..StoreOptions::default()
    }
}

pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single().unwrap(),
    ))
}

pub async fn sqlite_with(tweak: impl FnOnce(&mut StoreOptions)) -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/data/keel.db", dir.path().display());
    let clock = clock();
    let mut opts = options(&clock);
    tweak(&mut opts);
    let store = keel_store::open_with(&url, opts).await.unwrap();
    TestDb {
        store,
        clock,
        url,
        _dir: Some(dir),
        pg_schema: None,
    }
}

pub async fn sqlite() -> TestDb {
    sqlite_with(|_| {}).await
}

/// The PostgreSQL server under test: `KEEL_TEST_DATABASE_URL` (scripts/test sets it up).
/// Without it the PostgreSQL variants skip with a note on a developer's machine, and fail
/// when `CI` is set: there a skipped variant would be a test that cannot fail.
pub fn postgres_url() -> Option<String> {
    match std::env::var("KEEL_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some_and(|ci| !ci.is_empty()) => panic!(
            "KEEL_TEST_DATABASE_URL is unset and CI is set: the PostgreSQL tests must run \
             (scripts/test starts a server when none is given)"
        ),
        _ => {
            eprintln!("KEEL_TEST_DATABASE_URL is unset: skipping the PostgreSQL variant");
            None
        }
    }
}

/// A fresh schema in the PostgreSQL server under test, or `None` (see [`postgres_url`]).
pub async fn postgres_with(tweak: impl FnOnce(&mut StoreOptions)) -> Option<TestDb> {
    let base = postgres_url()?;
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&base).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options[search_path]={schema}");
    let clock = clock();
    let mut opts = options(&clock);
    tweak(&mut opts);
    let store = keel_store::open_with(&url, opts).await.unwrap();
    Some(TestDb {
        store,
        clock,
        url,
        _dir: None,
        pg_schema: Some((base, schema)),
    })
}

pub async fn postgres() -> Option<TestDb> {
    postgres_with(|_| {}).await
}

/// Runs each listed `async fn(TestDb)` once on SQLite and once on PostgreSQL.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::common::sqlite().await).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(db) = $crate::common::postgres().await {
                        super::$name(db).await;
                    }
                }
            }
        )*
    };
}

pub fn text(s: &str) -> Vec<Part> {
    vec![Part::text(s)]
}

pub fn assistant(s: &str) -> NewMessage {
    NewMessage::new(Role::Assistant, vec![Part::text(s)])
}

pub async fn create(store: &Arc<dyn Store>, s: &str) -> Chat {
    store
        .create_chat(NewChat {
            owner: "alice".into(),
            model: "test-model".into(),
            parts: text(s),
            ..NewChat::default()
        })
        .await
        .unwrap()
}

/// Claims `chat` for `worker`, failing the test if someone else holds it.
pub async fn claim(store: &Arc<dyn Store>, worker: &str, chat: ChatId) -> Lease {
    let leases = store.acquire(worker, 100).await.unwrap();
    leases
        .into_iter()
        .find(|l| l.chat_id == chat)
        .unwrap_or_else(|| panic!("{worker} could not claim {chat}"))
}

/// The lease of `chat` among those one claim returned, failing the test if it has none.
pub fn lease_for(leases: &[Lease], chat: ChatId) -> Lease {
    leases
        .iter()
        .find(|l| l.chat_id == chat)
        .unwrap_or_else(|| panic!("no lease for {chat}"))
        .clone()
}

/// A chat back at `waiting` after its first run.
pub async fn idle(store: &Arc<dyn Store>, s: &str) -> Chat {
    let chat = create(store, s).await;
    let lease = claim(store, "w0", chat.id).await;
    store
        .commit_step(&lease, vec![assistant("hello")])
        .await
        .unwrap();
    store.finish_run(&lease).await.unwrap();
    store.get_chat(chat.id).await.unwrap()
}

pub async fn send(
    store: &Arc<dyn Store>,
    chat: ChatId,
    s: &str,
    busy: Busy,
) -> keel_store::SendOutcome {
    store
        .send_message(chat, None, text(s), busy, None)
        .await
        .unwrap()
}

pub fn hours(h: i64) -> Duration {
    Duration::hours(h)
}

pub async fn enter_ra(s: &std::sync::Arc<dyn keel_store::Store>, lease: &keel_store::Lease) {
    s.commit_step(
        lease,
        vec![NewMessage::new(
            Role::Assistant,
            vec![
                Part::tool_call("c1", "pick", "{}", false),
                Part::tool_call("c2", "pick", "{}", false),
            ],
        )],
    )
    .await
    .unwrap();
    let calls = ["c1", "c2"]
        .map(|id| PendingToolCall {
            tool_call_id: id.into(),
            tool_name: "pick".into(),
            args: "{}".into(),
        })
        .to_vec();
    s.enter_requires_action(lease, calls, None).await.unwrap();
}

pub trait Now {
    fn clock_now(&self) -> chrono::DateTime<chrono::Utc>;
}

impl Now for TestDb {
    fn clock_now(&self) -> chrono::DateTime<chrono::Utc> {
        use keel_core::Clock;
        self.clock.now()
    }
}
