//! One accepted connection as the task that serves it: the connection until it ends, asked
//! to finish its request in progress and close once the daemon shuts down.
//!
//! Written out rather than as an `async` block around `select!`: that task was more than
//! twice the size of the connection it drives, and an open event stream's task is held for
//! as long as the stream is, idle or not.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::sync::watch;

type Connection = http1::Connection<TokioIo<TcpStream>, TowerToHyperService<axum::Router>>;

pin_project_lite::pin_project! {
    /// `S` completes when the daemon shuts down: `Cancel::cancelled_owned`, which polls the
    /// token only once it woke the task, not on every write of the connection.
    pub(crate) struct Served<S> {
        #[pin]
        connection: Connection,
        #[pin]
        shutdown: S,
        draining: bool,
        // Held until the connection ends: the server waits for every one at shutdown.
        _alive: watch::Receiver<()>,
    }
}

impl<S: Future<Output = ()>> Served<S> {
    pub(crate) fn new(connection: Connection, shutdown: S, alive: watch::Receiver<()>) -> Self {
        Self {
            connection,
            shutdown,
            draining: false,
            _alive: alive,
        }
    }
}

impl<S: Future<Output = ()>> Future for Served<S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if !*this.draining && this.shutdown.poll(cx).is_ready() {
            *this.draining = true;
            this.connection.as_mut().graceful_shutdown();
        }
        if let Err(error) = ready!(this.connection.poll(cx)) {
            tracing::debug!(%error, "connection ended with an error");
        }
        Poll::Ready(())
    }
}
