//! PostgreSQL's `LISTEN` connection, which carries other replicas' changes: when it is
//! lost, subscribers are told to read again once it listens anew.

use crate::common::*;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use keel_store::{ChatStatus, RemoteNotice};
use sqlx::{Connection as _, PgConnection};
use std::time::Duration;

/// Long enough for a reconnect on a loaded machine; the tests wait for events, not time.
const WAIT: Duration = Duration::from_secs(20);

/// A fresh database of its own on the server under test, so that its connections can be
/// told apart, dropped when the test ends.
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

    /// Runs `sql` through the server's own database: a session cannot drop the database it
    /// is connected to.
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

/// The `host:port` of a database URL.
fn server_of(url: &str) -> &str {
    let (_, rest) = url.split_once("://").unwrap();
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, server)| server)
}

/// `url` with its `host:port` swapped for `address`.
fn through(url: &str, address: &str) -> String {
    url.replacen(server_of(url), address, 1)
}

/// The hole this closes: once a re-open had failed, the next receive could re-open the
/// connection by itself and say nothing, so a change made while it was down was never
/// read again. Here the first attempts to connect again fail, one in one round and two in
/// the other (the pool may first hand out a connection that died with the rest, which
/// fails without an attempt); whichever attempt then succeeds must be followed by a resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_connection_back_after_failed_attempts_tells_subscribers_to_resync() {
    let Some(db) = OwnDatabase::create().await else {
        return;
    };
    let other = keel_store::open(&db.url).await.unwrap();
    for turned_away in [1, 2] {
        let mut proxy = crate::common::proxy::Proxy::start(server_of(&db.url).to_owned()).await;
        let replica = keel_store::open(&through(&db.url, &proxy.address))
            .await
            .unwrap();
        let mut remote = replica.subscribe_remote().await.unwrap();
        let chat = create(&other, "heard while listening").await;
        hear_change(&mut remote, chat.id).await;

        proxy.turn_away(turned_away);
        proxy.cut().await;
        // Made while nobody listens: only a resync brings it to the subscribers.
        create(&other, "made while the connection is down").await;
        let first = tokio::time::timeout(WAIT, async {
            for _ in 0..turned_away {
                proxy.one_turned_away().await;
            }
            // The next attempt gets through; changes go on until the subscriber hears one.
            loop {
                create(&other, "made after the connection is back").await;
                let heard = tokio::time::timeout(Duration::from_millis(200), remote.next()).await;
                if let Ok(notice) = heard {
                    break notice;
                }
            }
        })
        .await
        .expect("the relay listens again");
        assert_eq!(
            first,
            Some(RemoteNotice::Missed),
            "a resync comes first after {turned_away} failed attempts"
        );
    }
    drop(other);
    db.drop_database().await;
}
