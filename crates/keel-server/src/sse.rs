//! The text of one Server-Sent Event, encoded once.
//!
//! A live frame is written to every subscriber's socket as the same bytes, so it is encoded
//! when it is published and shared as [`Bytes`]; only events whose id depends on the
//! subscriber (the ephemeral ones, which repeat its position) are encoded per subscriber.
//! The text is exactly what axum's `Event::default().id(..).event(..).data(..)` writes.

use bytes::Bytes;

/// The keep-alive comment, as `KeepAlive::text(" keep-alive")` wrote it.
pub(crate) const KEEP_ALIVE: &[u8] = b":  keep-alive\n\n";

/// An encoded event and where its data lies in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Encoded {
    /// `id: …\nevent: …\ndata: …\n\n`, in an allocation of exactly its size.
    sse: Bytes,
    data: DataAt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DataAt {
    /// On one `data:` line: this range of the event's text.
    Within(usize, usize),
    /// Split over several lines (never JSON text): kept apart.
    Apart(Bytes),
}

impl Encoded {
    /// The whole event.
    pub(crate) fn sse(&self) -> &Bytes {
        &self.sse
    }

    pub(crate) fn into_sse(self) -> Bytes {
        self.sse
    }

    /// The data alone, sharing the event's buffer when it can.
    pub(crate) fn data(&self) -> Bytes {
        match &self.data {
            DataAt::Within(start, end) => self.sse.slice(*start..*end),
            DataAt::Apart(data) => data.clone(),
        }
    }

    /// The data alone, borrowed.
    pub(crate) fn data_bytes(&self) -> &[u8] {
        match &self.data {
            DataAt::Within(start, end) => &self.sse[*start..*end],
            DataAt::Apart(data) => data,
        }
    }
}

/// Encodes an event. `data` is JSON text, which holds no raw line break; one that did would
/// be split over several `data:` lines as axum does it.
pub(crate) fn encode(id: u64, event: &str, data: &str) -> Encoded {
    let mut digits = [0; 20];
    let id = format_id(id, &mut digits);
    let bytes = data.as_bytes();
    let breaks = bytes
        .iter()
        .filter(|b| **b == b'\n' || **b == b'\r')
        .count();
    // axum writes no `data:` line for empty data.
    let data_len = if bytes.is_empty() {
        0
    } else {
        b"data: ".len() * (breaks + 1) + bytes.len() + 1
    };
    let len = b"id: ".len() + id.len() + b"\nevent: ".len() + event.len() + 1 + data_len + 1;
    // Exactly sized, so the buffer becomes `Bytes` without a copy or a spare tail.
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\nevent: ");
    out.extend_from_slice(event.as_bytes());
    out.push(b'\n');
    let start = out.len() + b"data: ".len();
    if !bytes.is_empty() {
        out.extend_from_slice(b"data: ");
        let mut last = 0;
        for (at, byte) in bytes.iter().enumerate() {
            if *byte == b'\n' || *byte == b'\r' {
                out.extend_from_slice(&bytes[last..=at]);
                out.extend_from_slice(b"data: ");
                last = at + 1;
            }
        }
        out.extend_from_slice(&bytes[last..]);
        out.push(b'\n');
    }
    out.push(b'\n');
    debug_assert_eq!(out.len(), len);
    let data = if breaks == 0 {
        DataAt::Within(start.min(len), (start + bytes.len()).min(len))
    } else {
        DataAt::Apart(Bytes::copy_from_slice(bytes))
    };
    Encoded {
        sse: Bytes::from(out),
        data,
    }
}

/// The decimal digits of `n`, without an allocation.
fn format_id(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use axum::response::sse::{Event, Sse};
    use futures::StreamExt;

    /// The bytes axum's SSE response writes for `events`.
    async fn axum_bytes(events: Vec<Event>) -> Vec<u8> {
        let stream =
            futures::stream::iter(events.into_iter().map(Ok::<_, std::convert::Infallible>));
        let response = Sse::new(stream).into_response();
        let mut body = response.into_body().into_data_stream();
        let mut out = Vec::new();
        while let Some(chunk) = body.next().await {
            out.extend_from_slice(&chunk.expect("an in-memory body"));
        }
        out
    }

    #[tokio::test]
    async fn frames_are_the_bytes_axum_writes() {
        let cases = [
            (
                0,
                "part",
                r#"{"part":{"text":"Hel","type":"text"},"role":"assistant"}"#,
            ),
            (18_446_744_073_709_551_615, "message", "{}"),
            (7, "status", r#"{"last_error":null,"status":"running"}"#),
            (3, "part", "a\nb\r\nc\rd"),
            (12, "stream_reset", ""),
        ];
        for (id, event, data) in cases {
            let expected = axum_bytes(vec![
                Event::default().id(id.to_string()).event(event).data(data),
            ])
            .await;
            let encoded = encode(id, event, data);
            assert_eq!(
                String::from_utf8_lossy(encoded.sse()),
                String::from_utf8_lossy(&expected)
            );
            assert_eq!(&encoded.data()[..], data.as_bytes());
            assert_eq!(encoded.data_bytes(), data.as_bytes());
        }
    }

    #[tokio::test]
    async fn the_keep_alive_is_the_comment_axum_writes() {
        // `KeepAlive::text` wraps exactly this comment event.
        let expected = axum_bytes(vec![Event::default().comment(" keep-alive")]).await;
        assert_eq!(KEEP_ALIVE, &expected[..]);
    }

    #[test]
    fn the_data_of_a_one_line_frame_shares_its_buffer() {
        let encoded = encode(41, "part", r#"{"x":1}"#);
        let start = encoded.sse().as_ptr() as usize;
        let data = encoded.data().as_ptr() as usize;
        assert!(data > start && data < start + encoded.sse().len());
    }
}
