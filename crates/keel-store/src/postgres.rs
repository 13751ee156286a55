//! The PostgreSQL backend: row locks (`FOR UPDATE`, `SKIP LOCKED` for sweeps) serialise
//! writers per chat, and `NOTIFY keel_chat_changes` tells other replicas what changed.

use std::str::FromStr;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Postgres};

use crate::error::Result;
use crate::ops::{Backend, TxOps, notice_payload, parse_notice};
use crate::types::{ChangeNotice, StoreOptions};

pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// The channel replicas LISTEN on.
pub const NOTICE_CHANNEL: &str = "keel_chat_changes";

pub(crate) struct PgTx(sqlx::Transaction<'static, Postgres>);

impl PgTx {
    async fn conn(&mut self) -> Result<&mut PgConnection> {
        Ok(&mut self.0)
    }

    fn begin_with_next(&mut self) -> bool {
        false
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        self.0.commit().await?;
        Ok(())
    }

    async fn abort(self: Box<Self>) -> Result<()> {
        self.0.rollback().await?;
        Ok(())
    }
}

tx_ops!(
    PgTx,
    db = Postgres,
    lock = " FOR UPDATE",
    begin = "",
    skip_locked = " FOR UPDATE SKIP LOCKED",
    notify = notify_replicas,
    extra = {},
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
}

pub(crate) async fn connect(url: &str, opts: &StoreOptions) -> Result<PgBackend> {
    let options = PgConnectOptions::from_str(url)?;
    let pool = PgPoolOptions::new()
        .max_connections(opts.max_connections.max(2))
        .connect_with(options)
        .await?;
    MIGRATOR.run(&pool).await?;
    Ok(PgBackend { pool })
}

#[async_trait]
impl Backend for PgBackend {
    async fn begin_write(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(PgTx(self.pool.begin().await?)))
    }

    async fn begin_read(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(PgTx(self.pool.begin().await?)))
    }

    async fn subscribe_remote(&self) -> Result<Option<BoxStream<'static, ChangeNotice>>> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(NOTICE_CHANNEL).await?;
        let stream = listener
            .into_stream()
            .filter_map(|n| async move { n.ok().and_then(|n| parse_notice(n.payload())) })
            .boxed();
        Ok(Some(stream))
    }
}
