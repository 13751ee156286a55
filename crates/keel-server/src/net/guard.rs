//! The middleware that applies [`hosts::check`](super::hosts::check) to every request
//! before any route runs: a refused request gets `403` with a JSON error naming the reason.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::error::{ApiError, Code};
use crate::metrics::Metrics;
use crate::net::hosts::{AllowedHosts, RequestFacts, check};

/// What the guard needs.
#[derive(Clone)]
pub(crate) struct Guard {
    pub hosts: Arc<AllowedHosts>,
    pub metrics: Arc<Metrics>,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    // A header that is not visible ASCII cannot name an allowed host; passing it on as
    // a foreign value makes the check refuse it.
    headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"))
}

pub(crate) async fn guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    // RFC 9112 §3.2: a request with more than one `Host` field is answered 400. Which of
    // them a proxy in front or a route behind would believe is not knowable, so none is.
    if headers.get_all(header::HOST).iter().nth(1).is_some() {
        guard.metrics.refused("duplicate_host");
        return ApiError::refused(
            Code::InvalidRequest,
            "duplicate_host",
            "the request has more than one Host header; send exactly one",
        )
        .into_response();
    }
    let authority = request.uri().authority().map(|a| a.as_str());
    let method = request.method();
    let facts = RequestFacts {
        safe_method: [Method::GET, Method::HEAD, Method::OPTIONS].contains(method),
        host: header(headers, header::HOST.as_str()).or(authority),
        origin: header(headers, header::ORIGIN.as_str()),
        sec_fetch_site: header(headers, "sec-fetch-site"),
        sec_fetch_mode: header(headers, "sec-fetch-mode"),
    };
    // An absolute request target names the host too; both must be allowed.
    let verdict = check(&guard.hosts, &facts).and_then(|()| match authority {
        Some(authority) => check(
            &guard.hosts,
            &RequestFacts {
                host: Some(authority),
                ..facts
            },
        ),
        None => Ok(()),
    });
    match verdict {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            guard.metrics.refused(refusal.reason());
            tracing::debug!(reason = refusal.reason(), "request refused");
            ApiError::refused(Code::Forbidden, refusal.reason(), refusal.message()).into_response()
        }
    }
}
