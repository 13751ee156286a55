//! Live event fan-out: one broadcast channel per chat with subscribers.
//!
//! Each event is serialised once and shared by every subscriber. A subscriber that falls
//! more than the channel's capacity behind is not waited for: it sees `Lagged`, and the SSE
//! layer disconnects it so it can resume from its last event id. The run and the other
//! subscribers never slow down for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::broadcast;

/// Events a subscriber may buffer before it is cut off.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// One event, ready to be written as SSE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The chat's event sequence number this event carries as its SSE `id`.
    pub seq: u64,
    /// The SSE event name (`message`, `part`, `status`, ...).
    pub event: &'static str,
    /// The JSON payload.
    pub data: String,
    /// Durable events (committed messages, live parts) advance a client's position;
    /// ephemeral ones (status, retry, queue) repeat the current position.
    pub durable: bool,
}

/// The per-chat channels of this process.
#[derive(Debug, Default)]
pub struct Hub {
    channels: Mutex<HashMap<String, broadcast::Sender<Arc<Frame>>>>,
}

impl Hub {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, broadcast::Sender<Arc<Frame>>>> {
        // Every critical section is a single map operation; a poisoned map is still whole.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to a chat's live events.
    pub fn subscribe(&self, chat_id: &str) -> broadcast::Receiver<Arc<Frame>> {
        self.lock()
            .entry(chat_id.to_owned())
            .or_insert_with(|| broadcast::channel(SUBSCRIBER_BUFFER).0)
            .subscribe()
    }

    /// Publishes to a chat's subscribers, if any. Never blocks.
    pub fn publish(&self, chat_id: &str, frame: Frame) {
        let mut channels = self.lock();
        let Some(sender) = channels.get(chat_id) else {
            return;
        };
        if sender.send(Arc::new(frame)).is_err() {
            // Nobody listens any more: drop the channel so idle chats cost nothing.
            channels.remove(chat_id);
        }
    }

    /// Whether anyone is subscribed to `chat_id`.
    pub fn has_subscribers(&self, chat_id: &str) -> bool {
        self.lock()
            .get(chat_id)
            .is_some_and(|s| s.receiver_count() > 0)
    }

    /// Number of chats with live channels.
    pub fn channel_count(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: u64) -> Frame {
        Frame {
            seq,
            event: "part",
            data: "{}".into(),
            durable: true,
        }
    }

    #[tokio::test]
    async fn subscribers_receive_in_order() {
        let hub = Hub::new();
        let mut a = hub.subscribe("c");
        let mut b = hub.subscribe("c");
        hub.publish("c", frame(1));
        hub.publish("c", frame(2));
        assert_eq!(a.recv().await.unwrap().seq, 1);
        assert_eq!(a.recv().await.unwrap().seq, 2);
        assert_eq!(b.recv().await.unwrap().seq, 1);
    }

    #[tokio::test]
    async fn a_slow_subscriber_lags_without_blocking_the_publisher() {
        let hub = Hub::new();
        let mut slow = hub.subscribe("c");
        for seq in 0..(SUBSCRIBER_BUFFER as u64 + 10) {
            hub.publish("c", frame(seq));
        }
        assert!(matches!(
            slow.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
    }

    #[test]
    fn channels_without_subscribers_are_dropped() {
        let hub = Hub::new();
        let rx = hub.subscribe("c");
        drop(rx);
        hub.publish("c", frame(1));
        assert_eq!(hub.channel_count(), 0);
        hub.publish("unknown", frame(1));
    }
}
