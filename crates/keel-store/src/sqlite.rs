//! The SQLite backend: one file in WAL mode, a single writer connection (so write
//! transactions never contend for the lock inside this process) and a set of readers
//! ([`readers`]).

pub(crate) mod backup;
mod readers;

use std::str::FromStr;
use std::time::Duration;

use std::sync::Arc;

use async_trait::async_trait;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteRow;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, Either, Executor, FromRow, Sqlite, SqliteConnection};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::{Result, StoreError};
use crate::ops::{Backend, ToolRecords, TxOps, older_steps_cut};
use crate::ops::{CatchUpRows, RunStartRows};
use crate::rows::{ChatAndQueued, ChatCols, MessageCols, QueuedCols};
use crate::types::{ChangeNotice, RemoteNotice, StoreOptions};

pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// The single writer connection and whether a transaction is open on it.
pub(crate) struct Writer {
    conn: SqliteConnection,
    open: bool,
}

/// A transaction on the writer (or, for reads, on a reader).
pub(crate) enum SqliteTx {
    Write(OwnedMutexGuard<Writer>),
    Read(readers::ReaderGuard),
    /// A reader in autocommit mode, for a read of one statement.
    Single(readers::ReaderGuard),
}

impl SqliteTx {
    /// The connection, with the write transaction opened if no statement has opened it.
    async fn conn(&mut self) -> Result<&mut SqliteConnection> {
        match self {
            SqliteTx::Write(w) => {
                if !w.open {
                    w.conn.execute(BEGIN).await?;
                    w.open = true;
                }
                Ok(&mut w.conn)
            }
            SqliteTx::Read(reader) => reader.conn_in_tx().await,
            SqliteTx::Single(reader) => Ok(reader.conn()),
        }
    }

    /// A write transaction is opened by its first statement rather than by a round trip
    /// of its own; this says whether the next statement must carry the BEGIN.
    fn begin_with_next(&mut self) -> bool {
        match self {
            SqliteTx::Write(w) if !w.open => {
                w.open = true;
                true
            }
            _ => false,
        }
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        match *self {
            SqliteTx::Write(mut w) => {
                if w.open {
                    w.conn.execute("COMMIT").await?;
                    w.open = false;
                }
            }
            SqliteTx::Read(mut reader) => reader.end(true).await?,
            SqliteTx::Single(_) => {}
        }
        Ok(())
    }

    async fn abort(self: Box<Self>) -> Result<()> {
        match *self {
            SqliteTx::Write(mut w) => {
                if w.open {
                    w.conn.execute("ROLLBACK").await?;
                    w.open = false;
                }
            }
            SqliteTx::Read(mut reader) => reader.end(false).await?,
            SqliteTx::Single(_) => {}
        }
        Ok(())
    }
}

/// The siblings column of a message read: `IS` matches a root's missing parent too, and
/// uses the index on `(chat_id, parent_id)`.
macro_rules! sqlite_siblings {
    () => {
        ", (SELECT json_group_array(s.id) FROM messages s \
         WHERE s.chat_id = messages.chat_id AND s.parent_id IS messages.parent_id \
         AND NOT s.deleted AND COALESCE(s.kind, '') <> 'summary') AS siblings"
    };
}

/// The rows of a snapshot read ([`SqliteTx::snapshot`]), by statement: statement 0 is the
/// `BEGIN`, 1 the chat and its queue, then the reads that follow it.
struct SnapshotRows {
    by_statement: Vec<Vec<SqliteRow>>,
}

impl SnapshotRows {
    /// The chat and its queue; `None` when there is no such chat.
    fn chat_and_queue(&mut self) -> Result<Option<(ChatCols, Vec<QueuedCols>)>> {
        let rows: Vec<ChatAndQueued> = self.decode(1)?;
        Ok(ChatAndQueued::gather(rows))
    }

    fn decode<T: for<'r> FromRow<'r, SqliteRow>>(&mut self, statement: usize) -> Result<Vec<T>> {
        let rows = self
            .by_statement
            .get_mut(statement)
            .map(std::mem::take)
            .unwrap_or_default();
        rows.iter()
            .map(|row| T::from_row(row).map_err(StoreError::from))
            .collect()
    }
}

impl SqliteTx {
    /// Runs `sql` (`BEGIN`, reads of the chat `$1` after `$2`, at most `$3`, `COMMIT`)
    /// as one command when it can open the transaction itself: a read transaction no
    /// statement has opened yet. `None` otherwise, and the caller reads statement by
    /// statement. sqlx runs each of a SQLite connection's commands on its worker thread;
    /// the round trips, not SQLite, are what a short read costs.
    async fn snapshot(
        &mut self,
        sql: &'static str,
        chat: &str,
        after: i64,
        limit: i64,
    ) -> Result<Option<SnapshotRows>> {
        let SqliteTx::Read(reader) = self else {
            return Ok(None);
        };
        if !reader.take_begin() {
            return Ok(None);
        }
        let query = sqlx::query(sql)
            .bind(chat.to_owned())
            .bind(after)
            .bind(limit);
        let mut by_statement = vec![Vec::new()];
        {
            let mut steps = reader.conn().fetch_many(query);
            while let Some(step) = steps.try_next().await? {
                match step {
                    Either::Left(_) => by_statement.push(Vec::new()),
                    Either::Right(row) => {
                        if let Some(rows) = by_statement.last_mut() {
                            rows.push(row);
                        }
                    }
                }
            }
        }
        // The command's COMMIT ended the transaction.
        reader.ended();
        Ok(Some(SnapshotRows { by_statement }))
    }
}

/// Reads the chat rows with these ids (the `$columns!()` of each, as `$row`), 2,000 ids per
/// statement (a parameter each, well below SQLite's limit per statement), in id order: the
/// one order every caller that locks several rows uses, which on SQLite is also the order
/// the writer's lock is already held in. The first statement opens the transaction when
/// nothing has yet.
macro_rules! lock_rows {
    ($self:ident, $columns:ident, $row:ty, $ids:expr) => {{
        let mut found = Vec::with_capacity($ids.len());
        for chunk in $ids.chunks(2000) {
            let head = if $self.begin_with_next() {
                concat!(
                    "BEGIN IMMEDIATE; SELECT ",
                    $columns!(),
                    " FROM chats WHERE id IN ("
                )
            } else {
                concat!("SELECT ", $columns!(), " FROM chats WHERE id IN (")
            };
            let mut query = sqlx::QueryBuilder::<Sqlite>::new(head);
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(id.as_str());
            }
            query.push(") ORDER BY id");
            found.extend(
                query
                    .build_query_as::<$row>()
                    .persistent(false)
                    .fetch_all($self.conn().await?)
                    .await?,
            );
        }
        Ok(found)
    }};
}

/// A step of one message written in one multi-statement string: the message, the log
/// without the parts of older steps, the dropped checkpoint, `$records` (the tool records'
/// delete, or nothing) and the chat row. `$n` numbers the shared arguments.
macro_rules! commit_one_sql {
    ($records:literal) => {
        concat!(
            "INSERT INTO messages (",
            message_columns!(),
            ", deleted, on_branch) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             $13, $14, $15, FALSE, TRUE); \
             DELETE FROM live_parts WHERE chat_id = $1 AND last_seq < ",
            // Of the chat's id: computed once, not for each batch.
            older_steps_cut!("$1"),
            "; DELETE FROM checkpoints WHERE chat_id = $1; ",
            $records,
            "UPDATE chats SET title = $16, model = $17, status = $18, archived = $19, \
             max_steps = $20, system_prompt = $21, tools = $22, worker_id = $23, \
             lease_expires_at = $24, version = $25, history_version = $26, \
             event_seq = $27, last_message_id = $28, last_error_kind = $29, \
             last_error_message = $30, retry_state = $31, pending_tool_calls = $32, \
             pending_deadline = $33, updated_at = $34, compact_requested = $35, \
             last_error_provider = $36, last_error_url = $37, leaf_id = $38, \
             branch_seq = $39 WHERE id = $1"
        )
    };
}

/// IMMEDIATE takes the write lock up front, so a transaction that reads and then writes
/// cannot fail to upgrade when another process holds the file.
const BEGIN: &str = "BEGIN IMMEDIATE";

tx_ops!(
    SqliteTx,
    db = Sqlite,
    lock = "",
    begin = "BEGIN IMMEDIATE; ",
    skip_locked = "",
    // No `DELETE … USING`: the batches to delete are looked up by their key.
    delete_by_cut = (
        "DELETE FROM live_parts WHERE (chat_id, last_seq) IN (SELECT l.chat_id, l.last_seq \
         FROM cut JOIN live_parts l ON l.chat_id = cut.chat_id AND l.last_seq ",
        " cut.seq)"
    ),
    siblings = sqlite_siblings!(),
    notify = no_remote_notice,
    extra = {
        async fn catch_up_rows(
            &mut self,
            chat: &str,
            after: i64,
            limit: i64,
        ) -> Result<Option<CatchUpRows>> {
            const SQL: &str = concat!(
                "BEGIN; ",
                chat_and_queue_sql!("", ""),
                "; ",
                logged_after_sql!(),
                "; ",
                visible_by_seq_sql!(sqlite_siblings!()),
                "; COMMIT"
            );
            let Some(mut rows) = self.snapshot(SQL, chat, after, limit).await? else {
                return crate::ops::catch_up_rows_apart(self, chat, after, limit).await;
            };
            let Some(chat_and_queue) = rows.chat_and_queue()? else {
                return Ok(None);
            };
            Ok(Some(CatchUpRows {
                chat: chat_and_queue,
                batches: rows.decode(2)?,
                messages: rows.decode(3)?,
            }))
        }

        async fn run_start_rows(&mut self, chat: &str) -> Result<Option<RunStartRows>> {
            const SQL: &str = concat!(
                "BEGIN; ",
                chat_and_queue_sql!("", ""),
                "; ",
                live_after_sql!(),
                "; ",
                branch_messages_sql!(),
                "; ",
                tool_records_sql!(),
                "; COMMIT"
            );
            // From the start of the step in progress, and of the branch; no limit.
            let Some(mut rows) = self.snapshot(SQL, chat, 0, 0).await? else {
                return crate::ops::run_start_rows_apart(self, chat).await;
            };
            let Some(chat_and_queue) = rows.chat_and_queue()? else {
                return Ok(None);
            };
            Ok(Some(RunStartRows {
                chat: chat_and_queue,
                batches: rows.decode(2)?,
                messages: rows.decode(3)?,
                records: rows.decode(4)?,
            }))
        }

        async fn commit_writes(
            &mut self,
            messages: &[MessageCols],
            c: &ChatCols,
            records: ToolRecords,
        ) -> Result<()> {
            // The common step (one message) goes as one multi-statement round trip: sqlx
            // runs each SQLite statement on the connection's worker thread, and the round
            // trips, not SQLite, dominate a commit. `$n` numbers the shared arguments.
            let [m] = messages else {
                return crate::ops::commit_writes_apart(self, messages, c, records).await;
            };
            const KEEPING_RECORDS: &str = commit_one_sql!("");
            const CLEARING_RECORDS: &str =
                commit_one_sql!("DELETE FROM tool_records WHERE chat_id = $1; ");
            let sql = match records {
                ToolRecords::Clear => CLEARING_RECORDS,
                ToolRecords::Keep => KEEPING_RECORDS,
            };
            if m.chat_id != c.id {
                return Err(StoreError::invalid(
                    "a step's message belongs to another chat",
                ));
            }
            let message = sqlx::query(sql)
                .bind(&m.chat_id)
                .bind(m.id)
                .bind(&m.role)
                .bind(&m.parts)
                .bind(m.content_version)
                .bind(&m.usage)
                .bind(m.context_limit)
                .bind(m.runtime_ms)
                .bind(m.interrupted)
                .bind(&m.provider_response_id)
                .bind(m.event_seq)
                .bind(m.created_at)
                .bind(&m.kind)
                .bind(&m.finish_reason)
                .bind(m.parent_id);
            bind_chat_changes!(message, c)
                .execute(self.conn().await?)
                .await?;
            Ok(())
        }

        async fn append_live_rows(&mut self, rows: &[crate::ops::LiveRow]) -> Result<()> {
            // Four parameters a batch, well below SQLite's limit per statement.
            for chunk in rows.chunks(2000) {
                let mut query = sqlx::QueryBuilder::<Sqlite>::new(
                    "INSERT INTO live_parts (chat_id, first_seq, last_seq, payloads) ",
                );
                query.push_values(chunk, |mut row, (chat, first, last, payloads)| {
                    row.push_bind(chat.as_str())
                        .push_bind(*first)
                        .push_bind(*last)
                        .push_bind(payloads.as_str());
                });
                query
                    .build()
                    .persistent(false)
                    .execute(self.conn().await?)
                    .await?;
            }
            Ok(())
        }

        async fn lock_chats(&mut self, ids: &[String]) -> Result<Vec<ChatCols>> {
            lock_rows!(self, chat_read_columns, ChatCols, ids)
        }

        async fn lock_fences(&mut self, ids: &[String]) -> Result<Vec<crate::rows::FenceCols>> {
            lock_rows!(self, fence_columns, crate::rows::FenceCols, ids)
        }

        async fn set_lease_expiries(&mut self, expiries: &[(String, i64)]) -> Result<()> {
            // Joined with a table of the values, each row finds its own in one lookup; a
            // `CASE id WHEN ...` with a branch per chat made each row try them all.
            for chunk in expiries.chunks(2000) {
                let mut query = sqlx::QueryBuilder::<Sqlite>::new("WITH v (id, value) AS (VALUES ");
                push_chat_numbers(&mut query, chunk);
                query.push(
                    ") UPDATE chats SET lease_expires_at = v.value FROM v WHERE chats.id = v.id",
                );
                query
                    .build()
                    .persistent(false)
                    .execute(self.conn().await?)
                    .await?;
            }
            Ok(())
        }

        async fn live_after_many(
            &mut self,
            positions: &[(String, i64)],
        ) -> Result<Vec<crate::ops::ChatLiveRow>> {
            let mut rows = Vec::new();
            // Two parameters a chat, well below SQLite's limit per statement.
            for chunk in positions.chunks(1000) {
                let mut query =
                    sqlx::QueryBuilder::<Sqlite>::new("WITH wanted (chat_id, since) AS (VALUES ");
                push_chat_numbers(&mut query, chunk);
                query.push(
                    ") SELECT l.chat_id, l.first_seq, l.payloads FROM live_parts l \
                     JOIN wanted w ON l.chat_id = w.chat_id WHERE l.last_seq > w.since \
                     AND l.last_seq > COALESCE((SELECT MAX(m.event_seq) FROM messages m \
                     WHERE m.chat_id = l.chat_id), 0) ORDER BY l.chat_id, l.first_seq",
                );
                rows.extend(
                    query
                        .build_query_as::<crate::ops::ChatLiveRow>()
                        .persistent(false)
                        .fetch_all(self.conn().await?)
                        .await?,
                );
            }
            Ok(rows)
        }
    },
);

/// Pushes `(chat id, number)` pairs as the rows of a `VALUES` list, typed so that a `WITH`
/// table of them joins the chats' text ids and compares as integers.
fn push_chat_numbers<'a>(query: &mut sqlx::QueryBuilder<'a, Sqlite>, pairs: &'a [(String, i64)]) {
    let mut list = query.separated(", ");
    for (chat, number) in pairs {
        list.push("(CAST(")
            .push_bind_unseparated(chat.as_str())
            .push_unseparated(" AS TEXT), CAST(")
            .push_bind_unseparated(*number)
            .push_unseparated(" AS BIGINT))");
    }
}

/// A SQLite file has no channel to other processes; in-process notices suffice.
async fn no_remote_notice(_conn: &mut SqliteConnection, _notice: &ChangeNotice) -> Result<()> {
    Ok(())
}

pub(crate) struct SqliteBackend {
    // The writer is a bare connection behind a mutex rather than a pool of one: a pool
    // checkout costs more than a whole small statement.
    writer: Arc<Mutex<Writer>>,
    readers: Arc<readers::Readers>,
}

/// See [`connect_options`]: one statement's rows for the largest batch the store reads
/// (2,000 chats a statement).
const ROW_BUFFER: usize = 2048;

fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
    Ok(SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // WAL with NORMAL survives process crashes; only an OS crash or power loss can
        // drop the last commits, never corrupt the file.
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        // A statement's undo journal in memory, not in a temporary file: a multi-row write
        // inside a transaction journals every page it changes.
        .pragma("temp_store", "memory")
        // Rows a statement may hand to the caller before the connection's thread waits for
        // it to take them: with sqlx's 50, a read of a thousand chats (the log writer's
        // fence read) could park and wake that thread once every 50 rows, as profiles
        // showed. Rows are collected whole anyway.
        .row_buffer_size(ROW_BUFFER)
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
    Ok(SqliteBackend {
        writer: Arc::new(Mutex::new(Writer {
            conn: writer,
            open: false,
        })),
        readers: readers::Readers::new(options, opts.max_connections),
    })
}

#[async_trait]
impl Backend for SqliteBackend {
    async fn begin_write(&self) -> Result<Box<dyn TxOps>> {
        let mut w = self.writer.clone().lock_owned().await;
        if w.open {
            // The previous transaction was dropped before COMMIT or ROLLBACK. If its
            // opening statement failed there is nothing to roll back, and that error
            // is expected.
            let _ = w.conn.execute("ROLLBACK").await;
            w.open = false;
        }
        Ok(Box::new(SqliteTx::Write(w)))
    }

    async fn begin_read(&self) -> Result<Box<dyn TxOps>> {
        let mut reader = self.readers.acquire().await?;
        reader.begin();
        Ok(Box::new(SqliteTx::Read(reader)))
    }

    async fn begin_single_read(&self) -> Result<Box<dyn TxOps>> {
        Ok(Box::new(SqliteTx::Single(self.readers.acquire().await?)))
    }

    async fn subscribe_remote(&self) -> Result<Option<BoxStream<'static, RemoteNotice>>> {
        Ok(None)
    }
}
