//! The SQLite backend: one file in WAL mode, a single writer connection (so write
//! transactions never contend for the lock inside this process) and a pool of readers.

use std::str::FromStr;
use std::time::Duration;

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, Executor, Sqlite, SqliteConnection};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::{Result, StoreError};
use crate::ops::{Backend, TxOps};
use crate::types::{ChangeNotice, StoreOptions};

pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// The single writer connection and whether a transaction is open on it.
pub(crate) struct Writer {
    conn: SqliteConnection,
    open: bool,
}

/// A transaction on the writer (or, for reads, on a pooled reader).
pub(crate) enum SqliteTx {
    Write(OwnedMutexGuard<Writer>),
    Read(sqlx::Transaction<'static, Sqlite>),
}

impl SqliteTx {
    fn conn(&mut self) -> &mut SqliteConnection {
        match self {
            SqliteTx::Write(w) => &mut w.conn,
            SqliteTx::Read(tx) => tx,
        }
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        match *self {
            SqliteTx::Write(mut w) => {
                w.conn.execute("COMMIT").await?;
                w.open = false;
            }
            SqliteTx::Read(tx) => tx.commit().await?,
        }
        Ok(())
    }

    async fn abort(self: Box<Self>) -> Result<()> {
        match *self {
            SqliteTx::Write(mut w) => {
                w.conn.execute("ROLLBACK").await?;
                w.open = false;
            }
            SqliteTx::Read(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

tx_ops!(
    SqliteTx,
    db = Sqlite,
    lock = "",
    skip_locked = "",
    notify = no_remote_notice,
);

/// A SQLite file has no channel to other processes; in-process notices suffice.
async fn no_remote_notice(_conn: &mut SqliteConnection, _notice: &ChangeNotice) -> Result<()> {
    Ok(())
}

pub(crate) struct SqliteBackend {
    // The writer is a bare connection behind a mutex rather than a pool of one: a pool
    // checkout costs more than a whole small statement.
    writer: Arc<Mutex<Writer>>,
    reader: SqlitePool,
}

fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
    Ok(SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // WAL with NORMAL survives process crashes; only an OS crash or power loss can
        // drop the last commits, never corrupt the file.
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(10)))
}

pub(crate) async fn connect(url: &str, opts: &StoreOptions) -> Result<SqliteBackend> {
    let options = connect_options(url)?;
    let file = options.get_filename().to_path_buf();
    let in_memory = file.as_os_str().is_empty() || file.to_string_lossy().contains(":memory:");
    if in_memory {
        // Each connection would see its own empty database.
        return Err(StoreError::invalid(
            "an in-memory SQLite database cannot be shared by the writer and readers; use a file",
        ));
    }
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::invalid(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut writer = SqliteConnection::connect_with(&options).await?;
    MIGRATOR.run(&mut writer).await?;
    let reader = SqlitePoolOptions::new()
        .max_connections(opts.max_connections.max(1))
        .test_before_acquire(false)
        .connect_with(options)
        .await?;
    Ok(SqliteBackend {
        writer: Arc::new(Mutex::new(Writer {
            conn: writer,
            open: false,
        })),
        reader,
    })
}

#[async_trait]
impl Backend for SqliteBackend {
    async fn begin_write(&self) -> Result<Box<dyn TxOps>> {
        let mut w = self.writer.clone().lock_owned().await;
        if w.open {
            // The previous transaction ended in an error (or was dropped) before COMMIT.
            w.conn.execute("ROLLBACK").await?;
            w.open = false;
        }
        // IMMEDIATE takes the write lock up front, so a transaction that reads and then
        // writes cannot fail to upgrade when another process holds the file.
        w.conn.execute("BEGIN IMMEDIATE").await?;
        w.open = true;
        Ok(Box::new(SqliteTx::Write(w)))
    }

    async fn begin_read(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(SqliteTx::Read(self.reader.begin().await?)))
    }

    async fn subscribe_remote(&self) -> Result<Option<BoxStream<'static, ChangeNotice>>> {
        Ok(None)
    }
}
