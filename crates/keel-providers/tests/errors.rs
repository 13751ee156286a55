//! Transport errors are classified from their whole source chain.

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
