//! Lease times from the database's clock. Replicas decide whether a lease has expired by
//! comparing times each of them wrote: on their own clocks, a replica whose clock runs
//! ahead by more than a lease takes every chat of the others again and again. Each
//! replica instead keeps the difference between the database's clock and its own,
//! measured at start-up and again every minute, and times everything by the database.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use keel_core::Clock;
use keel_core::clock::OffsetClock;
use sqlx::postgres::PgPool;

use crate::error::Result;
use crate::types::StoreOptions;

/// How often the difference is measured again (clocks drift, NTP steps them).
const RESYNC_EVERY: StdDuration = StdDuration::from_secs(60);

/// `opts` with a clock that follows the database's, kept in step until the pool closes.
pub(crate) async fn on_database_clock(pool: &PgPool, opts: StoreOptions) -> Result<StoreOptions> {
    let clock = Arc::new(OffsetClock::new(opts.clock.clone(), Duration::zero()));
    clock.set_offset(offset(pool, clock.base().as_ref()).await?);
    let (pool, kept) = (pool.clone(), clock.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RESYNC_EVERY).await;
            if pool.is_closed() {
                return;
            }
            match offset(&pool, kept.base().as_ref()).await {
                Ok(measured) => kept.set_offset(measured),
                Err(error) => tracing::debug!(%error, "measuring the database's clock failed"),
            }
        }
    });
    Ok(StoreOptions { clock, ..opts })
}

/// The database's clock minus `clock`, taken at the middle of one round trip.
async fn offset(pool: &PgPool, clock: &dyn Clock) -> Result<Duration> {
    let before = clock.now();
    let micros: i64 =
        sqlx::query_scalar("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT")
            .fetch_one(pool)
            .await?;
    let after = clock.now();
    let middle = before + (after - before) / 2;
    Ok(Duration::microseconds(micros) - Duration::microseconds(middle.timestamp_micros()))
}
