//! The body of a live event stream: the follower's events as SSE text, and a keep-alive
//! comment when nothing was written for [`KEEP_ALIVE_EVERY`].
//!
//! The follower runs inside the body, polled by the connection's own task, so a frame goes
//! from the run's channel to the socket without waking a task of its own; and the body
//! takes what the follower sent without waiting on their channel, so a frame wakes the
//! connection once (for the follower), not a second time (for the channel). Events that are
//! ready together leave in one write: a frame encoded by the hub is written as it is (its
//! bytes are shared with every other subscriber), several are copied into one buffer.
//!
//! A busy stream is paced ([`Pacing`]): an event that is ready sooner than the write
//! interval (`[server] sse_write_interval_ms`) after the last write waits for the rest of
//! it, and leaves with whatever came meanwhile. A fast model's deltas then cost one system
//! call per interval rather than one each; a stream whose events are further apart than the
//! interval writes each one the moment it is ready.

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
use tokio::sync::mpsc::error::TryRecvError;
use tokio::time::{Instant, Sleep};

use crate::api::live_item::LiveItem;
use crate::sse::KEEP_ALIVE;

/// A comment line at least this often keeps proxies from closing an idle stream.
pub(crate) const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(15);

/// Ready events joined into one write until it holds this many bytes.
const WRITE_BYTES: usize = 16 * 1024;

/// The `text/event-stream` response of `events`, fed by `follower` (which ends when the
/// stream should, and is the only sender into `events`: the body never waits on the
/// channel), holding `guard` as long as it is open, writing at most once per
/// `write_interval` while events keep coming (zero: as soon as each is ready).
pub(crate) fn response<F, G>(
    events: mpsc::Receiver<LiveItem>,
    follower: F,
    guard: G,
    write_interval: Duration,
) -> Response
where
    F: Future<Output = ()> + Send + 'static,
    G: Send + Unpin + 'static,
{
    let stream = EventStream::new(events, Box::pin(follower), guard, write_interval);
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
    /// Fires at most [`KEEP_ALIVE_EVERY`] after the last write; armed for a deadline that
    /// writes since then may have pushed back (see [`EventStream::poll_keep_alive`]).
    keep_alive: Pin<Box<Sleep>>,
    last_write: Instant,
    pacing: Pacing,
    _guard: G,
}

/// When the next write of a stream may leave.
struct Pacing {
    interval: Duration,
    /// The last write, while it counts: not after a write that left events behind (a
    /// backlog, such as a catch-up, is written as fast as the socket takes it).
    last_write: Option<Instant>,
    /// The event that came too soon, and the timer it waits on (allocated on the first
    /// wait, then reused).
    held: Option<LiveItem>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Pacing {
    fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_write: None,
            held: None,
            timer: None,
        }
    }

    /// When an event ready at `now` may leave, if not at once.
    fn not_before(&self, now: Instant) -> Option<Instant> {
        let due = self.last_write? + self.interval;
        (now < due).then_some(due)
    }

    /// Holds `item` until `due`: `Ready` gives it back when that has already passed.
    fn hold(&mut self, item: LiveItem, due: Instant, cx: &mut Context<'_>) -> Poll<LiveItem> {
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        timer.as_mut().reset(due);
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(item),
            Poll::Pending => {
                self.held = Some(item);
                Poll::Pending
            }
        }
    }

    /// The held event once its time has come.
    fn poll_held(&mut self, cx: &mut Context<'_>) -> Poll<Option<LiveItem>> {
        if self.held.is_none() {
            return Poll::Ready(None);
        }
        if let Some(timer) = self.timer.as_mut() {
            ready!(timer.as_mut().poll(cx));
        }
        Poll::Ready(self.held.take())
    }

    fn wrote(&mut self, at: Instant, drained: bool) {
        self.last_write = (drained && !self.interval.is_zero()).then_some(at);
    }
}

impl<G> EventStream<G> {
    fn new(
        events: mpsc::Receiver<LiveItem>,
        follower: Pin<Box<dyn Future<Output = ()> + Send>>,
        guard: G,
        write_interval: Duration,
    ) -> Self {
        Self {
            follower: Some(follower),
            events,
            keep_alive: Box::pin(tokio::time::sleep(KEEP_ALIVE_EVERY)),
            last_write: Instant::now(),
            pacing: Pacing::new(write_interval),
            _guard: guard,
        }
    }

    fn poll_follower(&mut self, cx: &mut Context<'_>) {
        if let Some(follower) = self.follower.as_mut()
            && follower.as_mut().poll(cx).is_ready()
        {
            // What it sent is still read; the channel then ends the stream.
            self.follower = None;
        }
    }

    /// `first` and what is ready behind it, as one write leaving now.
    fn write(&mut self, first: LiveItem) -> Bytes {
        let (bytes, drained) = join_ready(first, &mut self.events);
        let now = Instant::now();
        self.pacing.wrote(now, drained);
        // Not a timer reset: a streaming chat writes many times a second, and the timer
        // is only moved when it fires.
        self.last_write = now;
        bytes
    }

    /// Ready when nothing was written for [`KEEP_ALIVE_EVERY`].
    fn poll_keep_alive(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            ready!(self.keep_alive.as_mut().poll(cx));
            let due = self.last_write + KEEP_ALIVE_EVERY;
            let now = Instant::now();
            if due <= now {
                self.last_write = now;
                self.keep_alive.as_mut().reset(now + KEEP_ALIVE_EVERY);
                return Poll::Ready(());
            }
            // Written since the timer was armed: the quiet period starts at that write.
            self.keep_alive.as_mut().reset(due);
        }
    }
}

impl<G: Unpin> Stream for EventStream<G> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // While an event waits, the follower is left alone: what the run publishes
        // meanwhile waits in the chat's channel and is taken in one go when the time comes.
        if let Some(held) = ready!(this.pacing.poll_held(cx)) {
            this.poll_follower(cx);
            return Poll::Ready(Some(Ok(this.write(held))));
        }
        this.poll_follower(cx);
        // Taken, not waited for: the follower is the channel's only sender and runs only
        // inside this poll, so whatever it sent is here now, and its own wake-ups (the
        // run's frames, the chat's notices, a full channel draining) are what bring the
        // next poll. A receiver waiting on the channel would have every event the follower
        // sends wake this task once more, for a poll of the whole connection that finds
        // nothing.
        match this.events.try_recv() {
            Ok(item) => {
                let item = match this.pacing.not_before(Instant::now()) {
                    Some(due) => ready!(this.pacing.hold(item, due, cx)),
                    None => item,
                };
                Poll::Ready(Some(Ok(this.write(item))))
            }
            Err(TryRecvError::Disconnected) => Poll::Ready(None),
            Err(TryRecvError::Empty) => {
                ready!(this.poll_keep_alive(cx));
                Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE))))
            }
        }
    }
}

/// `first` and the events already waiting behind it, as one write (`first`'s own bytes
/// when nothing waits), and whether that took every waiting event.
fn join_ready(first: LiveItem, events: &mut mpsc::Receiver<LiveItem>) -> (Bytes, bool) {
    let first = first.into_sse();
    let Ok(second) = events.try_recv() else {
        return (first, true);
    };
    let second = second.into_sse();
    let mut out = BytesMut::with_capacity((first.len() + second.len()) * 2);
    out.extend_from_slice(&first);
    out.extend_from_slice(&second);
    while out.len() < WRITE_BYTES {
        match events.try_recv() {
            Ok(item) => out.extend_from_slice(&item.into_sse()),
            Err(_) => return (out.freeze(), true),
        }
    }
    (out.freeze(), events.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::hub::Frame;
    use futures::StreamExt;

    const INTERVAL: Duration = Duration::from_millis(10);

    fn part(seq: u64) -> LiveItem {
        LiveItem::frame(&Frame::new(seq, "part", "{}", true, 1))
    }

    /// A stream and the sender of what its follower forwards, as a connection's follower
    /// sends what it reads: the follower is the channel's only sender, and runs only inside
    /// the stream's polls.
    fn fed_stream(
        capacity: usize,
        interval: Duration,
    ) -> (mpsc::Sender<LiveItem>, EventStream<()>) {
        let (test_tx, mut test_rx) = mpsc::channel::<LiveItem>(capacity);
        let (tx, rx) = mpsc::channel(capacity);
        let follower = async move {
            while let Some(item) = test_rx.recv().await {
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        };
        (
            test_tx,
            EventStream::new(rx, Box::pin(follower), (), interval),
        )
    }

    async fn next_text(stream: &mut EventStream<()>) -> String {
        let bytes = stream.next().await.unwrap().unwrap();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn a_lone_frame_is_written_from_the_hubs_own_bytes() {
        let frame = Frame::new(7, "part", r#"{"x":1}"#, true, 1);
        let (tx, mut rx) = mpsc::channel(4);
        let (written, drained) = join_ready(LiveItem::frame(&frame), &mut rx);
        drop(tx);
        assert!(drained);
        assert_eq!(written.as_ptr(), frame.sse().as_ptr(), "not copied");
        assert_eq!(&written[..], b"id: 7\nevent: part\ndata: {\"x\":1}\n\n");
    }

    #[test]
    fn ready_events_leave_in_one_write_in_order() {
        let (tx, mut rx) = mpsc::channel(8);
        for seq in 2..5 {
            tx.try_send(part(seq)).unwrap();
        }
        tx.try_send(LiveItem::new(4, "status", "{\"status\":\"waiting\"}"))
            .unwrap();
        let (written, drained) = join_ready(part(1), &mut rx);
        assert!(drained);
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
    async fn a_busy_stream_writes_once_an_interval_with_what_came_meanwhile() {
        let (tx, mut stream) = fed_stream(8, INTERVAL);
        let start = Instant::now();
        tx.send(part(1)).await.unwrap();
        assert_eq!(
            next_text(&mut stream).await,
            "id: 1\nevent: part\ndata: {}\n\n"
        );
        assert_eq!(Instant::now(), start, "the first event leaves at once");

        tx.send(part(2)).await.unwrap();
        assert!(
            futures::poll!(stream.next()).is_pending(),
            "the second came sooner than the interval"
        );
        tx.send(part(3)).await.unwrap();
        assert_eq!(
            next_text(&mut stream).await,
            "id: 2\nevent: part\ndata: {}\n\nid: 3\nevent: part\ndata: {}\n\n"
        );
        assert_eq!(Instant::now(), start + INTERVAL);
        drop(tx);
        assert!(stream.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn events_further_apart_than_the_interval_leave_the_moment_they_are_ready() {
        let (tx, mut stream) = fed_stream(8, INTERVAL);
        for seq in 1..4 {
            tx.send(part(seq)).await.unwrap();
            let ready_at = Instant::now();
            assert_eq!(
                next_text(&mut stream).await,
                format!("id: {seq}\nevent: part\ndata: {{}}\n\n")
            );
            assert_eq!(Instant::now(), ready_at);
            tokio::time::advance(INTERVAL * 3).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_backlog_is_written_as_fast_as_it_is_taken() {
        let (tx, mut stream) = fed_stream(64, INTERVAL);
        let data = format!("{{\"text\":\"{}\"}}", "x".repeat(1000));
        for seq in 1..=40 {
            tx.send(LiveItem::new(seq, "message", data.clone()))
                .await
                .unwrap();
        }
        drop(tx);
        let start = Instant::now();
        let mut written = 0;
        let mut writes = 0;
        while let Some(bytes) = stream.next().await {
            written += bytes.unwrap().len();
            writes += 1;
        }
        assert!(writes > 1, "more than one write's worth");
        assert!(written > 40 * 1000);
        assert_eq!(Instant::now(), start, "no write waited");
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_interval_writes_each_event_when_it_is_ready() {
        let (tx, mut stream) = fed_stream(8, Duration::ZERO);
        let start = Instant::now();
        for seq in 1..4 {
            tx.send(part(seq)).await.unwrap();
            assert_eq!(
                next_text(&mut stream).await,
                format!("id: {seq}\nevent: part\ndata: {{}}\n\n")
            );
        }
        assert_eq!(Instant::now(), start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_comes_only_after_a_whole_quiet_period() {
        let (tx, mut stream) = fed_stream(4, INTERVAL);
        let start = Instant::now();
        // Writes closer together than the keep-alive period keep it away.
        for seq in 1..=3 {
            tokio::time::advance(KEEP_ALIVE_EVERY - Duration::from_secs(1)).await;
            tx.send(part(seq)).await.unwrap();
            assert_eq!(
                next_text(&mut stream).await,
                format!("id: {seq}\nevent: part\ndata: {{}}\n\n")
            );
        }
        let last_write = Instant::now();
        assert!(last_write - start > KEEP_ALIVE_EVERY * 2);
        // Paused time runs ahead to the keep-alive: a whole period after the last write.
        let keep_alive = stream.next().await.unwrap().unwrap();
        assert_eq!(&keep_alive[..], KEEP_ALIVE);
        assert_eq!(Instant::now(), last_write + KEEP_ALIVE_EVERY);
        // And the next one a whole period after that.
        let keep_alive = stream.next().await.unwrap().unwrap();
        assert_eq!(&keep_alive[..], KEEP_ALIVE);
        assert_eq!(Instant::now(), last_write + KEEP_ALIVE_EVERY * 2);
        drop(tx);
    }

    /// Counts the wake-ups of the task polling a stream.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_wakes_its_connection_once() {
        let (tx, mut stream) = fed_stream(8, Duration::ZERO);
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let count = || wakes.0.load(std::sync::atomic::Ordering::SeqCst);
        for seq in 1..=3 {
            assert!(Pin::new(&mut stream).poll_next(&mut cx).is_pending());
            tx.try_send(part(seq)).unwrap();
            // What the follower waits on woke the connection: the one wake-up it needs.
            assert_eq!(count(), seq as usize);
            let Poll::Ready(Some(Ok(bytes))) = Pin::new(&mut stream).poll_next(&mut cx) else {
                panic!("the event is ready");
            };
            assert_eq!(
                &bytes[..],
                format!("id: {seq}\nevent: part\ndata: {{}}\n\n").as_bytes()
            );
            // Sending it on to the stream woke nothing more.
            assert_eq!(
                count(),
                seq as usize,
                "event {seq} woke the connection twice"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_a_keep_alive_and_ends_with_its_follower() {
        let (tx, rx) = mpsc::channel(4);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let follower = async move {
            tx.send(LiveItem::new(1, "part", "{}")).await.unwrap();
            let _ = stopped.await;
        };
        let mut stream = EventStream::new(rx, Box::pin(follower), (), INTERVAL);
        assert_eq!(
            next_text(&mut stream).await,
            "id: 1\nevent: part\ndata: {}\n\n"
        );
        // Paused time runs ahead to the keep-alive.
        let second = stream.next().await.unwrap().unwrap();
        assert_eq!(&second[..], KEEP_ALIVE);
        stop.send(()).unwrap();
        assert!(stream.next().await.is_none());
    }
}
