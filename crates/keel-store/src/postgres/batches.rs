//! PostgreSQL's statements over many chats at once, each with one array parameter per
//! column.
//!
//! The live path runs them every window with hundreds of chats: the log writer locks the
//! fences of every streaming chat and appends their batches, the grouped reader reads the
//! logs of every followed chat, the lease keeper renews every lease. Written with a
//! parameter per value (`IN ($1, …, $500)`, a `VALUES` row per batch), each size was a
//! statement text of its own: parsed and planned again on every use (a millisecond and more
//! per window at 500 chats), and an entry of its own in `pg_stat_statements`. With arrays
//! (`= ANY($1)`, `unnest($1, $2, …)`) each is one text whatever the size, prepared once per
//! connection, and a batch has no limit on its number of parameters to chunk around.

use sqlx::PgConnection;

use crate::error::Result;
use crate::ops::{ChatLiveRow, LiveRow};
use crate::rows::{ChatCols, FenceCols};

/// Locked in id order, as every transaction that locks several chat rows does.
const LOCK_CHATS: &str = concat!(
    "SELECT ",
    chat_read_columns!(),
    " FROM chats WHERE id = ANY($1) ORDER BY id FOR UPDATE"
);

const LOCK_FENCES: &str = concat!(
    "SELECT ",
    fence_columns!(),
    " FROM chats WHERE id = ANY($1) ORDER BY id FOR UPDATE"
);

const APPEND_LIVE: &str = "INSERT INTO live_parts (chat_id, first_seq, last_seq, payloads) \
     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[])";

/// A data-modifying `WITH` runs whether or not the query reads it: the insert and the
/// notices are one round trip of a log write, not two.
const APPEND_LIVE_NOTIFYING: &str = "WITH appended AS (\
     INSERT INTO live_parts (chat_id, first_seq, last_seq, payloads) \
     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[])) \
     SELECT pg_notify($5, payload) FROM unnest($6::text[]) AS payload";

const SET_LEASE_EXPIRIES: &str = "UPDATE chats SET lease_expires_at = v.value \
     FROM unnest($1::text[], $2::int8[]) AS v (id, value) WHERE chats.id = v.id";

/// The batches of each chat's step in progress (numbered after its last message) that hold
/// entries after the chat's own position.
const LIVE_AFTER_MANY: &str = "SELECT l.chat_id, l.first_seq, l.payloads \
     FROM unnest($1::text[], $2::int8[]) AS w (chat_id, since) \
     JOIN live_parts l ON l.chat_id = w.chat_id \
     WHERE l.last_seq > w.since AND l.last_seq > COALESCE((SELECT MAX(m.event_seq) \
     FROM messages m WHERE m.chat_id = l.chat_id), 0) ORDER BY l.chat_id, l.first_seq";

pub(super) async fn lock_chats(conn: &mut PgConnection, ids: &[String]) -> Result<Vec<ChatCols>> {
    Ok(sqlx::query_as(LOCK_CHATS).bind(ids).fetch_all(conn).await?)
}

pub(super) async fn lock_fences(conn: &mut PgConnection, ids: &[String]) -> Result<Vec<FenceCols>> {
    Ok(sqlx::query_as(LOCK_FENCES)
        .bind(ids)
        .fetch_all(conn)
        .await?)
}

/// The columns of `rows`, one array each, in `live_parts` order.
struct LiveColumns<'a> {
    chats: Vec<&'a str>,
    firsts: Vec<i64>,
    lasts: Vec<i64>,
    payloads: Vec<&'a str>,
}

impl<'a> LiveColumns<'a> {
    fn of(rows: &'a [LiveRow]) -> Self {
        let mut columns = LiveColumns {
            chats: Vec::with_capacity(rows.len()),
            firsts: Vec::with_capacity(rows.len()),
            lasts: Vec::with_capacity(rows.len()),
            payloads: Vec::with_capacity(rows.len()),
        };
        for (chat, first, last, payloads) in rows {
            columns.chats.push(chat);
            columns.firsts.push(*first);
            columns.lasts.push(*last);
            columns.payloads.push(payloads);
        }
        columns
    }
}

pub(super) async fn append_live_rows(conn: &mut PgConnection, rows: &[LiveRow]) -> Result<()> {
    let columns = LiveColumns::of(rows);
    sqlx::query(APPEND_LIVE)
        .bind(&columns.chats)
        .bind(&columns.firsts)
        .bind(&columns.lasts)
        .bind(&columns.payloads)
        .execute(conn)
        .await?;
    Ok(())
}

/// Appends `rows` and sends each of `payloads` on `channel` when the transaction commits.
pub(super) async fn append_live_rows_notifying(
    conn: &mut PgConnection,
    rows: &[LiveRow],
    channel: &str,
    payloads: &[String],
) -> Result<()> {
    let columns = LiveColumns::of(rows);
    sqlx::query(APPEND_LIVE_NOTIFYING)
        .bind(&columns.chats)
        .bind(&columns.firsts)
        .bind(&columns.lasts)
        .bind(&columns.payloads)
        .bind(channel)
        .bind(payloads)
        .execute(conn)
        .await?;
    Ok(())
}

/// `(chat id, number)` pairs as two columns, an array each.
fn chat_number_columns(pairs: &[(String, i64)]) -> (Vec<&str>, Vec<i64>) {
    pairs
        .iter()
        .map(|(chat, number)| (chat.as_str(), *number))
        .unzip()
}

pub(super) async fn set_lease_expiries(
    conn: &mut PgConnection,
    expiries: &[(String, i64)],
) -> Result<()> {
    let (ids, values) = chat_number_columns(expiries);
    sqlx::query(SET_LEASE_EXPIRIES)
        .bind(&ids)
        .bind(&values)
        .execute(conn)
        .await?;
    Ok(())
}

pub(super) async fn live_after_many(
    conn: &mut PgConnection,
    positions: &[(String, i64)],
) -> Result<Vec<ChatLiveRow>> {
    let (chats, since) = chat_number_columns(positions);
    Ok(sqlx::query_as(LIVE_AFTER_MANY)
        .bind(&chats)
        .bind(&since)
        .fetch_all(conn)
        .await?)
}
