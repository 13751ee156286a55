//! One event of a live event stream as it travels from a chat's follower to the socket:
//! shared by the follower that produces it (`service::follow`) and the bodies that write it
//! (`event_stream`, and the compatible doors' streams).

use bytes::Bytes;

use crate::hub::Frame;
use crate::sse;

/// One event of a chat as the contract names it: its id (the position it carries), name and
/// JSON data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveItem {
    pub id: i64,
    pub event: &'static str,
    pub data: Bytes,
    /// The whole SSE event, when the hub encoded it with this id (shared by every
    /// subscriber).
    encoded: Option<Bytes>,
}

impl LiveItem {
    pub(crate) fn new(id: i64, event: &'static str, data: impl Into<Bytes>) -> Self {
        Self {
            id,
            event,
            data: data.into(),
            encoded: None,
        }
    }

    /// A durable frame of the hub, with the id it was encoded with.
    pub(crate) fn frame(frame: &Frame) -> Self {
        Self {
            id: i64::try_from(frame.seq).unwrap_or(i64::MAX),
            event: frame.event,
            data: frame.data(),
            encoded: Some(frame.sse().clone()),
        }
    }

    /// The event as SSE text.
    pub(crate) fn into_sse(self) -> Bytes {
        match self.encoded {
            Some(encoded) => encoded,
            None => {
                let id = u64::try_from(self.id).unwrap_or_default();
                // Data is JSON text, built by this crate from strings.
                let data = std::str::from_utf8(&self.data).unwrap_or("null");
                sse::encode(id, self.event, data).into_sse()
            }
        }
    }
}
