//! Shared pieces of the fuzz targets: replaying bytes through a provider decoder and the
//! invariants every decoded stream must keep, whatever the provider sent.

use futures::StreamExt;
use keel_core::{Cancel, StreamEvent};
use keel_providers::ErrorContext;
use keel_providers::sse::{Decoder, decode_stream};

pub mod api;

pub fn ctx() -> ErrorContext {
    ErrorContext::new("fuzz-provider", "fuzz-model")
}

/// Feeds `chunks` through `decoder` as one response body, as the adapters do.
pub fn replay<D: Decoder>(decoder: D, chunks: Vec<Vec<u8>>) -> Vec<StreamEvent> {
    let bytes = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    futures::executor::block_on(decode_stream(bytes, decoder, Cancel::new(), ctx()).collect())
}

/// Splits `bytes` at the given positions (any order, duplicates allowed).
pub fn split(bytes: &[u8], cuts: &[u16]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts
        .iter()
        .map(|c| usize::from(*c) % (bytes.len() + 1))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        chunks.push(bytes[start..cut].to_vec());
        start = cut;
    }
    chunks.push(bytes[start..].to_vec());
    chunks
}

/// What the agent loop relies on from any decoded stream: it ends with exactly one terminal
/// event (a finish or an error) and nothing after it. Block ids are not checked: they echo
/// the provider's item ids, and the accumulator already tolerates repeated starts, deltas
/// without a start and ends of unknown blocks.
pub fn check_stream(events: &[StreamEvent]) {
    let terminal = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Finish { .. } | StreamEvent::Error(_)))
        .count();
    assert_eq!(terminal, 1, "expected one finish or error: {events:#?}");
    assert!(
        matches!(
            events.last(),
            Some(StreamEvent::Finish { .. } | StreamEvent::Error(_))
        ),
        "the terminal event is not last: {events:#?}"
    );
}

/// Replays `data` whole and cut at `cuts`, checks the invariants on the whole replay and that
/// the cuts changed nothing: framing must not depend on how the body arrived.
pub fn replay_both<D: Decoder>(make: impl Fn() -> D, data: &[u8], cuts: &[u16]) {
    let whole = replay(make(), vec![data.to_vec()]);
    check_stream(&whole);
    let chunked = replay(make(), split(data, cuts));
    assert_eq!(whole, chunked, "chunking changed the decoded stream");
}

/// Splits a fuzz input into cut positions and a body: the first byte says how many cuts (at
/// most 15) follow as little-endian `u16`s, the rest is the body. Seeds are a transcript
/// behind a zero byte.
pub fn cuts_and_body(data: &[u8]) -> (Vec<u16>, &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return (Vec::new(), data);
    };
    let n = usize::from(n % 16).min(rest.len() / 2);
    let (cuts, body) = rest.split_at(n * 2);
    let cuts = cuts
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    (cuts, body)
}
