//! One event of a live event stream as it travels from a chat's follower to the socket:
//! shared by the follower that produces it (`service::follow`) and the bodies that write it
//! (`event_stream`, and the compatible doors' streams).

use std::ops::Deref;

use bytes::Bytes;

use crate::hub::Frame;
use crate::sse;

/// One event of a chat on its way to a connection, one pointer wide: each connection's
/// channel holds a block of 32 slots from the moment it opens, busy or idle, and an idle
/// stream should cost little more than its socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveItem(Box<LiveEvent>);

/// One event of a chat as the contract names it: its id (the position it carries), name and
/// JSON data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveEvent {
    pub id: i64,
    pub event: &'static str,
    pub data: Bytes,
    /// The whole SSE event, when the hub encoded it with this id (shared by every
    /// subscriber).
    encoded: Option<Bytes>,
}

impl Deref for LiveItem {
    type Target = LiveEvent;

    fn deref(&self) -> &LiveEvent {
        &self.0
    }
}

impl LiveItem {
    pub(crate) fn new(id: i64, event: &'static str, data: impl Into<Bytes>) -> Self {
        Self(Box::new(LiveEvent {
            id,
            event,
            data: data.into(),
            encoded: None,
        }))
    }

    /// A durable frame of the hub, with the id it was encoded with.
    pub(crate) fn frame(frame: &Frame) -> Self {
        Self(Box::new(LiveEvent {
            id: i64::try_from(frame.seq).unwrap_or(i64::MAX),
            event: frame.event,
            data: frame.data(),
            encoded: Some(frame.sse().clone()),
        }))
    }

    /// The event as SSE text.
    pub(crate) fn into_sse(self) -> Bytes {
        let LiveEvent {
            id,
            event,
            data,
            encoded,
        } = *self.0;
        match encoded {
            Some(encoded) => encoded,
            None => {
                let id = u64::try_from(id).unwrap_or_default();
                // Data is JSON text, built by this crate from strings.
                let data = std::str::from_utf8(&data).unwrap_or("null");
                sse::encode(id, event, data).into_sse()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LiveItem;

    #[test]
    fn a_live_item_is_one_pointer_wide() {
        // Each open stream's channel holds a block of these, busy or idle.
        assert_eq!(size_of::<LiveItem>(), size_of::<usize>());
    }
}
