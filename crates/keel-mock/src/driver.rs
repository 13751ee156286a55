//! Playing a [`Reply`] out over time: pacing, scripted faults, and the hand-over to a
//! protocol's [`Encoder`], which turns abstract pieces into that protocol's frames.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::Stream;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, sleep_until};

use tokio_util::sync::CancellationToken;

use crate::errors::{self, Flavor};
use crate::plan::{Reply, StreamFault};
use crate::sse;
use crate::state::State;
use crate::tally::Reported;

/// One step of a reply, in protocol-neutral terms. Deltas are the tokens that faults count.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Piece<'a> {
    ReasoningStart,
    ReasoningDelta(&'a str),
    ReasoningEnd,
    TextStart,
    TextDelta(&'a str),
    TextEnd,
    RefusalStart,
    RefusalDelta(&'a str),
    RefusalEnd,
    ToolStart(usize),
    ToolDelta(usize, &'a str),
    ToolEnd(usize),
}

/// Turns pieces into one protocol's SSE frames.
pub(crate) trait Encoder: Send + 'static {
    fn start(&mut self, reply: &Reply) -> Vec<Bytes>;
    fn piece(&mut self, reply: &Reply, piece: Piece<'_>) -> Vec<Bytes>;
    fn finish(&mut self, reply: &Reply) -> Vec<Bytes>;
    /// The protocol's keep-alive: an event (or comment) that carries no content.
    fn keepalive(&mut self) -> Vec<Bytes>;
    /// The in-stream error event; the stream ends after it.
    fn error(&mut self, reply: &Reply, fault: &StreamFault) -> Vec<Bytes>;
    /// Whether [`Self::finish`] reports the reply's usage (OpenAI Chat Completions does
    /// only when asked to).
    fn reports_usage(&self) -> bool {
        true
    }
}

type Chunk = Result<Bytes, io::Error>;

/// A chunk of the body, and the report to count once the server takes it (the last frame
/// of a stream that reports usage carries it).
type Frame = (Chunk, Option<Reported>);

/// Streams `reply` through `encoder` as an SSE response of `protocol`; a stream played to
/// its end, usage included, is counted in the server's tally.
pub(crate) fn stream(
    reply: Reply,
    encoder: impl Encoder,
    state: &Arc<State>,
    protocol: &'static str,
) -> Response {
    let shutdown = state.shutdown.clone();
    let report = encoder
        .reports_usage()
        .then(|| Reported::of(&reply, protocol, true));
    // A small buffer keeps the producer close to what the client has read, so pacing and
    // stalls are visible on the wire rather than absorbed by a queue.
    let (tx, rx) = mpsc::channel::<Frame>(4);
    let play = async move {
        let mut player = Player {
            tx,
            shutdown,
            sent: 0,
            next: Instant::now(),
            stalled: false,
            report,
        };
        // `Stop` only means the stream ended early; nothing is left to report.
        let _ = player.play(&reply, encoder).await;
    };
    sse::response(Body::from_stream(Playing {
        play: Some(Box::pin(play)),
        rx,
        state: Arc::clone(state),
    }))
}

/// A reply's body: the player runs inside the response's own task, polled whenever the
/// server asks for the next frame, so a token goes out in the poll that stamped it and no
/// second task is woken per token.
struct Playing {
    /// `None` once the player has finished; what it queued is still taken.
    play: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    rx: mpsc::Receiver<Frame>,
    state: Arc<State>,
}

impl Stream for Playing {
    type Item = Chunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        if let Some(play) = self.play.as_mut()
            && play.as_mut().poll(cx).is_ready()
        {
            // Its sender is dropped with it: the queue ends once drained.
            self.play = None;
        }
        // A stream is counted when the server takes its last frame to write it: what a
        // client reading to the end receives.
        self.rx.poll_recv(cx).map(|frame| {
            frame.map(|(chunk, report)| {
                if let Some(report) = report {
                    self.state.report(report);
                }
                chunk
            })
        })
    }
}

/// The stream ended before its natural finish: a scripted cut or error, a client that went
/// away, or server shutdown.
struct Stop;

struct Player {
    tx: mpsc::Sender<Frame>,
    shutdown: CancellationToken,
    /// Tokens sent so far.
    sent: u32,
    /// When the next token is due, for pacing.
    next: Instant,
    /// The stall happened (it happens once).
    stalled: bool,
    /// What the stream reports, counted with its last frame; `None` when it reports no
    /// usage.
    report: Option<Reported>,
}

impl Player {
    async fn play(&mut self, reply: &Reply, mut encoder: impl Encoder) -> Result<(), Stop> {
        self.send_all(encoder.start(reply)).await?;
        // A stall before the first token comes before any content block opens, so that
        // nothing but the response's opening (and keep-alives) precedes it.
        if reply.faults.stall.is_some_and(|(after, ..)| after == 0) {
            self.stall(reply, &mut encoder).await?;
        }
        if !reply.reasoning.is_empty() {
            self.block(
                reply,
                &mut encoder,
                Piece::ReasoningStart,
                reply.reasoning.iter().map(|t| Piece::ReasoningDelta(t)),
                Piece::ReasoningEnd,
            )
            .await?;
        }
        for index in 0..reply.leading_calls {
            self.call(reply, &mut encoder, index).await?;
        }
        if !reply.text.is_empty() {
            self.block(
                reply,
                &mut encoder,
                Piece::TextStart,
                reply.text.iter().map(|t| Piece::TextDelta(t)),
                Piece::TextEnd,
            )
            .await?;
        }
        if !reply.refusal.is_empty() {
            self.block(
                reply,
                &mut encoder,
                Piece::RefusalStart,
                reply.refusal.iter().map(|t| Piece::RefusalDelta(t)),
                Piece::RefusalEnd,
            )
            .await?;
        }
        for index in reply.leading_calls..reply.calls.len() {
            self.call(reply, &mut encoder, index).await?;
        }
        // Faults scheduled at or beyond the reply's length happen before the finish, so a
        // large `after` means "just before the end".
        self.faults(reply, &mut encoder, true).await?;
        let mut frames = encoder.finish(reply);
        let last = frames.pop();
        self.send_all(frames).await?;
        match last {
            Some(last) => {
                let report = self.report.take();
                self.send((Ok(last), report)).await
            }
            None => Ok(()),
        }
    }

    async fn call(
        &mut self,
        reply: &Reply,
        encoder: &mut impl Encoder,
        index: usize,
    ) -> Result<(), Stop> {
        let Some(call) = reply.calls.get(index) else {
            return Ok(());
        };
        self.block(
            reply,
            encoder,
            Piece::ToolStart(index),
            call.chunks.iter().map(|c| Piece::ToolDelta(index, c)),
            Piece::ToolEnd(index),
        )
        .await
    }

    async fn block<'a>(
        &mut self,
        reply: &Reply,
        encoder: &mut impl Encoder,
        start: Piece<'a>,
        deltas: impl Iterator<Item = Piece<'a>>,
        end: Piece<'a>,
    ) -> Result<(), Stop> {
        self.send_all(encoder.piece(reply, start)).await?;
        for delta in deltas {
            self.faults(reply, encoder, false).await?;
            self.pace(reply.rate).await?;
            let stamped;
            let delta = match delta {
                Piece::TextDelta(token) if reply.stamp => {
                    stamped = stamp(token);
                    Piece::TextDelta(&stamped)
                }
                other => other,
            };
            self.send_all(encoder.piece(reply, delta)).await?;
            self.sent += 1;
        }
        self.send_all(encoder.piece(reply, end)).await
    }

    /// Applies the faults due after `self.sent` tokens, in a fixed order: stall, malformed
    /// line, error event, cut.
    async fn faults(
        &mut self,
        reply: &Reply,
        encoder: &mut impl Encoder,
        at_end: bool,
    ) -> Result<(), Stop> {
        let sent = self.sent;
        let due = |after: u32| after == sent || (at_end && after > sent);
        let faults = &reply.faults;
        if faults.stall.is_some_and(|(after, ..)| due(after)) {
            self.stall(reply, encoder).await?;
        }
        if let Some((_, line)) = faults.malformed.as_ref().filter(|(after, _)| due(*after)) {
            self.send((Ok(sse::raw(line)), None)).await?;
        }
        if let Some(fault) = faults.stream_error.as_ref().filter(|f| due(f.after)) {
            self.send_all(encoder.error(reply, fault)).await?;
            return Err(Stop);
        }
        if faults.cut.is_some_and(due) {
            self.cut().await;
            return Err(Stop);
        }
        Ok(())
    }

    /// Waits until the next token is due at the reply's rate.
    async fn pace(&mut self, rate: f64) -> Result<(), Stop> {
        let Some(interval) = interval(rate) else {
            return Ok(());
        };
        let now = Instant::now();
        if self.next < now {
            self.next = now;
        }
        let due = self.next;
        self.next += interval;
        self.wait(sleep_until(due)).await
    }

    /// The reply's stall, once.
    async fn stall(&mut self, reply: &Reply, encoder: &mut impl Encoder) -> Result<(), Stop> {
        let Some((_, pause, ping)) = reply.faults.stall else {
            return Ok(());
        };
        if std::mem::replace(&mut self.stalled, true) {
            return Ok(());
        }
        match ping {
            Some(every) => self.ping(encoder, pause, every).await,
            None => self.pause(pause).await,
        }
    }

    /// Stalls for `pause`, sending keep-alives every `every` meanwhile.
    async fn ping(
        &mut self,
        encoder: &mut impl Encoder,
        pause: Duration,
        every: Duration,
    ) -> Result<(), Stop> {
        let end = Instant::now() + pause;
        loop {
            let next = Instant::now() + every;
            if next >= end {
                break;
            }
            self.wait(sleep_until(next)).await?;
            self.send_all(encoder.keepalive()).await?;
        }
        self.wait(sleep_until(end)).await?;
        self.next = Instant::now();
        Ok(())
    }

    async fn pause(&mut self, pause: Duration) -> Result<(), Stop> {
        self.wait(sleep(pause)).await?;
        // Tokens after a stall resume at the normal pace rather than in a burst.
        self.next = Instant::now();
        Ok(())
    }

    /// Waits for `timer` unless the server shuts down first. A client that goes away needs
    /// no watch: the server drops the body, and the player with it.
    async fn wait(&self, timer: impl Future<Output = ()>) -> Result<(), Stop> {
        tokio::select! {
            () = timer => Ok(()),
            () = self.shutdown.cancelled() => Err(Stop),
        }
    }

    async fn send_all(&self, frames: Vec<Bytes>) -> Result<(), Stop> {
        for frame in frames {
            self.send((Ok(frame), None)).await?;
        }
        Ok(())
    }

    async fn send(&self, frame: Frame) -> Result<(), Stop> {
        self.tx.send(frame).await.map_err(|_| Stop)
    }

    /// Ends the body with an error, which makes the server drop the connection without
    /// finishing the response.
    async fn cut(&self) {
        // Let the body drain first, so everything sent before the cut reaches the client:
        // once the server has taken every queued frame it finds the body empty and flushes,
        // and only then does the error make it drop the connection. The short sleep (tokio
        // time) avoids spinning while a slow client reads.
        let capacity = self.tx.max_capacity();
        while self.tx.capacity() < capacity {
            sleep(Duration::from_millis(1)).await;
        }
        let error = io::Error::new(io::ErrorKind::ConnectionAborted, "scripted cut");
        let _ = self.tx.send((Err(error), None)).await;
    }
}

/// `token@MICROS`: the token with its send time in microseconds since the Unix epoch.
fn stamp(token: &str) -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!("{token}@{micros}")
}

fn interval(rate: f64) -> Option<Duration> {
    (rate > 0.0).then(|| Duration::from_secs_f64(1.0 / rate))
}

/// Answers a non-streaming request with `body`, applying the faults that make sense
/// without a stream: a stall delays the answer, a cut drops the connection, a malformed
/// line replaces the body and an in-stream error becomes an HTTP error. A whole answer is
/// counted in the server's tally.
pub(crate) async fn whole(
    reply: &Reply,
    body: Value,
    flavor: Flavor,
    state: &State,
    protocol: &'static str,
) -> Response {
    let shutdown = &state.shutdown;
    let faults = &reply.faults;
    if let Some((_, pause, _)) = faults.stall {
        tokio::select! {
            () = sleep(pause) => {}
            () = shutdown.cancelled() => {}
        }
    }
    if faults.cut.is_some() {
        let error = io::Error::new(io::ErrorKind::ConnectionAborted, "scripted cut");
        let body = futures::stream::once(async move { Err::<Bytes, _>(error) });
        return Response::new(Body::from_stream(body));
    }
    if let Some(fault) = &faults.stream_error {
        let status = StatusCode::from_u16(errors::status_for_type(flavor, &fault.error_type))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = errors::envelope(flavor, &fault.error_type, None, &fault.message, None);
        return (status, Json(body)).into_response();
    }
    if let Some((_, line)) = &faults.malformed {
        return ([(header::CONTENT_TYPE, "application/json")], line.clone()).into_response();
    }
    state.report(Reported::of(reply, protocol, false));
    Json(body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_carry_the_token_and_a_plausible_send_time() {
        let stamped = stamp(" lorem");
        let (token, micros) = stamped.rsplit_once('@').unwrap();
        assert_eq!(token, " lorem");
        let micros: u128 = micros.parse().unwrap();
        // After 2020-01-01 and before 2100-01-01.
        assert!((1_577_836_800_000_000..4_102_444_800_000_000).contains(&micros));
    }
}
