//! Transport errors are classified from their whole source chain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt;

use keel_core::ErrorKind;
use keel_providers::ErrorContext;
use keel_providers::http::error_chain;

#[derive(Debug)]
struct Layer {
    text: &'static str,
    source: Option<Box<Layer>>,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

impl std::error::Error for Layer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

fn chain(texts: &[&'static str]) -> Layer {
    let mut layer: Option<Box<Layer>> = None;
    for text in texts.iter().rev() {
        layer = Some(Box::new(Layer {
            text,
            source: layer,
        }));
    }
    match layer {
        Some(layer) => *layer,
        None => panic!("an error chain needs a layer"),
    }
}

#[test]
fn the_chain_is_joined_without_repeating_itself() {
    let err = chain(&[
        "error decoding response body",
        "request or response body error: connection reset by peer",
        "connection reset by peer",
    ]);
    assert_eq!(
        error_chain(&err),
        "error decoding response body: request or response body error: connection reset by peer"
    );
}

#[test]
fn the_innermost_cause_decides_the_kind() {
    let ctx = ErrorContext::new("p", "m");
    let cases = [
        (
            &[
                "error sending request",
                "http2 error",
                "connection error received: GOAWAY",
            ][..],
            ErrorKind::Connection,
        ),
        (
            &["error decoding response body", "connection reset by peer"][..],
            ErrorKind::Connection,
        ),
        (
            &["error sending request", "operation timed out"][..],
            ErrorKind::Timeout,
        ),
    ];
    for (texts, kind) in cases {
        let error = ctx.transport(&chain(texts));
        assert_eq!(error.kind, kind, "{}", error.message);
        assert_eq!((error.provider.as_str(), error.model.as_str()), ("p", "m"));
    }
    assert_eq!(ctx.cancelled().kind, ErrorKind::Cancelled);
}

/// A real reqwest failure, classified by its typed predicate.
async fn send_error(url: &str) -> keel_core::ProviderError {
    let client = keel_providers::http_client().unwrap();
    let error = client.get(url).send().await.unwrap_err();
    ErrorContext::new("p", "m").transport(&error)
}

#[tokio::test]
async fn refused_and_unresolvable_hosts_are_retryable_connection_errors() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let refused = send_error(&format!("http://127.0.0.1:{port}/v1")).await;
    assert_eq!(refused.kind, ErrorKind::Connection, "{}", refused.message);
    // `.invalid` never resolves (RFC 2606), with or without a network.
    let dns = send_error("http://keel-test.invalid/v1").await;
    assert_eq!(dns.kind, ErrorKind::Connection, "{}", dns.message);
    assert!(dns.retryable());
}
