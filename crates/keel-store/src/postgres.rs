//! The PostgreSQL backend: row locks (`FOR UPDATE`, `SKIP LOCKED` for sweeps) serialise
//! writers per chat, and `NOTIFY keel_chat_changes` tells other replicas what changed.

mod batches;
mod clock;

pub(crate) use clock::on_database_clock;

use std::str::FromStr;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection, Postgres};
use tokio::sync::broadcast;

use crate::error::Result;
use crate::ops::{Backend, TxOps, notice_payload, notice_payloads, parse_notices};
use crate::types::{ChangeNotice, RemoteNotice, StoreOptions};

pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// The channel replicas LISTEN on.
pub const NOTICE_CHANNEL: &str = "keel_chat_changes";

pub(crate) enum PgTx {
    Tx(sqlx::Transaction<'static, Postgres>),
    /// A pooled connection in autocommit mode, for a read of one statement.
    Single(PoolConnection<Postgres>),
}

impl PgTx {
    async fn conn(&mut self) -> Result<&mut PgConnection> {
        match self {
            PgTx::Tx(tx) => Ok(tx),
            PgTx::Single(conn) => Ok(conn),
        }
    }

    fn begin_with_next(&mut self) -> bool {
        false
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        if let PgTx::Tx(tx) = *self {
            tx.commit().await?;
        }
        Ok(())
    }

    async fn abort(self: Box<Self>) -> Result<()> {
        if let PgTx::Tx(tx) = *self {
            tx.rollback().await?;
        }
        Ok(())
    }
}

tx_ops!(
    PgTx,
    db = Postgres,
    lock = " FOR UPDATE",
    begin = "",
    skip_locked = " FOR UPDATE SKIP LOCKED",
    // A join drives the delete from each chat's cut through the index.
    delete_by_cut = (
        "DELETE FROM live_parts l USING cut WHERE l.chat_id = cut.chat_id AND l.last_seq ",
        " cut.seq"
    ),
    // Two forms, as `IS NOT DISTINCT FROM` would not use the index on `(chat_id, parent_id)`.
    siblings = ", COALESCE(CASE WHEN messages.parent_id IS NULL \
                THEN (SELECT json_agg(s.id)::text FROM messages s \
                      WHERE s.chat_id = messages.chat_id AND s.parent_id IS NULL \
                      AND NOT s.deleted AND COALESCE(s.kind, '') <> 'summary') \
                ELSE (SELECT json_agg(s.id)::text FROM messages s \
                      WHERE s.chat_id = messages.chat_id AND s.parent_id = messages.parent_id \
                      AND NOT s.deleted AND COALESCE(s.kind, '') <> 'summary') END, '[]') \
                AS siblings",
    notify = notify_replicas,
    extra = {
        async fn notify_all(&mut self, notices: &[ChangeNotice]) -> Result<()> {
            let payloads = notice_payloads(notices)?;
            // One round trip for a whole group of chats.
            sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
                .bind(NOTICE_CHANNEL)
                .bind(payloads)
                .execute(self.conn().await?)
                .await?;
            Ok(())
        }

        async fn append_live_rows(&mut self, rows: &[crate::ops::LiveRow]) -> Result<()> {
            batches::append_live_rows(self.conn().await?, rows).await
        }

        async fn append_live_rows_notifying(
            &mut self,
            rows: &[crate::ops::LiveRow],
            notices: &[ChangeNotice],
        ) -> Result<()> {
            if notices.is_empty() {
                return self.append_live_rows(rows).await;
            }
            let payloads = notice_payloads(notices)?;
            batches::append_live_rows_notifying(self.conn().await?, rows, NOTICE_CHANNEL, &payloads)
                .await
        }

        async fn lock_chats(&mut self, ids: &[String]) -> Result<Vec<crate::rows::ChatCols>> {
            batches::lock_chats(self.conn().await?, ids).await
        }

        async fn lock_fences(&mut self, ids: &[String]) -> Result<Vec<crate::rows::FenceCols>> {
            batches::lock_fences(self.conn().await?, ids).await
        }

        async fn set_lease_expiries(&mut self, expiries: &[(String, i64)]) -> Result<()> {
            batches::set_lease_expiries(self.conn().await?, expiries).await
        }

        async fn live_after_many(
            &mut self,
            positions: &[(String, i64)],
        ) -> Result<Vec<crate::ops::ChatLiveRow>> {
            batches::live_after_many(self.conn().await?, positions).await
        }
    },
);

/// `pg_notify` inside the transaction: delivered exactly when it commits.
async fn notify_replicas(conn: &mut PgConnection, notice: &ChangeNotice) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(NOTICE_CHANNEL)
        .bind(notice_payload(notice)?)
        .execute(conn)
        .await?;
    Ok(())
}

pub(crate) struct PgBackend {
    pool: PgPool,
    /// The live path's connections: the grouped writer's ([`Backend::begin_grouped_write`])
    /// and the grouped log reader's ([`Backend::begin_grouped_read`]). While a thousand
    /// requests wait for `pool`, parts still reach the log every window and the followers
    /// of other replicas' runs read them at once.
    live_pool: PgPool,
    /// Other replicas' notices, from one `LISTEN` connection shared by every subscriber of
    /// this process (started by the first): a connection per subscriber would drain the pool.
    remote: tokio::sync::OnceCell<broadcast::Sender<RemoteNotice>>,
}

/// Notices a slow subscriber may fall behind by; beyond it, it misses some (every user of
/// remote notices also polls, so a missed notice only delays).
const REMOTE_BUFFER: usize = 4096;

impl PgBackend {
    async fn remote_notices(&self) -> Result<broadcast::Sender<RemoteNotice>> {
        let sender = self
            .remote
            .get_or_try_init(|| async {
                let listener = listen(&self.pool).await?;
                let (sender, _) = broadcast::channel(REMOTE_BUFFER);
                tokio::spawn(relay_notices(self.pool.clone(), listener, sender.clone()));
                Ok::<_, crate::error::StoreError>(sender)
            })
            .await?;
        Ok(sender.clone())
    }
}

/// A listener connected and listening to [`NOTICE_CHANNEL`].
async fn listen(pool: &PgPool) -> std::result::Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(NOTICE_CHANNEL).await?;
    Ok(listener)
}

/// Forwards `LISTEN` notifications to the process's subscribers for as long as the process
/// runs. Notices sent while the connection is down are lost, so every re-opened
/// connection is followed by [`RemoteNotice::Missed`] (subscribers read again):
/// `PgListener` re-opens a lost connection by itself and says so (`Ok(None)`); after any
/// error the relay opens a new listener of its own rather than leave the re-opening to the
/// next receive, which would re-open it without a word.
async fn relay_notices(
    pool: PgPool,
    mut listener: PgListener,
    sender: broadcast::Sender<RemoteNotice>,
) {
    loop {
        // No subscriber at the moment is fine: the next one starts from now.
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                for notice in parse_notices(notification.payload()) {
                    let _ = sender.send(RemoteNotice::Changed(notice));
                }
            }
            // The connection was lost and is listening again.
            Ok(None) => {
                tracing::info!("the LISTEN connection was lost; subscribers resynchronise");
                let _ = sender.send(RemoteNotice::Missed);
            }
            Err(error) => {
                tracing::warn!(%error, "listening for other replicas' changes failed; listening anew");
                listener = listen_anew(&pool).await;
                let _ = sender.send(RemoteNotice::Missed);
            }
        }
    }
}

/// A new listener, retried every second until it listens.
async fn listen_anew(pool: &PgPool) -> PgListener {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        match listen(pool).await {
            Ok(listener) => return listener,
            Err(error) => tracing::debug!(%error, "listening again failed; retrying"),
        }
    }
}

/// How long a pooled connection may have been idle and still be used without a ping.
const IDLE_BEFORE_PING: std::time::Duration = std::time::Duration::from_secs(1);

/// The session settings of every connection: the URL's, with JIT compilation off unless
/// the URL's `options` name it. Every statement here is a short lookup by key; a grouped
/// one over many chats crosses `jit_above_cost` on its row estimates alone and spent longer
/// in JIT compilation (tens of milliseconds, each time) than running.
fn connect_options(url: &str) -> Result<PgConnectOptions> {
    let options = PgConnectOptions::from_str(url)?;
    let names_jit = options.get_options().is_some_and(|o| o.contains("jit"));
    Ok(if names_jit {
        options
    } else {
        options.options([("jit", "off")])
    })
}

/// Connections of the live path's own pool: the grouped writer and the grouped log reader
/// are one task each, and each runs one transaction or statement at a time.
const LIVE_PATH_CONNECTIONS: u32 = 2;

impl PgBackend {
    /// The pool of ordinary transactions.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }
}

pub(crate) async fn connect(url: &str, opts: &StoreOptions) -> Result<PgBackend> {
    let options = connect_options(url)?;
    let pool = pool_options(opts.max_connections.max(2))
        .connect_with(options.clone())
        .await?;
    MIGRATOR.run(&pool).await?;
    // Opened on first use: a daemon that streams nothing holds no connection of it.
    let live_pool = pool_options(LIVE_PATH_CONNECTIONS).connect_lazy_with(options);
    Ok(PgBackend {
        pool,
        live_pool,
        remote: tokio::sync::OnceCell::new(),
    })
}

fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        // A connection in use moments ago is not checked again: the check is a round trip
        // of its own before every transaction. One idle for longer is, so a server restart
        // costs no failed transaction once the pool has been quiet.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > IDLE_BEFORE_PING {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// Opens a transaction on a task of its own, so that dropping the caller cannot cut its
/// `BEGIN` short. sqlx (0.8) counts a transaction as open only once the server has answered
/// `BEGIN`: a future dropped while it is in flight (a client that disconnects in the middle
/// of a read) leaves the pooled connection inside a transaction nothing ends, and the next
/// borrower's statements run in it — a write in a stale read-only transaction fails, one in
/// a stale write transaction shares its fate. On its own task the `BEGIN` completes, and a
/// transaction nobody takes any more is dropped, which rolls it back.
async fn begin_detached(pool: &PgPool, statement: &'static str) -> Result<PgTx> {
    let pool = pool.clone();
    let begun = tokio::spawn(async move { pool.begin_with(statement).await })
        .await
        // Only a panic in sqlx or a runtime shutting down ends the task early.
        .map_err(|_| sqlx::Error::WorkerCrashed)??;
    Ok(PgTx::Tx(begun))
}

#[async_trait]
impl Backend for PgBackend {
    async fn begin_write(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(begin_detached(&self.pool, "BEGIN").await?))
    }

    async fn begin_grouped_write(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(begin_detached(&self.live_pool, "BEGIN").await?))
    }

    async fn begin_grouped_read(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(PgTx::Single(self.live_pool.acquire().await?)))
    }

    async fn begin_read(&self) -> Result<Box<dyn TxOps>> {
        // One snapshot for the whole read, as SQLite's read transactions give: a read of
        // several statements (a catch-up's log, messages and chat) sees one state. A
        // read-only transaction never fails to serialise.
        Ok(Box::new(
            begin_detached(
                &self.pool,
                "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            )
            .await?,
        ))
    }

    async fn begin_single_read(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(PgTx::Single(self.pool.acquire().await?)))
    }

    async fn subscribe_remote(&self) -> Result<Option<BoxStream<'static, RemoteNotice>>> {
        let receiver = self.remote_notices().await?.subscribe();
        let stream = futures::stream::unfold(receiver, |mut receiver| async move {
            match receiver.recv().await {
                Ok(notice) => Some((notice, receiver)),
                // Fell behind: some notices are gone for this subscriber.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    Some((RemoteNotice::Missed, receiver))
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
        .boxed();
        Ok(Some(stream))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The server under test, as the store's integration tests find it: required on CI.
    fn server() -> Option<String> {
        match std::env::var("KEEL_TEST_DATABASE_URL") {
            Ok(url) if !url.is_empty() => Some(url),
            _ if std::env::var_os("CI").is_some_and(|ci| !ci.is_empty()) => {
                panic!("KEEL_TEST_DATABASE_URL is unset and CI is set")
            }
            _ => None,
        }
    }

    async fn jit_of(url: &str) -> String {
        let mut conn = PgConnection::connect_with(&connect_options(url).unwrap())
            .await
            .unwrap();
        sqlx::query_scalar("SHOW jit")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn sessions_run_without_jit_unless_the_url_asks_for_it() {
        let Some(base) = server() else { return };
        assert_eq!(jit_of(&base).await, "off");
        let sep = if base.contains('?') { '&' } else { '?' };
        assert_eq!(jit_of(&format!("{base}{sep}options[jit]=on")).await, "on");
        assert_eq!(
            jit_of(&format!("{base}{sep}options=-c%20jit%3Don")).await,
            "on"
        );
        // Only the session settings count: a name elsewhere in the URL that happens to
        // contain the word leaves JIT off.
        assert_eq!(
            jit_of(&format!("{base}{sep}application_name=jitter")).await,
            "off"
        );
        // The URL's other settings stay.
        let url = format!("{base}{sep}options[application_name]=keel-test");
        let mut conn = PgConnection::connect_with(&connect_options(&url).unwrap())
            .await
            .unwrap();
        let name: String = sqlx::query_scalar("SHOW application_name")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(name, "keel-test");
    }
}
