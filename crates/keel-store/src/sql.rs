//! The SQL of the [`crate::ops::TxOps`] primitives the backends share, written once and
//! expanded for each backend.
//!
//! Both backends accept the same statements: numbered `$n` parameters, `RETURNING`,
//! `ON CONFLICT`, row values. What differs is passed in: the row-lock suffix (PostgreSQL
//! `FOR UPDATE`, nothing on SQLite whose `BEGIN IMMEDIATE` already holds the write lock)
//! and how a notice reaches other replicas.
//!
//! A statement built for a batch (`IN (…)` with one parameter per chat, a row of values per
//! message) has a text of its own for every batch size, so it is run unprepared
//! (`persistent(false)`): kept, each size would take a place in the connection's cache of
//! prepared statements and push out the fixed statements every run uses, which would then
//! be parsed again on their next use. PostgreSQL runs the live path's statements over many
//! chats with one array parameter per column instead (`postgres/batches.rs`); SQLite has
//! no arrays and keeps its lists (`sqlite.rs`).
//!
//! Longer than most files: it is every statement of [`crate::ops::TxOps`] in one place, written
//! once for both backends, so that a change to a table is one edit a reviewer sees whole.

/// The chat columns in [`crate::rows::ChatCols`] order, as a write names them.
macro_rules! chat_columns {
    () => {
        "id, owner, title, model, status, archived, max_steps, system_prompt, tools, \
         worker_id, lease_expires_at, version, history_version, event_seq, last_message_id, \
         last_error_kind, last_error_message, retry_state, pending_tool_calls, \
         pending_deadline, created_at, updated_at, compact_requested, last_error_provider, \
         last_error_url, leaf_id, branch_seq"
    };
}

/// The chat columns as a read returns them, in [`crate::rows::ChatCols`] order: the event
/// sequence reaches as far as the chat's live-part log does (below).
macro_rules! chat_read_columns {
    () => {
        concat!(
            "id, owner, title, model, status, archived, max_steps, system_prompt, tools, \
             worker_id, lease_expires_at, version, history_version, ",
            logged_event_seq!(),
            ", last_message_id, last_error_kind, last_error_message, retry_state, \
             pending_tool_calls, pending_deadline, created_at, updated_at, compact_requested, \
             last_error_provider, last_error_url, leaf_id, branch_seq"
        )
    };
}

/// A chat's event sequence as read: its stored number, or the last number of its live-part
/// log when that is higher. The log's writes leave the chat's row alone (rewriting every
/// streaming chat's row in every window made, on PostgreSQL, a row version per chat per
/// window for the vacuum to reclaim); every transition
/// that writes the row stores what it read, so the stored number catches up there, and the
/// log is only ever emptied by such a transition. One probe of the `(chat_id, last_seq)`
/// index.
macro_rules! logged_event_seq {
    () => {
        "COALESCE((SELECT l.last_seq FROM live_parts l WHERE l.chat_id = chats.id \
         AND l.last_seq > chats.event_seq ORDER BY l.last_seq DESC LIMIT 1), \
         chats.event_seq) AS event_seq"
    };
}

/// Binds a chat's columns, in [`chat_columns`] order, as one row of a `VALUES` list.
macro_rules! push_chat_row {
    ($row:ident, $c:ident) => {
        $row.push_bind($c.id.as_str())
            .push_bind($c.owner.as_str())
            .push_bind($c.title.as_deref())
            .push_bind($c.model.as_str())
            .push_bind($c.status.as_str())
            .push_bind($c.archived)
            .push_bind($c.max_steps)
            .push_bind($c.system_prompt.as_deref())
            .push_bind($c.tools.as_str())
            .push_bind($c.worker_id.as_deref())
            .push_bind($c.lease_expires_at)
            .push_bind($c.version)
            .push_bind($c.history_version)
            .push_bind($c.event_seq)
            .push_bind($c.last_message_id)
            .push_bind($c.last_error_kind.as_deref())
            .push_bind($c.last_error_message.as_deref())
            .push_bind($c.retry_state.as_deref())
            .push_bind($c.pending_tool_calls.as_str())
            .push_bind($c.pending_deadline)
            .push_bind($c.created_at)
            .push_bind($c.updated_at)
            .push_bind($c.compact_requested)
            .push_bind($c.last_error_provider.as_deref())
            .push_bind($c.last_error_url.as_deref())
            .push_bind($c.leaf_id)
            .push_bind($c.branch_seq);
    };
}

/// Binds what a write of a chat's row changes — every column but `id`, `owner` and
/// `created_at` — in [`chat_columns`] order: the `SET` lists of `update_chat` and of
/// SQLite's one-statement commit number them so.
macro_rules! bind_chat_changes {
    ($query:expr, $c:expr) => {
        $query
            .bind(&$c.title)
            .bind(&$c.model)
            .bind(&$c.status)
            .bind($c.archived)
            .bind($c.max_steps)
            .bind(&$c.system_prompt)
            .bind(&$c.tools)
            .bind(&$c.worker_id)
            .bind($c.lease_expires_at)
            .bind($c.version)
            .bind($c.history_version)
            .bind($c.event_seq)
            .bind($c.last_message_id)
            .bind(&$c.last_error_kind)
            .bind(&$c.last_error_message)
            .bind(&$c.retry_state)
            .bind(&$c.pending_tool_calls)
            .bind($c.pending_deadline)
            .bind($c.updated_at)
            .bind($c.compact_requested)
            .bind(&$c.last_error_provider)
            .bind(&$c.last_error_url)
            .bind($c.leaf_id)
            .bind($c.branch_seq)
    };
}

/// The chat columns in [`crate::rows::FenceCols`] order: what a lease fence and a
/// live-part notice read. The event sequence is the row's own, not the log's
/// ([`logged_event_seq`]): the log writer locks every streaming chat each window, and the
/// log's probe per chat was a sub-query per row of a statement that only needs to know
/// that the entries it appends advance the chat (they are numbered past the log).
macro_rules! fence_columns {
    () => {
        "id, owner, status, worker_id, version, history_version, event_seq"
    };
}

/// Deletes the rows `$what` ([`crate::ops::Voided`]) picks of the chats with these ids, one
/// statement per 2,000 chats. A void that keeps part of the log computes each chat's cut
/// once (`cut`) and deletes the batches on its side of it, found by a range of the
/// `(chat_id, last_seq)` index; `$by_cut` is the backend's delete of them, in two halves
/// around the comparison.
macro_rules! delete_voided {
    ($self:ident, $db:ty, $by_cut:expr, $what:expr, $ids:expr) => {{
        let what: $crate::ops::Voided = $what;
        for chunk in $ids.chunks(2000) {
            let mut query;
            match what.cut() {
                None => {
                    query = sqlx::QueryBuilder::<$db>::new("DELETE FROM ");
                    query.push(what.table()).push(" WHERE chat_id IN (");
                    let mut list = query.separated(", ");
                    for id in chunk {
                        list.push_bind(*id);
                    }
                    query.push(")");
                }
                Some((cut, side)) => {
                    query = sqlx::QueryBuilder::<$db>::new("WITH v (id) AS (VALUES ");
                    let mut list = query.separated(", ");
                    for id in chunk {
                        list.push("(CAST(")
                            .push_bind_unseparated(*id)
                            .push_unseparated(" AS TEXT))");
                    }
                    query
                        .push("), cut (chat_id, seq) AS (SELECT v.id, ")
                        .push(cut)
                        .push(" FROM v) ")
                        .push($by_cut.0)
                        .push(side)
                        .push($by_cut.1);
                }
            }
            query
                .build()
                .persistent(false)
                .execute($self.conn().await?)
                .await?;
        }
    }};
}

/// A chat and its queue in one statement: one row per queued message, or one with no
/// message. The chat's columns come from a subquery (after `$begin`, locked with `$lock`),
/// so the join's names never clash.
macro_rules! chat_and_queue_sql {
    ($begin:literal, $lock:literal) => {
        concat!(
            $begin,
            "SELECT c.*, q.id AS q_id, q.position AS q_position, q.parts AS q_parts, \
             q.created_at AS q_created_at FROM (SELECT ",
            chat_read_columns!(),
            " FROM chats WHERE id = $1",
            $lock,
            ") c LEFT JOIN queued_messages q ON q.chat_id = c.id ORDER BY q.position"
        )
    };
}

/// A chat's logged batches holding entries after `$2` (every batch, the committed step's
/// kept parts included).
macro_rules! logged_after_sql {
    () => {
        "SELECT first_seq, payloads FROM live_parts WHERE chat_id = $1 AND last_seq > $2 \
         ORDER BY first_seq"
    };
}

/// A chat's batches of the step in progress (numbered after its last message) holding
/// entries after `$2`.
macro_rules! live_after_sql {
    () => {
        "SELECT first_seq, payloads FROM live_parts \
         WHERE chat_id = $1 AND last_seq > $2 AND last_seq > COALESCE(\
         (SELECT MAX(event_seq) FROM messages WHERE chat_id = $1), 0) \
         ORDER BY first_seq"
    };
}

/// The current branch's messages of a chat after the id `$2`.
macro_rules! branch_messages_sql {
    () => {
        concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE chat_id = $1 AND id > $2 AND on_branch ORDER BY id"
        )
    };
}

/// The first `$3` visible messages of a chat's current branch numbered after `$2`, with the
/// backend's `$siblings` column.
macro_rules! visible_by_seq_sql {
    ($siblings:expr) => {
        concat!(
            "SELECT ",
            message_columns!(),
            $siblings,
            " FROM messages WHERE chat_id = $1 AND event_seq > $2 AND on_branch \
             AND COALESCE(kind, '') <> 'summary' ORDER BY event_seq LIMIT $3"
        )
    };
}

/// A chat's tool records.
macro_rules! tool_records_sql {
    () => {
        "SELECT chat_id, tool_call_id, tool_name, args, state, result, is_error, \
         started_at, finished_at FROM tool_records WHERE chat_id = $1 \
         ORDER BY started_at, tool_call_id"
    };
}

macro_rules! message_columns {
    () => {
        "chat_id, id, role, parts, content_version, usage, context_limit, runtime_ms, \
         interrupted, provider_response_id, event_seq, created_at, kind, finish_reason, \
         parent_id"
    };
}

/// The sums of a set of usage records, in [`crate::ops::UsageRow`] order after the keys.
macro_rules! usage_sums {
    () => {
        "CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(cached_input_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(reasoning_tokens), 0) AS BIGINT), CAST(SUM(cost_nanos) AS BIGINT)"
    };
}

/// Implements [`crate::ops::TxOps`] for `$name`, which provides
/// `async fn conn(&mut self) -> Result<&mut <$db as sqlx::Database>::Connection>`,
/// `fn begin_with_next(&mut self) -> bool` (the next statement must open the transaction
/// with `$begin`), `async fn finish(self: Box<Self>) -> Result<()>` (commit) and `abort`
/// (rollback). `delete_by_cut` deletes a chat's batches on one side of its cut
/// ([`delete_voided`]).
macro_rules! tx_ops {
    (
        $name:ident,
        db = $db:ty,
        lock = $lock:literal,
        begin = $begin:literal,
        skip_locked = $skip:literal,
        delete_by_cut = $by_cut:expr,
        siblings = $siblings:expr,
        notify = $notify:path,
        extra = { $($extra:tt)* } $(,)?
    ) => {
        #[async_trait::async_trait]
        impl $crate::ops::TxOps for $name {
            async fn lock_chat(
                &mut self,
                id: &str,
            ) -> $crate::error::Result<Option<$crate::rows::ChatCols>> {
                const SQL: &str = concat!(
                    "SELECT ",
                    chat_read_columns!(),
                    " FROM chats WHERE id = $1",
                    $lock
                );
                // Usually a transaction's first statement: it then carries the BEGIN too.
                const BEGIN_SQL: &str = concat!(
                    $begin,
                    "SELECT ",
                    chat_read_columns!(),
                    " FROM chats WHERE id = $1",
                    $lock
                );
                let sql = if self.begin_with_next() { BEGIN_SQL } else { SQL };
                Ok(sqlx::query_as(sql)
                    .bind(id)
                    .fetch_optional(self.conn().await?)
                    .await?)
            }

            async fn lock_chat_and_queue(
                &mut self,
                id: &str,
            ) -> $crate::error::Result<
                Option<($crate::rows::ChatCols, Vec<$crate::rows::QueuedCols>)>,
            > {
                // As `read_chat_and_queue`, the chat's row locked inside the subquery; usually
                // a transaction's first statement, which then carries the BEGIN too.
                const SQL: &str = chat_and_queue_sql!("", $lock);
                const BEGIN_SQL: &str = chat_and_queue_sql!($begin, $lock);
                let sql = if self.begin_with_next() { BEGIN_SQL } else { SQL };
                let rows: Vec<$crate::rows::ChatAndQueued> = sqlx::query_as(sql)
                    .bind(id)
                    .fetch_all(self.conn().await?)
                    .await?;
                Ok($crate::rows::ChatAndQueued::gather(rows))
            }

            async fn read_chat(
                &mut self,
                id: &str,
            ) -> $crate::error::Result<Option<$crate::rows::ChatCols>> {
                const SQL: &str = concat!("SELECT ", chat_read_columns!(), " FROM chats WHERE id = $1");
                Ok(sqlx::query_as(SQL)
                    .bind(id)
                    .fetch_optional(self.conn().await?)
                    .await?)
            }

            async fn read_chat_and_queue(
                &mut self,
                id: &str,
            ) -> $crate::error::Result<
                Option<($crate::rows::ChatCols, Vec<$crate::rows::QueuedCols>)>,
            > {
                const SQL: &str = chat_and_queue_sql!("", "");
                let rows: Vec<$crate::rows::ChatAndQueued> = sqlx::query_as(SQL)
                    .bind(id)
                    .fetch_all(self.conn().await?)
                    .await?;
                Ok($crate::rows::ChatAndQueued::gather(rows))
            }

            async fn insert_chat(
                &mut self,
                c: &$crate::rows::ChatCols,
            ) -> $crate::error::Result<()> {
                let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                    "INSERT INTO chats (",
                    chat_columns!(),
                    ") "
                ));
                query.push_values(std::slice::from_ref(c), |mut row, c| {
                    push_chat_row!(row, c);
                });
                query.build().execute(self.conn().await?).await?;
                Ok(())
            }

            async fn update_chat(
                &mut self,
                c: &$crate::rows::ChatCols,
            ) -> $crate::error::Result<()> {
                const SQL: &str = "UPDATE chats SET title = $2, model = $3, status = $4, \
                    archived = $5, max_steps = $6, system_prompt = $7, tools = $8, \
                    worker_id = $9, lease_expires_at = $10, version = $11, \
                    history_version = $12, event_seq = $13, last_message_id = $14, \
                    last_error_kind = $15, last_error_message = $16, retry_state = $17, \
                    pending_tool_calls = $18, pending_deadline = $19, updated_at = $20, \
                    compact_requested = $21, last_error_provider = $22, \
                    last_error_url = $23, leaf_id = $24, branch_seq = $25 WHERE id = $1";
                bind_chat_changes!(sqlx::query(SQL).bind(&c.id), c)
                    .execute(self.conn().await?)
                    .await?;
                Ok(())
            }

            async fn delete_chat(&mut self, id: &str) -> $crate::error::Result<()> {
                // The live-part log has no foreign key on PostgreSQL (its inserts would
                // check every row): its rows go first, the other dependent rows by
                // ON DELETE CASCADE.
                sqlx::query("DELETE FROM live_parts WHERE chat_id = $1")
                    .bind(id)
                    .execute(self.conn().await?)
                    .await?;
                sqlx::query("DELETE FROM chats WHERE id = $1")
                    .bind(id)
                    .execute(self.conn().await?)
                    .await?;
                Ok(())
            }

            async fn list_chats(
                &mut self,
                owner: Option<&str>,
                before: Option<&str>,
                limit: i64,
            ) -> $crate::error::Result<Vec<$crate::rows::ChatCols>> {
                const SQL: &str = concat!(
                    "SELECT ",
                    chat_read_columns!(),
                    " FROM chats WHERE ($1 IS NULL OR owner = $1) AND ($2 IS NULL OR \
                     (created_at, id) < (SELECT c.created_at, c.id FROM chats c WHERE c.id = $2)) \
                     ORDER BY created_at DESC, id DESC LIMIT $3"
                );
                Ok(sqlx::query_as(SQL)
                    .bind(owner)
                    .bind(before)
                    .bind(limit)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn claimable_chats(
                &mut self,
                now: i64,
                limit: i64,
            ) -> $crate::error::Result<Vec<String>> {
                const SQL: &str = concat!(
                    "SELECT id FROM chats WHERE status IN ('running', 'interrupting') \
                     AND (worker_id IS NULL OR lease_expires_at < $1) \
                     ORDER BY updated_at LIMIT $2",
                    $skip
                );
                Ok(sqlx::query_scalar(SQL)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn stale_chats(
                &mut self,
                now: i64,
                limit: i64,
            ) -> $crate::error::Result<Vec<String>> {
                const SQL: &str = concat!(
                    "SELECT id FROM chats WHERE worker_id IS NOT NULL \
                     AND lease_expires_at < $1 LIMIT $2",
                    $skip
                );
                Ok(sqlx::query_scalar(SQL)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn owned_with_prefix(
                &mut self,
                prefix: &str,
                limit: i64,
            ) -> $crate::error::Result<Vec<(String, String)>> {
                const SQL: &str = concat!(
                    "SELECT id, worker_id FROM chats WHERE worker_id LIKE $1 LIMIT $2",
                    $skip
                );
                Ok(sqlx::query_as(SQL)
                    .bind(format!("{prefix}%"))
                    .bind(limit)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn expired_actions(
                &mut self,
                now: i64,
                limit: i64,
            ) -> $crate::error::Result<Vec<String>> {
                const SQL: &str = concat!(
                    "SELECT id FROM chats WHERE status = 'requires_action' \
                     AND pending_deadline IS NOT NULL AND pending_deadline < $1 LIMIT $2",
                    $skip
                );
                Ok(sqlx::query_scalar(SQL)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn insert_messages(
                &mut self,
                messages: &[$crate::rows::MessageCols],
            ) -> $crate::error::Result<()> {
                const SQL: &str = concat!(
                    "INSERT INTO messages (",
                    message_columns!(),
                    ", deleted, on_branch) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                     $12, $13, $14, $15, FALSE, TRUE)"
                );
                for m in messages {
                    sqlx::query(SQL)
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
                        .bind(m.parent_id)
                        .execute(self.conn().await?)
                        .await?;
                }
                Ok(())
            }

            async fn commit_group_writes(
                &mut self,
                messages: &[$crate::rows::MessageCols],
                voided: &[$crate::ops::Voided],
                chats: &[$crate::rows::ChatCols],
            ) -> $crate::error::Result<()> {
                // 15 parameters a row, well below SQLite's limit per statement.
                for chunk in messages.chunks(1000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                        "INSERT INTO messages (",
                        message_columns!(),
                        ", deleted, on_branch) "
                    ));
                    query.push_values(chunk, |mut row, m| {
                        row.push_bind(m.chat_id.as_str())
                            .push_bind(m.id)
                            .push_bind(m.role.as_str())
                            .push_bind(m.parts.as_str())
                            .push_bind(m.content_version)
                            .push_bind(m.usage.as_deref())
                            .push_bind(m.context_limit)
                            .push_bind(m.runtime_ms)
                            .push_bind(m.interrupted)
                            .push_bind(m.provider_response_id.as_deref())
                            .push_bind(m.event_seq)
                            .push_bind(m.created_at)
                            .push_bind(m.kind.as_str())
                            .push_bind(m.finish_reason.as_deref())
                            .push_bind(m.parent_id)
                            .push("FALSE")
                            .push("TRUE");
                    });
                    query.build().persistent(false).execute(self.conn().await?).await?;
                }
                if !voided.is_empty() {
                    let ids: Vec<&str> = chats.iter().map(|c| c.id.as_str()).collect();
                    for what in voided {
                        delete_voided!(self, $db, $by_cut, *what, &ids);
                    }
                }
                // Every row exists and is locked: the insert always meets its conflict, and
                // the update writes what `update_chat` writes, for all chats at once.
                for chunk in chats.chunks(1000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                        "INSERT INTO chats (",
                        chat_columns!(),
                        ") "
                    ));
                    query.push_values(chunk, |mut row, c| {
                        push_chat_row!(row, c);
                    });
                    query.push(
                        " ON CONFLICT (id) DO UPDATE SET title = excluded.title, \
                         model = excluded.model, status = excluded.status, \
                         archived = excluded.archived, max_steps = excluded.max_steps, \
                         system_prompt = excluded.system_prompt, tools = excluded.tools, \
                         worker_id = excluded.worker_id, \
                         lease_expires_at = excluded.lease_expires_at, \
                         version = excluded.version, \
                         history_version = excluded.history_version, \
                         event_seq = excluded.event_seq, \
                         last_message_id = excluded.last_message_id, \
                         last_error_kind = excluded.last_error_kind, \
                         last_error_message = excluded.last_error_message, \
                         retry_state = excluded.retry_state, \
                         pending_tool_calls = excluded.pending_tool_calls, \
                         pending_deadline = excluded.pending_deadline, \
                         updated_at = excluded.updated_at, \
                         compact_requested = excluded.compact_requested, \
                         last_error_provider = excluded.last_error_provider, \
                         last_error_url = excluded.last_error_url, \
                         leaf_id = excluded.leaf_id, branch_seq = excluded.branch_seq",
                    );
                    query.build().persistent(false).execute(self.conn().await?).await?;
                }
                Ok(())
            }

            async fn messages(
                &mut self,
                chat: &str,
                after: i64,
                siblings: bool,
            ) -> $crate::error::Result<Vec<$crate::rows::MessageCols>> {
                const SQL: &str = branch_messages_sql!();
                const WITH_SIBLINGS: &str = concat!(
                    "SELECT ",
                    message_columns!(),
                    $siblings,
                    " FROM messages WHERE chat_id = $1 AND id > $2 AND on_branch ORDER BY id"
                );
                Ok(sqlx::query_as(if siblings { WITH_SIBLINGS } else { SQL })
                    .bind(chat)
                    .bind(after)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn messages_after_seq(
                &mut self,
                chat: &str,
                after: i64,
            ) -> $crate::error::Result<Vec<$crate::rows::MessageCols>> {
                const SQL: &str = concat!(
                    "SELECT ",
                    message_columns!(),
                    $siblings,
                    " FROM messages WHERE chat_id = $1 AND event_seq > $2 AND on_branch \
                     ORDER BY event_seq"
                );
                Ok(sqlx::query_as(SQL)
                    .bind(chat)
                    .bind(after)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn visible_page(
                &mut self,
                chat: &str,
                after: i64,
                by_seq: bool,
                limit: i64,
            ) -> $crate::error::Result<Vec<$crate::rows::MessageCols>> {
                const BY_ID: &str = concat!(
                    "SELECT ",
                    message_columns!(),
                    $siblings,
                    " FROM messages WHERE chat_id = $1 AND id > $2 AND on_branch \
                     AND COALESCE(kind, '') <> 'summary' ORDER BY id LIMIT $3"
                );
                const BY_SEQ: &str = visible_by_seq_sql!($siblings);
                Ok(sqlx::query_as(if by_seq { BY_SEQ } else { BY_ID })
                    .bind(chat)
                    .bind(after)
                    .bind(limit)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn tree(
                &mut self,
                chat: &str,
            ) -> $crate::error::Result<Vec<$crate::rows::TreeRow>> {
                Ok(sqlx::query_as(
                    "SELECT id, parent_id, role, kind FROM messages \
                     WHERE chat_id = $1 AND NOT deleted ORDER BY id",
                )
                .bind(chat)
                .fetch_all(self.conn().await?)
                .await?)
            }

            async fn tree_messages(
                &mut self,
                chat: &str,
            ) -> $crate::error::Result<Vec<$crate::rows::MessageCols>> {
                const SQL: &str = concat!(
                    "SELECT ",
                    message_columns!(),
                    " FROM messages WHERE chat_id = $1 AND NOT deleted ORDER BY id"
                );
                Ok(sqlx::query_as(SQL)
                    .bind(chat)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn set_branch(
                &mut self,
                chat: &str,
                path: &[(i64, i64)],
            ) -> $crate::error::Result<()> {
                sqlx::query("UPDATE messages SET on_branch = FALSE WHERE chat_id = $1 AND on_branch")
                    .bind(chat)
                    .execute(self.conn().await?)
                    .await?;
                for chunk in path.chunks(1000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "UPDATE messages SET on_branch = TRUE, event_seq = CASE id",
                    );
                    for (id, seq) in chunk {
                        query
                            .push(" WHEN ")
                            .push_bind(*id)
                            .push(" THEN ")
                            .push_bind(*seq);
                    }
                    query.push(" ELSE event_seq END WHERE chat_id = ");
                    query.push_bind(chat).push(" AND id IN (");
                    let mut list = query.separated(", ");
                    for (id, _) in chunk {
                        list.push_bind(*id);
                    }
                    query.push(")");
                    query.build().persistent(false).execute(self.conn().await?).await?;
                }
                Ok(())
            }

            async fn messages_by_ids(
                &mut self,
                chat: &str,
                ids: &[i64],
            ) -> $crate::error::Result<Vec<$crate::rows::MessageCols>> {
                let mut found = Vec::with_capacity(ids.len());
                for chunk in ids.chunks(2000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                        "SELECT ",
                        message_columns!(),
                        $siblings,
                        " FROM messages WHERE chat_id = "
                    ));
                    query.push_bind(chat).push(" AND id IN (");
                    let mut list = query.separated(", ");
                    for id in chunk {
                        list.push_bind(*id);
                    }
                    query.push(") ORDER BY id");
                    found.extend(
                        query
                            .build_query_as::<$crate::rows::MessageCols>()
                            .persistent(false)
                            .fetch_all(self.conn().await?)
                            .await?,
                    );
                }
                Ok(found)
            }

            async fn recent_messages(
                &mut self,
                chat: &str,
                limit: i64,
            ) -> $crate::error::Result<Vec<$crate::rows::MessageCols>> {
                const SQL: &str = concat!(
                    "SELECT ",
                    message_columns!(),
                    $siblings,
                    " FROM messages WHERE chat_id = $1 AND on_branch \
                     AND COALESCE(kind, '') <> 'summary' ORDER BY id DESC LIMIT $2"
                );
                let mut rows: Vec<$crate::rows::MessageCols> = sqlx::query_as(SQL)
                    .bind(chat)
                    .bind(limit)
                    .fetch_all(self.conn().await?)
                    .await?;
                rows.reverse();
                Ok(rows)
            }

            async fn queue(
                &mut self,
                chat: &str,
            ) -> $crate::error::Result<Vec<$crate::rows::QueuedCols>> {
                Ok(sqlx::query_as(
                    "SELECT id, chat_id, position, parts, created_at FROM queued_messages \
                     WHERE chat_id = $1 ORDER BY position",
                )
                .bind(chat)
                .fetch_all(self.conn().await?)
                .await?)
            }

            async fn queues_of(
                &mut self,
                chats: &[String],
            ) -> $crate::error::Result<Vec<$crate::rows::QueuedCols>> {
                let mut found = Vec::new();
                for chunk in chats.chunks(2000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "SELECT id, chat_id, position, parts, created_at FROM queued_messages \
                         WHERE chat_id IN (",
                    );
                    let mut list = query.separated(", ");
                    for chat in chunk {
                        list.push_bind(chat.as_str());
                    }
                    query.push(") ORDER BY chat_id, position");
                    found.extend(
                        query
                            .build_query_as::<$crate::rows::QueuedCols>()
                            .persistent(false)
                            .fetch_all(self.conn().await?)
                            .await?,
                    );
                }
                Ok(found)
            }

            async fn queued_chats(
                &mut self,
                chats: &[String],
            ) -> $crate::error::Result<Vec<String>> {
                let mut found = Vec::new();
                for chunk in chats.chunks(2000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "SELECT DISTINCT chat_id FROM queued_messages WHERE chat_id IN (",
                    );
                    let mut list = query.separated(", ");
                    for chat in chunk {
                        list.push_bind(chat.as_str());
                    }
                    query.push(")");
                    found.extend(
                        query
                            .build_query_scalar::<String>()
                            .persistent(false)
                            .fetch_all(self.conn().await?)
                            .await?,
                    );
                }
                Ok(found)
            }

            async fn insert_queued(
                &mut self,
                q: &$crate::rows::QueuedCols,
            ) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO queued_messages (id, chat_id, position, parts, created_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(&q.id)
                .bind(&q.chat_id)
                .bind(q.position)
                .bind(&q.parts)
                .bind(q.created_at)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn set_queued_position(
                &mut self,
                id: &str,
                position: i64,
            ) -> $crate::error::Result<()> {
                sqlx::query("UPDATE queued_messages SET position = $2 WHERE id = $1")
                    .bind(id)
                    .bind(position)
                    .execute(self.conn().await?)
                    .await?;
                Ok(())
            }

            async fn delete_queued(&mut self, id: &str) -> $crate::error::Result<()> {
                sqlx::query("DELETE FROM queued_messages WHERE id = $1")
                    .bind(id)
                    .execute(self.conn().await?)
                    .await?;
                Ok(())
            }

            async fn clear_queue(&mut self, chat: &str) -> $crate::error::Result<()> {
                sqlx::query("DELETE FROM queued_messages WHERE chat_id = $1")
                    .bind(chat)
                    .execute(self.conn().await?)
                    .await?;
                Ok(())
            }

            async fn append_live(
                &mut self,
                chat: &str,
                first_seq: i64,
                last_seq: i64,
                payloads: &str,
            ) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO live_parts (chat_id, first_seq, last_seq, payloads) \
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(chat)
                .bind(first_seq)
                .bind(last_seq)
                .bind(payloads)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn void(
                &mut self,
                chat: &str,
                what: $crate::ops::Voided,
            ) -> $crate::error::Result<()> {
                delete_voided!(self, $db, $by_cut, what, &[chat]);
                Ok(())
            }

            async fn live_after(
                &mut self,
                chat: &str,
                after: i64,
            ) -> $crate::error::Result<Vec<(i64, String)>> {
                Ok(sqlx::query_as(live_after_sql!())
                .bind(chat)
                .bind(after)
                .fetch_all(self.conn().await?)
                .await?)
            }

            async fn logged_after(
                &mut self,
                chat: &str,
                after: i64,
            ) -> $crate::error::Result<Vec<(i64, String)>> {
                Ok(sqlx::query_as(logged_after_sql!())
                .bind(chat)
                .bind(after)
                .fetch_all(self.conn().await?)
                .await?)
            }

            async fn purge_settled_logs(&mut self, before: i64) -> $crate::error::Result<u64> {
                Ok(sqlx::query(
                    "DELETE FROM live_parts WHERE chat_id IN (SELECT c.id FROM chats c \
                     WHERE c.id IN (SELECT DISTINCT chat_id FROM live_parts) \
                     AND c.status NOT IN ('running', 'interrupting') AND c.updated_at < $1)",
                )
                .bind(before)
                .execute(self.conn().await?)
                .await?
                .rows_affected())
            }

            async fn upsert_tool_record(
                &mut self,
                r: &$crate::rows::ToolRecordCols,
            ) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO tool_records (chat_id, tool_call_id, tool_name, args, state, \
                     result, is_error, started_at, finished_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (chat_id, tool_call_id) DO UPDATE SET \
                     tool_name = excluded.tool_name, args = excluded.args, \
                     state = excluded.state, result = excluded.result, \
                     is_error = excluded.is_error, finished_at = excluded.finished_at",
                )
                .bind(&r.chat_id)
                .bind(&r.tool_call_id)
                .bind(&r.tool_name)
                .bind(&r.args)
                .bind(&r.state)
                .bind(&r.result)
                .bind(r.is_error)
                .bind(r.started_at)
                .bind(r.finished_at)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn tool_records(
                &mut self,
                chat: &str,
            ) -> $crate::error::Result<Vec<$crate::rows::ToolRecordCols>> {
                Ok(sqlx::query_as(tool_records_sql!())
                .bind(chat)
                .fetch_all(self.conn().await?)
                .await?)
            }

            async fn clear_tool_records(&mut self, chat: &str) -> $crate::error::Result<()> {
                sqlx::query("DELETE FROM tool_records WHERE chat_id = $1")
                    .bind(chat)
                    .execute(self.conn().await?)
                    .await?;
                Ok(())
            }

            async fn put_checkpoint(
                &mut self,
                chat: &str,
                data: &str,
                now: i64,
            ) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO checkpoints (chat_id, data, updated_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (chat_id) DO UPDATE SET data = excluded.data, \
                     updated_at = excluded.updated_at",
                )
                .bind(chat)
                .bind(data)
                .bind(now)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn get_checkpoint(
                &mut self,
                chat: &str,
            ) -> $crate::error::Result<Option<String>> {
                Ok(
                    sqlx::query_scalar("SELECT data FROM checkpoints WHERE chat_id = $1")
                        .bind(chat)
                        .fetch_optional(self.conn().await?)
                        .await?,
                )
            }

            async fn delete_checkpoint(&mut self, chat: &str) -> $crate::error::Result<()> {
                sqlx::query("DELETE FROM checkpoints WHERE chat_id = $1")
                    .bind(chat)
                    .execute(self.conn().await?)
                    .await?;
                Ok(())
            }

            async fn insert_user(
                &mut self,
                name: &str,
                token_sha256: &str,
                now: i64,
            ) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO users (name, token_sha256, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (name) DO UPDATE SET token_sha256 = excluded.token_sha256",
                )
                .bind(name)
                .bind(token_sha256)
                .bind(now)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn user_by_token(
                &mut self,
                token_sha256: &str,
            ) -> $crate::error::Result<Option<(String, i64)>> {
                Ok(
                    sqlx::query_as("SELECT name, created_at FROM users WHERE token_sha256 = $1")
                        .bind(token_sha256)
                        .fetch_optional(self.conn().await?)
                        .await?,
                )
            }

            async fn count_users(&mut self) -> $crate::error::Result<i64> {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users")
                    .fetch_one(self.conn().await?)
                    .await?)
            }

            async fn delete_user(&mut self, name: &str) -> $crate::error::Result<bool> {
                let done = sqlx::query("DELETE FROM users WHERE name = $1")
                    .bind(name)
                    .execute(self.conn().await?)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn list_users(&mut self) -> $crate::error::Result<Vec<(String, i64)>> {
                Ok(
                    sqlx::query_as("SELECT name, created_at FROM users ORDER BY name")
                        .fetch_all(self.conn().await?)
                        .await?,
                )
            }

            async fn user_budget(
                &mut self,
                name: &str,
            ) -> $crate::error::Result<Option<Option<String>>> {
                Ok(sqlx::query_scalar("SELECT budget FROM users WHERE name = $1")
                    .bind(name)
                    .fetch_optional(self.conn().await?)
                    .await?)
            }

            async fn set_user_budget(
                &mut self,
                name: &str,
                budget: Option<&str>,
            ) -> $crate::error::Result<bool> {
                let done = sqlx::query("UPDATE users SET budget = $2 WHERE name = $1")
                    .bind(name)
                    .bind(budget)
                    .execute(self.conn().await?)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn insert_usage(
                &mut self,
                rows: &[$crate::ops::UsageCols],
            ) -> $crate::error::Result<()> {
                for r in rows {
                    sqlx::query(
                        "INSERT INTO usage_records (chat_id, message_id, user_name, model, \
                         recorded_at, input_tokens, cached_input_tokens, output_tokens, \
                         reasoning_tokens, cost_nanos) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                         ON CONFLICT (chat_id, message_id) DO NOTHING",
                    )
                    .bind(&r.chat_id)
                    .bind(r.message_id)
                    .bind(&r.user_name)
                    .bind(&r.model)
                    .bind(r.recorded_at)
                    .bind(r.counts[0])
                    .bind(r.counts[1])
                    .bind(r.counts[2])
                    .bind(r.counts[3])
                    .bind(r.cost_nanos)
                    .execute(self.conn().await?)
                    .await?;
                }
                Ok(())
            }

            async fn usage_spent(
                &mut self,
                user: &str,
                since: i64,
            ) -> $crate::error::Result<(i64, Option<i64>)> {
                Ok(sqlx::query_as(
                    "SELECT CAST(COALESCE(SUM(input_tokens + cached_input_tokens \
                     + output_tokens), 0) AS BIGINT), CAST(SUM(cost_nanos) AS BIGINT) \
                     FROM usage_records WHERE user_name = $1 AND recorded_at >= $2",
                )
                .bind(user)
                .bind(since)
                .fetch_one(self.conn().await?)
                .await?)
            }

            async fn usage_groups(
                &mut self,
                keys: [&str; 4],
                user: &str,
                from: i64,
                to: i64,
            ) -> $crate::error::Result<Vec<$crate::ops::UsageRow>> {
                let [u, c, m, d] = keys;
                let sql = format!(
                    "SELECT {u}, {c}, {m}, {d}, {sums} FROM usage_records \
                     WHERE user_name = $1 AND recorded_at >= $2 AND recorded_at < $3 \
                     GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4",
                    sums = usage_sums!(),
                );
                // One text per choice of keys: not worth a place in the statement cache.
                Ok(sqlx::query_as(&sql)
                    .persistent(false)
                    .bind(user)
                    .bind(from)
                    .bind(to)
                    .fetch_all(self.conn().await?)
                    .await?)
            }

            async fn chat_usage(
                &mut self,
                chat: &str,
            ) -> $crate::error::Result<$crate::ops::UsageRow> {
                const SQL: &str = concat!(
                    "SELECT CAST(NULL AS TEXT), CAST(NULL AS TEXT), CAST(NULL AS TEXT), \
                     CAST(NULL AS BIGINT), ",
                    usage_sums!(),
                    " FROM usage_records WHERE chat_id = $1"
                );
                Ok(sqlx::query_as(SQL)
                    .bind(chat)
                    .fetch_one(self.conn().await?)
                    .await?)
            }

            async fn alias_get(
                &mut self,
                owner: &str,
                alias: &str,
            ) -> $crate::error::Result<Option<String>> {
                Ok(sqlx::query_scalar(
                    "SELECT chat_id FROM chat_aliases WHERE owner = $1 AND alias = $2",
                )
                .bind(owner)
                .bind(alias)
                .fetch_optional(self.conn().await?)
                .await?)
            }

            async fn alias_insert(
                &mut self,
                owner: &str,
                alias: &str,
                chat: &str,
                now: i64,
            ) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO chat_aliases (owner, alias, chat_id, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (owner, alias) DO NOTHING",
                )
                .bind(owner)
                .bind(alias)
                .bind(chat)
                .bind(now)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn idem_get(
                &mut self,
                user: &str,
                key: &str,
                since: i64,
            ) -> $crate::error::Result<Option<String>> {
                Ok(sqlx::query_scalar(
                    "SELECT response FROM idempotency_keys \
                     WHERE user_name = $1 AND idem_key = $2 AND created_at >= $3",
                )
                .bind(user)
                .bind(key)
                .bind(since)
                .fetch_optional(self.conn().await?)
                .await?)
            }

            async fn idem_put(
                &mut self,
                user: &str,
                key: &str,
                response: &str,
                now: i64,
                expired_before: i64,
            ) -> $crate::error::Result<bool> {
                let done = sqlx::query(
                    "INSERT INTO idempotency_keys (user_name, idem_key, response, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (user_name, idem_key) DO UPDATE SET \
                     response = excluded.response, created_at = excluded.created_at \
                     WHERE idempotency_keys.created_at < $5",
                )
                .bind(user)
                .bind(key)
                .bind(response)
                .bind(now)
                .bind(expired_before)
                .execute(self.conn().await?)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn put_trace_parent(
                &mut self,
                id: &str,
                parent: Option<&str>,
            ) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO trace_contexts (id, parent, run) VALUES ($1, $2, NULL) \
                     ON CONFLICT (id) DO UPDATE SET parent = excluded.parent, run = NULL",
                )
                .bind(id)
                .bind(parent)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn take_trace_parent(
                &mut self,
                id: &str,
            ) -> $crate::error::Result<Option<String>> {
                let parent: Option<Option<String>> =
                    sqlx::query_scalar("DELETE FROM trace_contexts WHERE id = $1 RETURNING parent")
                        .bind(id)
                        .fetch_optional(self.conn().await?)
                        .await?;
                Ok(parent.flatten())
            }

            async fn put_run_trace(&mut self, chat: &str, run: &str) -> $crate::error::Result<()> {
                sqlx::query(
                    "INSERT INTO trace_contexts (id, parent, run) VALUES ($1, NULL, $2) \
                     ON CONFLICT (id) DO UPDATE SET run = excluded.run",
                )
                .bind(chat)
                .bind(run)
                .execute(self.conn().await?)
                .await?;
                Ok(())
            }

            async fn trace_context(
                &mut self,
                chat: &str,
            ) -> $crate::error::Result<(Option<String>, Option<String>)> {
                let row: Option<(Option<String>, Option<String>)> =
                    sqlx::query_as("SELECT parent, run FROM trace_contexts WHERE id = $1")
                        .bind(chat)
                        .fetch_optional(self.conn().await?)
                        .await?;
                Ok(row.unwrap_or_default())
            }

            async fn idem_purge(&mut self, before: i64) -> $crate::error::Result<u64> {
                Ok(
                    sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
                        .bind(before)
                        .execute(self.conn().await?)
                        .await?
                        .rows_affected(),
                )
            }

            async fn purge_tool_records(&mut self, before: i64) -> $crate::error::Result<u64> {
                Ok(sqlx::query(
                    "DELETE FROM tool_records WHERE finished_at IS NOT NULL AND finished_at < $1 \
                     AND chat_id IN (SELECT id FROM chats \
                     WHERE status NOT IN ('running', 'interrupting'))",
                )
                .bind(before)
                .execute(self.conn().await?)
                .await?
                .rows_affected())
            }

            async fn notify(
                &mut self,
                notice: &$crate::types::ChangeNotice,
            ) -> $crate::error::Result<()> {
                $notify(self.conn().await?, notice).await
            }

            async fn commit(self: Box<Self>) -> $crate::error::Result<()> {
                self.finish().await
            }

            $($extra)*

            async fn rollback(self: Box<Self>) -> $crate::error::Result<()> {
                self.abort().await
            }
        }
    };
}
