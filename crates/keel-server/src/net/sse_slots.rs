//! Caps on live event streams: so many per user, so many in all. In single-user mode there
//! is no other user to keep a share for, so only the total applies. A stream holds its
//! [`SseSlot`] for as long as it is open; dropping the stream (the client left, the chat
//! was deleted, the daemon is stopping) gives the slot back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::metrics::gauge::Gauge;

/// Which cap a new stream would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRefusal {
    User,
    Total,
}

impl SlotRefusal {
    pub fn reason(self) -> &'static str {
        match self {
            SlotRefusal::User => "sse_user_cap",
            SlotRefusal::Total => "sse_total_cap",
        }
    }
}

/// Whether one more stream fits: the user's cap first, so a user at its own cap is told
/// so even when the daemon is full too.
pub(crate) fn admit(
    user_open: usize,
    total_open: usize,
    per_user: usize,
    total: usize,
) -> Result<(), SlotRefusal> {
    if user_open >= per_user {
        Err(SlotRefusal::User)
    } else if total_open >= total {
        Err(SlotRefusal::Total)
    } else {
        Ok(())
    }
}

#[derive(Default)]
struct Open {
    total: usize,
    by_user: HashMap<String, usize>,
}

/// The daemon's streams, counted.
pub struct SseSlots {
    per_user: usize,
    total: usize,
    open: Mutex<Open>,
    gauge: Gauge,
}

impl SseSlots {
    pub fn new(per_user: usize, total: usize, gauge: Gauge) -> Arc<Self> {
        Arc::new(Self {
            per_user,
            total,
            open: Mutex::new(Open::default()),
            gauge,
        })
    }

    /// A slot for one more stream of `user` (`None` in single-user mode: the total cap
    /// only), or which cap it would exceed.
    pub fn take(self: &Arc<Self>, user: Option<&str>) -> Result<SseSlot, SlotRefusal> {
        // Counting cannot leave the map inconsistent half-way, so a poisoned lock's
        // data is still right.
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = user.and_then(|u| open.by_user.get(u).copied()).unwrap_or(0);
        admit(mine, open.total, self.per_user, self.total)?;
        open.total += 1;
        if let Some(user) = user {
            *open.by_user.entry(user.to_owned()).or_default() += 1;
        }
        self.gauge
            .set(i64::try_from(open.total).unwrap_or(i64::MAX));
        Ok(SseSlot {
            slots: self.clone(),
            user: user.map(str::to_owned),
        })
    }

    fn give_back(&self, user: Option<&str>) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(user) = user
            && let Some(mine) = open.by_user.get_mut(user)
        {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                open.by_user.remove(user);
            }
        }
        self.gauge
            .set(i64::try_from(open.total).unwrap_or(i64::MAX));
    }

    /// Streams open now (all users).
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

/// One open stream's place; given back when dropped.
pub struct SseSlot {
    slots: Arc<SseSlots>,
    user: Option<String>,
}

impl Drop for SseSlot {
    fn drop(&mut self) {
        self.slots.give_back(self.user.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_cap_is_named_before_the_total_cap() {
        assert_eq!(admit(0, 0, 2, 3), Ok(()));
        assert_eq!(admit(2, 2, 2, 3), Err(SlotRefusal::User));
        assert_eq!(admit(1, 3, 2, 3), Err(SlotRefusal::Total));
        assert_eq!(admit(2, 3, 2, 3), Err(SlotRefusal::User));
    }

    #[test]
    fn slots_come_back_when_streams_end() {
        let slots = SseSlots::new(2, 3, Gauge::default());
        let a1 = slots.take(Some("alice")).unwrap();
        let a2 = slots.take(Some("alice")).unwrap();
        assert_eq!(slots.take(Some("alice")).err(), Some(SlotRefusal::User));
        let b1 = slots.take(Some("bob")).unwrap();
        assert_eq!(slots.take(Some("bob")).err(), Some(SlotRefusal::Total));
        assert_eq!(slots.open(), 3);
        drop(a1);
        assert!(
            slots.take(Some("bob")).is_ok(),
            "the freed slot is taken and dropped at once"
        );
        let b2 = slots.take(Some("bob")).unwrap();
        assert_eq!(slots.take(Some("bob")).err(), Some(SlotRefusal::User));
        drop((a2, b1, b2));
        assert_eq!(slots.open(), 0);
        assert_eq!(slots.gauge.get(), 0);
    }

    #[test]
    fn a_single_user_is_held_to_the_total_only() {
        let slots = SseSlots::new(1, 3, Gauge::default());
        let held: Vec<SseSlot> = (0..3).map(|_| slots.take(None).unwrap()).collect();
        assert_eq!(slots.take(None).err(), Some(SlotRefusal::Total));
        drop(held);
        assert_eq!(slots.open(), 0);
    }
}
