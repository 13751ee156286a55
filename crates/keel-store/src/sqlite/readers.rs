//! The SQLite readers: connections handed out whole, without sqlx's pool.
//!
//! sqlx runs each SQLite connection's statements on a thread of its own, so a statement is
//! a round trip of thread hand-offs. Its pool adds one more to every release (a `ping`, on
//! a task spawned for it) to flush what a cancelled caller may have left; a SQLite
//! connection runs its commands in order anyway, and the one thing a cancelled caller can
//! leave behind, an open read transaction, is known here and rolled back when the reader
//! is next handed out. A read of one statement is then one round trip.

use std::sync::{Arc, Mutex, PoisonError};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, Executor, SqliteConnection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Result;

/// At most `max` reader connections, opened when first needed and kept.
pub(crate) struct Readers {
    options: SqliteConnectOptions,
    idle: Mutex<Vec<Reader>>,
    permits: Arc<Semaphore>,
}

/// A reader connection and whether a read transaction is open on it.
pub(crate) struct Reader {
    conn: SqliteConnection,
    open: bool,
}

impl Readers {
    pub(crate) fn new(options: SqliteConnectOptions, max: u32) -> Arc<Self> {
        let max = usize::try_from(max.max(1)).unwrap_or(1);
        Arc::new(Self {
            options,
            idle: Mutex::new(Vec::with_capacity(max)),
            permits: Arc::new(Semaphore::new(max)),
        })
    }

    /// A reader in autocommit mode, waiting while all `max` are out.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Result<ReaderGuard> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            // The semaphore is never closed.
            .map_err(|_| crate::error::StoreError::invalid("the SQLite readers are closed"))?;
        let idle = self.idle_lock().pop();
        let mut reader = match idle {
            Some(reader) => reader,
            None => Reader {
                conn: SqliteConnection::connect_with(&self.options).await?,
                open: false,
            },
        };
        if reader.open {
            // Left by a caller cancelled inside its read; failing only means none is open.
            let _ = reader.conn.execute("ROLLBACK").await;
            reader.open = false;
        }
        Ok(ReaderGuard {
            readers: self.clone(),
            reader: Some(reader),
            begin_pending: false,
            _permit: permit,
        })
    }

    fn idle_lock(&self) -> std::sync::MutexGuard<'_, Vec<Reader>> {
        // The list is only pushed to and popped from: a panic cannot leave it half changed.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A reader handed out; it goes back to the idle list when dropped (its permit after it).
pub(crate) struct ReaderGuard {
    readers: Arc<Readers>,
    reader: Option<Reader>,
    /// A read transaction was asked for and no statement has opened it yet.
    begin_pending: bool,
    _permit: OwnedSemaphorePermit,
}

impl ReaderGuard {
    fn reader(&mut self) -> &mut Reader {
        // Taken only in `drop`.
        self.reader.as_mut().unwrap_or_else(|| unreachable!())
    }

    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.reader().conn
    }

    /// Opens a read transaction: what the statements until [`ReaderGuard::end`] read is one
    /// snapshot. The `BEGIN` goes with the first statement ([`ReaderGuard::conn_in_tx`],
    /// [`ReaderGuard::take_begin`]), not as a round trip of its own.
    pub(crate) fn begin(&mut self) {
        self.begin_pending = true;
    }

    /// The connection, with the read transaction opened if [`ReaderGuard::begin`] asked for
    /// one and no statement has opened it yet.
    pub(crate) async fn conn_in_tx(&mut self) -> Result<&mut SqliteConnection> {
        if self.take_begin() {
            self.reader().conn.execute("BEGIN").await?;
        }
        Ok(self.conn())
    }

    /// Whether the next statement must open the read transaction itself (and, if it also
    /// ends it, report that with [`ReaderGuard::ended`]).
    pub(crate) fn take_begin(&mut self) -> bool {
        let pending = std::mem::take(&mut self.begin_pending);
        if pending {
            // Marked first: a caller cancelled inside the BEGIN leaves it to the next acquire.
            self.reader().open = true;
        }
        pending
    }

    /// The statement that opened the read transaction also ended it.
    pub(crate) fn ended(&mut self) {
        self.reader().open = false;
    }

    /// Ends the read transaction opened by [`ReaderGuard::begin`], with `COMMIT` or, when
    /// the caller gives up, `ROLLBACK`.
    pub(crate) async fn end(&mut self, commit: bool) -> Result<()> {
        self.begin_pending = false;
        let reader = self.reader();
        if reader.open {
            reader
                .conn
                .execute(if commit { "COMMIT" } else { "ROLLBACK" })
                .await?;
            reader.open = false;
        }
        Ok(())
    }
}

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            self.readers.idle_lock().push(reader);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn readers(dir: &tempfile::TempDir, max: u32) -> Arc<Readers> {
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("readers.db"))
            .create_if_missing(true);
        Readers::new(options, max)
    }

    #[tokio::test]
    async fn a_reader_left_inside_its_transaction_comes_back_without_it() {
        let dir = tempfile::tempdir().unwrap();
        let readers = readers(&dir, 1);
        let mut reader = readers.acquire().await.unwrap();
        reader.begin();
        reader.conn_in_tx().await.unwrap();
        // The caller is cancelled before it ends the transaction.
        drop(reader);
        let mut again = readers.acquire().await.unwrap();
        // A transaction still open would refuse a nested BEGIN.
        again.begin();
        again.conn_in_tx().await.unwrap();
        again.end(true).await.unwrap();
        again.conn().execute("BEGIN").await.unwrap();
    }

    #[tokio::test]
    async fn readers_are_kept_and_callers_wait_while_all_are_out() {
        let dir = tempfile::tempdir().unwrap();
        let readers = readers(&dir, 1);
        let first = readers.acquire().await.unwrap();
        let mut waiting = Box::pin(readers.acquire());
        assert!(
            (&mut waiting).now_or_never().is_none(),
            "the only reader is out"
        );
        drop(first);
        let second = waiting.await.unwrap();
        drop(second);
        assert_eq!(readers.idle_lock().len(), 1, "one connection, reused");
    }
}
