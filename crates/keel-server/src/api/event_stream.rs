//! The body of a live event stream: the follower's events as SSE text, and a keep-alive
//! comment when nothing was written for [`KEEP_ALIVE_EVERY`].
//!
//! The follower runs inside the body, polled by the connection's own task, so a frame goes
//! from the run's channel to the socket without waking a task of its own. Events that are
//! ready together leave in one write: a frame encoded by the hub is written as it is (its
//! bytes are shared with every other subscriber), several are copied into one buffer.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::Stream;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::api::events::LiveItem;
use crate::sse::KEEP_ALIVE;

/// A comment line at least this often keeps proxies from closing an idle stream.
pub(crate) const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// Ready events joined into one write until it holds this many bytes.
const WRITE_BYTES: usize = 16 * 1024;

/// The `text/event-stream` response of `events`, fed by `follower` (which ends when the
/// stream should), holding `guard` as long as it is open.
pub(crate) fn response<F, G>(events: mpsc::Receiver<LiveItem>, follower: F, guard: G) -> Response
where
    F: Future<Output = ()> + Send + 'static,
    G: Send + Unpin + 'static,
{
    let stream = EventStream {
        follower: Some(Box::pin(follower)),
        events,
        keep_alive: Box::pin(tokio::time::sleep(KEEP_ALIVE_EVERY)),
        _guard: guard,
    };
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

struct EventStream<G> {
    /// Dropped before the guard: a follower's subscription ends before what it holds is let go.
    follower: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    events: mpsc::Receiver<LiveItem>,
    keep_alive: Pin<Box<Sleep>>,
    _guard: G,
}

impl<G: Unpin> Stream for EventStream<G> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(follower) = this.follower.as_mut()
            && follower.as_mut().poll(cx).is_ready()
        {
            // What it sent is still read below; the channel then ends the stream.
            this.follower = None;
        }
        match this.events.poll_recv(cx) {
            Poll::Ready(Some(item)) => {
                let bytes = join_ready(item, &mut this.events);
                this.keep_alive
                    .as_mut()
                    .reset(Instant::now() + KEEP_ALIVE_EVERY);
                Poll::Ready(Some(Ok(bytes)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(this.keep_alive.as_mut().poll(cx));
                this.keep_alive
                    .as_mut()
                    .reset(Instant::now() + KEEP_ALIVE_EVERY);
                Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE))))
            }
        }
    }
}

/// `first` and the events already waiting behind it, as one write: `first`'s own bytes
/// when nothing waits.
fn join_ready(first: LiveItem, events: &mut mpsc::Receiver<LiveItem>) -> Bytes {
    let first = first.into_sse();
    let Ok(second) = events.try_recv() else {
        return first;
    };
    let second = second.into_sse();
    let mut out = BytesMut::with_capacity((first.len() + second.len()) * 2);
    out.extend_from_slice(&first);
    out.extend_from_slice(&second);
    while out.len() < WRITE_BYTES {
        match events.try_recv() {
            Ok(item) => out.extend_from_slice(&item.into_sse()),
            Err(_) => break,
        }
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::Frame;
    use futures::StreamExt;

    #[test]
    fn a_lone_frame_is_written_from_the_hubs_own_bytes() {
        let frame = Frame::new(7, "part", r#"{"x":1}"#, true, 1);
        let (tx, mut rx) = mpsc::channel(4);
        let written = join_ready(LiveItem::frame(&frame), &mut rx);
        drop(tx);
        assert_eq!(written.as_ptr(), frame.sse().as_ptr(), "not copied");
        assert_eq!(&written[..], b"id: 7\nevent: part\ndata: {\"x\":1}\n\n");
    }

    #[test]
    fn ready_events_leave_in_one_write_in_order() {
        let (tx, mut rx) = mpsc::channel(8);
        for seq in 2..5 {
            tx.try_send(LiveItem::frame(&Frame::new(seq, "part", "{}", true, 1)))
                .unwrap();
        }
        tx.try_send(LiveItem::new(4, "status", "{\"status\":\"waiting\"}"))
            .unwrap();
        let first = LiveItem::frame(&Frame::new(1, "part", "{}", true, 1));
        let written = join_ready(first, &mut rx);
        assert_eq!(
            String::from_utf8_lossy(&written),
            "id: 1\nevent: part\ndata: {}\n\n\
             id: 2\nevent: part\ndata: {}\n\n\
             id: 3\nevent: part\ndata: {}\n\n\
             id: 4\nevent: part\ndata: {}\n\n\
             id: 4\nevent: status\ndata: {\"status\":\"waiting\"}\n\n"
        );
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_a_keep_alive_and_ends_with_its_follower() {
        let (tx, rx) = mpsc::channel(4);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let follower = async move {
            tx.send(LiveItem::new(1, "part", "{}")).await.unwrap();
            let _ = stopped.await;
        };
        let mut stream = EventStream {
            follower: Some(Box::pin(follower)),
            events: rx,
            keep_alive: Box::pin(tokio::time::sleep(KEEP_ALIVE_EVERY)),
            _guard: (),
        };
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(&first[..], b"id: 1\nevent: part\ndata: {}\n\n");
        // Paused time runs ahead to the keep-alive.
        let second = stream.next().await.unwrap().unwrap();
        assert_eq!(&second[..], KEEP_ALIVE);
        stop.send(()).unwrap();
        assert!(stream.next().await.is_none());
    }
}
