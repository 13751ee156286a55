//! A request id for every request: answered in `x-request-id`, put in error bodies, and
//! named by every log line of the request (its `request` span, with the trace id of the
//! request's `traceparent`), so a client's report leads to the log line. The `traceparent`
//! is handed to the store for the run the request may start (`keel_store::trace`).

use std::future::Future;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The header carrying the id.
pub(crate) const HEADER: &str = "x-request-id";

/// The id of the request being handled, if any.
pub(crate) fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs `future` as the handling of request `id`.
pub(crate) async fn scope<F: Future>(id: String, future: F) -> F::Output {
    REQUEST_ID.scope(id, future).await
}

/// A fresh id: 16 hex digits. A client's own `x-request-id` is not trusted into the log.
pub(crate) fn new_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Middleware: gives the request an id and answers it in the `x-request-id` header.
pub(crate) async fn assign(request: Request, next: Next) -> Response {
    let id = new_id();
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .filter(|v| crate::telemetry::parse_traceparent(v).is_some())
        .map(str::to_owned);
    let trace_id = traceparent
        .as_deref()
        .and_then(crate::telemetry::trace_id_of);
    let span = tracing::info_span!("request", request_id = %id, trace_id = trace_id.as_deref());
    let handled = keel_store::trace::scope(traceparent, scope(id.clone(), next.run(request)));
    let mut response = tracing::Instrument::instrument(handled, span.clone()).await;
    span.in_scope(|| tracing::debug!(status = response.status().as_u16(), "answered"));
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_id_is_known_inside_its_scope_only() {
        assert_eq!(current(), None);
        let seen = scope("abc".to_owned(), async { current() }).await;
        assert_eq!(seen.as_deref(), Some("abc"));
        let (a, b) = (new_id(), new_id());
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
    }
}
