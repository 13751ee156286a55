//! Server-sent events framing.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

/// The terminator OpenAI Chat Completions streams end with.
pub(crate) const DONE: &str = "data: [DONE]\n\n";

/// A named event: `event: NAME` and one `data:` line.
pub(crate) fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// An unnamed event: one `data:` line, serialised straight into the frame.
pub(crate) fn data(data: &(impl Serialize + ?Sized)) -> Bytes {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(b"data: ");
    // Writing into a Vec cannot fail, and the mock's values serialise without error.
    let _ = serde_json::to_writer(&mut frame, data);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// A raw line, sent verbatim and followed by the blank line that ends an event.
pub(crate) fn raw(line: &str) -> Bytes {
    Bytes::from(format!("{line}\n\n"))
}

/// A 200 response carrying an event stream.
pub(crate) fn response(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames() {
        assert_eq!(
            event("ping", &json!({"type": "ping"})),
            "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
        assert_eq!(data(&json!(1)), "data: 1\n\n");
        assert_eq!(raw("data: {"), "data: {\n\n");
    }
}
