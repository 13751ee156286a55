//! A request id for every request: answered in `x-request-id`, put in error bodies, and
//! logged with internal errors so a client's report leads to the log line.

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
    let mut response = scope(id.clone(), next.run(request)).await;
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
