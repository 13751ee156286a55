//! The SQLite backend: one file in WAL mode, a single writer connection (so write
//! transactions never contend for the lock inside this process) and a pool of readers.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use sqlx::Sqlite;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::error::{Result, StoreError};
use crate::ops::{Backend, TxOps};
use crate::types::{ChangeNotice, StoreOptions};

pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

tx_ops!(
    SqliteTx,
    db = Sqlite,
    lock = "",
    skip_locked = "",
    notify = no_remote_notice,
);

/// A SQLite file has no channel to other processes; in-process notices suffice.
async fn no_remote_notice(
    _tx: &mut sqlx::Transaction<'static, Sqlite>,
    _notice: &ChangeNotice,
) -> Result<()> {
    Ok(())
}

pub(crate) struct SqliteBackend {
    writer: SqlitePool,
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
    if !in_memory && let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::invalid(format!("cannot create {}: {e}", dir.display())))?;
    }
    let writer = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await?;
    MIGRATOR.run(&writer).await?;
    // An in-memory database exists once per connection: readers must share the writer.
    let reader = if in_memory {
        writer.clone()
    } else {
        SqlitePoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .connect_with(options)
            .await?
    };
    Ok(SqliteBackend { writer, reader })
}

#[async_trait]
impl Backend for SqliteBackend {
    async fn begin_write(&self) -> Result<Box<dyn TxOps>> {
        // IMMEDIATE takes the write lock up front, so a transaction that reads and then
        // writes cannot fail to upgrade when another process holds the file.
        let tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        Ok(Box::new(SqliteTx::new(tx)))
    }

    async fn begin_read(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(SqliteTx::new(self.reader.begin().await?)))
    }

    async fn subscribe_remote(&self) -> Result<Option<BoxStream<'static, ChangeNotice>>> {
        Ok(None)
    }
}
