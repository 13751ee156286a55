//! PostgreSQL's `LISTEN` connection, which carries other replicas' changes: whenever it is
//! lost, subscribers are told to read again once it listens anew, whether the connection
//! comes back at once or only after the database refused it for a while.

use crate::common::*;
use futures::stream::BoxStream;
use futures::{FutureExt as _, StreamExt as _};
use keel_store::{ChatStatus, ListenRetryGate, RemoteNotice, StoreOptions};
use sqlx::{Connection as _, PgConnection};
use std::time::Duration;

/// Long enough for a reconnect on a loaded machine; the tests wait for events, not time.
const WAIT: Duration = Duration::from_secs(20);

/// A fresh database of its own on the server under test, so that its connections can be
/// told apart and refused, dropped when the test ends.
struct OwnDatabase {
    url: String,
    name: String,
    server: String,
}

impl OwnDatabase {
    async fn create() -> Option<Self> {
        let server = postgres_url()?;
        let name = format!("keel_listen_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let (prefix, _) = server.rsplit_once('/').unwrap();
        Some(Self {
            url: format!("{prefix}/{name}"),
            name,
            server,
        })
    }

    /// Runs `sql` through the server's own database: this one may be refusing connections.
    async fn admin(&self, sql: &str) {
        let mut admin = PgConnection::connect(&self.server).await.unwrap();
        sqlx::query(sql).execute(&mut admin).await.unwrap();
    }

    /// Ends the connections to this database whose last statement starts with `query`;
    /// returns how many ended.
    async fn terminate(&self, query: &str) -> usize {
        let mut admin = PgConnection::connect(&self.server).await.unwrap();
        let killed: Vec<(bool,)> = sqlx::query_as(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND query LIKE $2 || '%'",
        )
        .bind(&self.name)
        .bind(query)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        killed.len()
    }

    /// Whether a `LISTEN` connection to this database is open.
    async fn listening(&self) -> bool {
        let mut admin = PgConnection::connect(&self.server).await.unwrap();
        let (open,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'",
        )
        .bind(&self.name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
        open > 0
    }

    async fn drop_database(self) {
        self.admin(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await;
    }
}

/// Waits for a change of `chat` made on another replica.
async fn hear_change(remote: &mut BoxStream<'static, RemoteNotice>, chat: keel_store::ChatId) {
    let heard = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(RemoteNotice::Changed(notice)) = remote.next().await
                && notice.chat_id == chat
            {
                return notice;
            }
        }
    })
    .await
    .expect("another replica's change heard");
    assert_eq!(heard.status, ChatStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listen_connection_tells_subscribers_to_resync() {
    let Some(db) = OwnDatabase::create().await else {
        return;
    };
    let replica = keel_store::open(&db.url).await.unwrap();
    let other = keel_store::open(&db.url).await.unwrap();
    let mut remote = replica.subscribe_remote().await.unwrap();

    assert_eq!(
        db.terminate("LISTEN").await,
        1,
        "one LISTEN connection per process"
    );
    let first = tokio::time::timeout(WAIT, remote.next()).await.unwrap();
    assert_eq!(first, Some(RemoteNotice::Missed));
    // Listening again: another replica's change arrives.
    let chat = create(&other, "hi").await;
    hear_change(&mut remote, chat.id).await;
    drop((remote, replica, other));
    db.drop_database().await;
}

/// Every connection is lost while the database refuses new ones, so the listener cannot
/// take another from the pool and its attempts to connect are refused; once the database
/// accepts connections again, subscribers are told to read again, and only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_connection_back_after_the_database_refused_it_tells_subscribers_to_resync() {
    let Some(db) = OwnDatabase::create().await else {
        return;
    };
    let gate = ListenRetryGate::default();
    let options = StoreOptions {
        listen_retry_gate: Some(gate.clone()),
        ..StoreOptions::default()
    };
    let replica = keel_store::open_with(&db.url, options).await.unwrap();
    let other = keel_store::open(&db.url).await.unwrap();
    let mut remote = replica.subscribe_remote().await.unwrap();

    db.admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS false",
        db.name
    ))
    .await;
    assert!(db.terminate("").await >= 1);
    // The relay tried to listen again and was refused; the database comes back before its
    // next attempt, the moment a receive could re-open the connection without a word.
    tokio::time::timeout(WAIT, gate.failed_attempt())
        .await
        .expect("a refused attempt to listen again");
    assert!(
        remote.next().now_or_never().is_none(),
        "told to read again before listening again"
    );
    db.admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS true",
        db.name
    ))
    .await;
    gate.release();
    let first = tokio::time::timeout(WAIT, remote.next()).await.unwrap();
    assert_eq!(first, Some(RemoteNotice::Missed));
    assert!(db.listening().await, "told to read again before listening");
    let chat = create(&other, "hi").await;
    hear_change(&mut remote, chat.id).await;
    drop((remote, replica, other));
    db.drop_database().await;
}
