//! The HTTP server: accepts connections and serves the router on each with the limits a
//! greedy or slow client must not get past.
//!
//! * **Header-read timeout** (`[server] header_read_timeout_ms`): hyper closes a connection
//!   whose request headers have not all arrived in time — also an idle kept-alive one, whose
//!   next request's headers are awaited the same way — so slow-header clients cannot hold
//!   connections open. `axum::serve` gives hyper no timer, so without this loop the timeout
//!   would not run at all.
//! * **Body reads**: the same timeout bounds the wait for each piece of a request's body
//!   and for the whole body, so a client that sends headers and then stalls, or trickles
//!   its body in, cannot hold a request in flight.
//! * **Requests in flight** (`[server] max_requests_in_flight`): tower's global concurrency
//!   limit behind a load shedder, so a request beyond the limit is answered `503` at once
//!   instead of queueing without bound. A live event stream holds its place only until its
//!   headers are sent; [`super::sse_slots`] caps open streams.
//!
//! Shutdown: when `shutdown` is cancelled the listener closes, every connection finishes its
//! request in progress and closes, and [`serve`] returns when all have or `grace` is over.

use std::sync::Arc;
use std::time::Duration;

use axum::BoxError;
use axum::Router;
use axum::body::{Body, BodyDataStream, Bytes};
use axum::error_handling::HandleErrorLayer;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use keel_core::Cancel;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::load_shed::LoadShedLayer;
use tower_http::timeout::TimeoutBody;

use crate::api::error::{ApiError, Code};
use crate::metrics::Metrics;
use crate::net::served::Served;

/// Bounds the wait for each piece of a request's body, and for the whole of it: a body that
/// stalls, or trickles in (a byte now and then, each in time), fails to read once `timeout`
/// is over, which the extractors answer with `400`, so no client holds a request in flight
/// for longer.
pub(crate) async fn body_timeout(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let deadline = tokio::time::Instant::now() + timeout;
    next.run(request.map(|body| {
        let paced = Body::new(TimeoutBody::new(timeout, body));
        Body::from_stream(whole_by(deadline, paced.into_data_stream()))
    }))
    .await
}

/// The request body's data, or an error once `deadline` passes before its end.
fn whole_by(
    deadline: tokio::time::Instant,
    body: BodyDataStream,
) -> impl Stream<Item = Result<Bytes, BoxError>> {
    futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        tokio::select! {
            // What has arrived is read before the deadline is looked at.
            biased;
            item = body.next() => item.map(|data| (data.map_err(BoxError::from), Some(body))),
            () = tokio::time::sleep_until(deadline) => {
                Some((Err(BoxError::from("the request body did not arrive in time")), None))
            }
        }
    })
}

/// `router` with the limit on requests in flight: beyond `max`, `503` at once.
pub(crate) fn limit_in_flight(router: Router, max: usize, metrics: Arc<Metrics>) -> Router {
    router.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(move |_: tower::BoxError| {
                let metrics = metrics.clone();
                async move { overloaded(&metrics) }
            }))
            .layer(LoadShedLayer::new())
            .layer(GlobalConcurrencyLimitLayer::new(max)),
    )
}

fn overloaded(metrics: &Metrics) -> Response {
    metrics.refused("overloaded");
    let mut response = ApiError::refused(
        Code::Unavailable,
        "overloaded",
        "the daemon is handling as many requests as it is configured to; retry shortly",
    )
    .into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}

/// Serves `router` on `listener` until `shutdown` is cancelled and every connection closed
/// (or `grace` passed since).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    shutdown: Cancel,
    grace: Duration,
) -> std::io::Result<()> {
    // Each connection task holds a receiver; all are gone when `closed()` completes.
    let (all_closed, connection_alive) = watch::channel(());
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors or a connection reset before it was accepted:
                    // wait a moment rather than spin, then go on accepting.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        // The builder is let go at once: an open connection's task holds only the
        // connection.
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(router.clone()),
            );
        tokio::spawn(Served::new(
            connection,
            shutdown.cancelled_owned(),
            connection_alive.clone(),
        ));
    }
    drop(listener);
    drop(connection_alive);
    if tokio::time::timeout(grace, all_closed.closed())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period; leaving them");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::{Body, Bytes};
    use futures::StreamExt;

    use super::whole_by;

    /// A body sending one byte every `every`, `bytes` times.
    fn trickle(every: Duration, bytes: usize) -> Body {
        Body::from_stream(futures::stream::iter(0..bytes).then(move |_| async move {
            tokio::time::sleep(every).await;
            Ok::<_, std::io::Error>(Bytes::from_static(b"x"))
        }))
    }

    async fn read(body: Body, within: Duration) -> Result<usize, String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut stream = std::pin::pin!(whole_by(deadline, body.into_data_stream()));
        let mut read = 0;
        while let Some(data) = stream.next().await {
            read += data.map_err(|e| e.to_string())?.len();
        }
        Ok(read)
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_trickled_in_is_given_up_on_at_the_deadline() {
        // Each byte comes well within any per-piece timeout; the whole never would.
        let error = read(
            trickle(Duration::from_secs(29), 1000),
            Duration::from_secs(30),
        )
        .await
        .unwrap_err();
        assert!(error.contains("did not arrive in time"), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_arrives_whole_in_time_is_read() {
        let read = read(
            trickle(Duration::from_millis(10), 50),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(read, 50);
    }
}
