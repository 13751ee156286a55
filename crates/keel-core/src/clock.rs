//! Where time comes from: the system clock in the daemon, a clock moved by hand in tests and
//! simulations. The agent loop stamps parts with it and the store times leases and deadlines
//! with it, so one trait serves both.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(Mutex::new(start))
    }

    pub fn advance(&self, by: Duration) {
        // A poisoned lock still holds a valid instant: nothing can be left half-written.
        let mut now = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Another clock's time moved by an offset that can change while it is in use: a
/// replica's view of a shared database's clock, kept as its own clock plus the difference
/// last measured, so reading it costs no round trip.
#[derive(Debug)]
pub struct OffsetClock {
    base: Arc<dyn Clock>,
    offset_ms: AtomicI64,
}

impl OffsetClock {
    pub fn new(base: Arc<dyn Clock>, offset: Duration) -> Self {
        Self {
            base,
            offset_ms: AtomicI64::new(offset.num_milliseconds()),
        }
    }

    /// The clock this one is offset from.
    pub fn base(&self) -> &Arc<dyn Clock> {
        &self.base
    }

    pub fn set_offset(&self, offset: Duration) {
        self.offset_ms
            .store(offset.num_milliseconds(), Ordering::Relaxed);
    }

    pub fn offset(&self) -> Duration {
        Duration::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> DateTime<Utc> {
        self.base.now() + self.offset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let start = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::seconds(5));
        assert_eq!(clock.now(), start + Duration::seconds(5));
    }

    #[test]
    fn an_offset_clock_follows_its_base_by_the_offset_last_set() {
        let start = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        let base = Arc::new(ManualClock::new(start));
        let clock = OffsetClock::new(base.clone(), Duration::seconds(-90));
        assert_eq!(clock.now(), start - Duration::seconds(90));
        base.advance(Duration::seconds(10));
        clock.set_offset(Duration::milliseconds(250));
        assert_eq!(clock.now(), start + Duration::milliseconds(10_250));
    }
}
