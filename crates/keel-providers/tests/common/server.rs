//! A one-route local HTTP server on 127.0.0.1:0 that answers every request with a scripted
//! reply, records what it received, and reports when a reply body was dropped.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::Notify;

/// How a reply body ends after its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The body completes normally.
    Close,
    /// The connection is torn down mid-body once [`TestServer::abort`] is called.
    Abort,
    /// The body stays open without sending more.
    Hang,
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub chunks: Vec<Vec<u8>>,
    pub end: End,
    /// Never send the response headers.
    pub hang_before_headers: bool,
}

impl Reply {
    pub fn sse(chunks: Vec<Vec<u8>>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks,
            end: End::Close,
            hang_before_headers: false,
        }
    }

    pub fn error(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.as_bytes().to_vec()],
            end: End::Close,
            hang_before_headers: false,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn end(mut self, end: End) -> Self {
        self.end = end;
        self
    }
}

#[derive(Debug, Clone)]
pub struct Captured {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

struct Shared {
    reply: Reply,
    requests: Mutex<Vec<Captured>>,
    received: Notify,
    body_dropped: Arc<Notify>,
    abort: Arc<Notify>,
}

pub struct TestServer {
    pub base_url: String,
    shared: Arc<Shared>,
}

impl TestServer {
    pub async fn start(reply: Reply) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            reply,
            requests: Mutex::new(Vec::new()),
            received: Notify::new(),
            body_dropped: Arc::new(Notify::new()),
            abort: Arc::new(Notify::new()),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            shared,
        }
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Completes once a request has arrived.
    pub async fn request_received(&self) {
        self.shared.received.notified().await;
    }

    /// Tears down a reply that ends with [`End::Abort`].
    pub fn abort(&self) {
        self.shared.abort.notify_one();
    }

    /// Completes once the reply body has been dropped (sent in full, or the client went
    /// away).
    pub async fn body_dropped(&self) {
        self.shared.body_dropped.notified().await;
    }
}

struct DropSignal(Arc<Notify>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.requests.lock().unwrap().push(Captured {
        path: uri.path().to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    shared.received.notify_one();
    let reply = shared.reply.clone();
    if reply.hang_before_headers {
        futures::future::pending::<()>().await;
    }
    let guard = DropSignal(shared.body_dropped.clone());
    let abort = shared.abort.clone();
    let chunks = futures::stream::iter(
        reply
            .chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
    );
    let tail: futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>> = match reply.end {
        End::Close => futures::stream::empty().boxed(),
        End::Abort => futures::stream::once(async move {
            abort.notified().await;
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "scripted abort",
            ))
        })
        .boxed(),
        End::Hang => futures::stream::pending().boxed(),
    };
    let stream = chunks.chain(tail).map(move |item| {
        let _ = &guard;
        item
    });
    let mut response = Response::builder().status(StatusCode::from_u16(reply.status).unwrap());
    for (name, value) in &reply.headers {
        response = response.header(name, value);
    }
    response.body(Body::from_stream(stream)).unwrap()
}
