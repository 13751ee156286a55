//! Shared test support: transcript loading, decoder replay with arbitrary chunking, and a
//! local HTTP server that serves a scripted reply and records requests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod server;

use std::path::PathBuf;

use futures::StreamExt;
use keel_core::{Cancel, ProviderError, StreamEvent};
use keel_providers::ErrorContext;
use keel_providers::sse::{Decoder, decode_stream};

pub fn transcript(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn ctx() -> ErrorContext {
    ErrorContext::new("test-provider", "test-model")
}

/// Feeds `chunks` through `decoder` as one byte stream.
pub fn replay_chunks<D: Decoder>(decoder: D, chunks: Vec<Vec<u8>>) -> Vec<StreamEvent> {
    let bytes = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    futures::executor::block_on(decode_stream(bytes, decoder, Cancel::new(), ctx()).collect())
}

pub fn replay<D: Decoder>(decoder: D, bytes: &[u8]) -> Vec<StreamEvent> {
    replay_chunks(decoder, vec![bytes.to_vec()])
}

/// Splits `bytes` at the given positions (any order, duplicates allowed).
pub fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut start = 0;
    for cut in cuts {
        chunks.push(bytes[start..cut].to_vec());
        start = cut;
    }
    chunks.push(bytes[start..].to_vec());
    chunks
}

pub fn with_crlf(bytes: &[u8]) -> Vec<u8> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .replace('\n', "\r\n")
        .into_bytes()
}

/// Replays each transcript whole and cut at random places, with LF or CRLF line ends: a
/// decoder yields the same events however the bytes arrive.
pub fn any_chunking_yields_the_same_events<D: Decoder>(
    decoder: impl Fn() -> D,
    transcripts: &[&str],
) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config::with_cases(64));
    let cases = (
        0..transcripts.len(),
        proptest::collection::vec(any::<usize>(), 0..48),
        any::<bool>(),
    );
    let outcome = runner.run(&cases, |(which, cuts, crlf)| {
        let mut bytes = transcript(transcripts[which]);
        if crlf {
            bytes = with_crlf(&bytes);
        }
        let whole = replay(decoder(), &bytes);
        let chunked = replay_chunks(decoder(), split(&bytes, &cuts));
        prop_assert_eq!(chunked, whole, "{}", transcripts[which]);
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

/// The error that ended a stream; panics unless the last event is an error.
pub fn final_error(events: &[StreamEvent]) -> &ProviderError {
    match events.last() {
        Some(StreamEvent::Error(e)) => e,
        other => panic!("stream did not end with an error: {other:?}"),
    }
}

pub fn has_finish(events: &[StreamEvent]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, StreamEvent::Finish { .. }))
}

/// Concatenated text deltas.
pub fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// The reason of the stream's finish, if it finished.
pub fn finish_of(events: &[StreamEvent]) -> Option<keel_core::FinishReason> {
    events.iter().find_map(|e| match e {
        StreamEvent::Finish { reason, .. } => Some(*reason),
        _ => None,
    })
}
