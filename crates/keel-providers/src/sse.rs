//! Server-sent-event framing and the loop that drives a decoder.
//!
//! Framing (lines, `data:` concatenation, CRLF, UTF-8 split across chunks) is done by
//! `eventsource-stream`; this module owns the [`Decoder`] contract every protocol implements
//! and [`decode_stream`], which feeds a byte stream through a decoder, stops at the first
//! error or terminal event, and drops the underlying response as soon as `cancel` fires.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;

use eventsource_stream::{EventStream, EventStreamError};
use futures::{FutureExt, Stream, StreamExt};
use keel_core::{Cancel, EventStream as ModelEvents, StreamEvent};

use crate::http::ErrorContext;
use crate::keepalive::{CommentMarker, KEEPALIVE_EVENT};

/// One server-sent event: its `event:` name (`message` when absent) and joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

impl SseEvent {
    pub fn new(event: impl Into<String>, data: impl Into<String>) -> Self {
        Self {
            event: event.into(),
            data: data.into(),
        }
    }
}

/// A protocol's state machine from server-sent events to [`StreamEvent`]s. Decoders do no
/// I/O, so they are tested by replaying transcripts.
pub trait Decoder: Send + 'static {
    /// Decodes one event, appending what it yields to `out`. An in-stream failure is
    /// appended as [`StreamEvent::Error`], after which nothing more is read.
    fn event(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>);

    /// Whether the protocol's terminal event was seen; nothing after it is read.
    fn is_finished(&self) -> bool;

    /// The byte stream ended cleanly. A decoder that has not seen its terminal event reports
    /// the truncation here as a retryable connection error.
    fn end(&mut self, out: &mut Vec<StreamEvent>);
}

type Framed<S> = Pin<Box<EventStream<S>>>;

struct Driver<S, D> {
    framed: Option<Framed<S>>,
    decoder: D,
    queue: VecDeque<StreamEvent>,
    /// Completes when the call is cancelled; made once and polled with every chunk.
    cancelled: Pin<Box<dyn Future<Output = ()> + Send>>,
    ctx: ErrorContext,
}

enum Step<T> {
    Cancelled,
    Next(Option<T>),
}

/// Decodes `bytes` with `decoder` into a model event stream.
///
/// The stream ends after the decoder's terminal event, after the first
/// [`StreamEvent::Error`], or with an error of kind `Cancelled` once `cancel` fires. Transport
/// errors are classified from their whole `Display` chain so that resets and GOAWAYs are
/// recognised.
pub fn decode_stream<S, B, E, D>(
    bytes: S,
    decoder: D,
    cancel: Cancel,
    ctx: ErrorContext,
) -> ModelEvents
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: std::error::Error + Send + 'static,
    D: Decoder,
{
    let mut marker = CommentMarker::default();
    let bytes = bytes.map(move |chunk| chunk.map(|c| marker.feed(c.as_ref())));
    let driver = Driver {
        framed: Some(Box::pin(EventStream::new(bytes))),
        decoder,
        queue: VecDeque::new(),
        cancelled: Box::pin(cancel.cancelled_owned()),
        ctx,
    };
    Box::pin(futures::stream::unfold(driver, |mut d| async move {
        loop {
            if let Some(event) = d.queue.pop_front() {
                return Some((event, d));
            }
            let framed = d.framed.as_mut()?;
            let step = tokio::select! {
                biased;
                () = d.cancelled.as_mut() => Step::Cancelled,
                next = framed.next() => Step::Next(next),
            };
            let mut out = Vec::new();
            let done = match step {
                Step::Cancelled => {
                    out.push(StreamEvent::Error(d.ctx.cancelled()));
                    true
                }
                Step::Next(Some(Ok(event))) if event.event == KEEPALIVE_EVENT => {
                    out.push(StreamEvent::KeepAlive);
                    false
                }
                Step::Next(Some(Ok(event))) => {
                    let event = SseEvent::new(event.event, event.data);
                    d.decoder.event(&event, &mut out);
                    d.decoder.is_finished()
                        || out.iter().any(|e| matches!(e, StreamEvent::Error(_)))
                }
                Step::Next(Some(Err(EventStreamError::Transport(err)))) => {
                    out.push(StreamEvent::Error(d.ctx.transport(&err)));
                    true
                }
                Step::Next(Some(Err(err))) => {
                    let message = format!("malformed event stream: {err}");
                    out.push(StreamEvent::Error(d.ctx.message(&message)));
                    true
                }
                Step::Next(None) => {
                    d.decoder.end(&mut out);
                    true
                }
            };
            if done {
                if d.decoder.is_finished()
                    && let Some(framed) = d.framed.as_mut()
                {
                    drain_ready(framed);
                }
                // Dropping the framed stream drops the HTTP response and with it the
                // connection, so a cancelled or finished reply stops downloading at once.
                d.framed = None;
            }
            d.queue.extend(out);
        }
    }))
}

/// Reads what has already arrived after the terminal event, without waiting. A body read to
/// its end lets the HTTP client reuse the connection; one dropped early closes it.
fn drain_ready<S, B, E>(framed: &mut Framed<S>)
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    for _ in 0..DRAIN_LIMIT {
        match framed.next().now_or_never() {
            Some(Some(Ok(_))) => {}
            _ => return,
        }
    }
}

/// Events read after the terminal one before giving up on reusing the connection.
const DRAIN_LIMIT: usize = 8;
