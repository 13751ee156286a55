//! Whatever a provider sends, every decoder ends its stream with exactly one finish or error
//! and never panics. The `fuzz/` targets explore this far deeper; these cases keep the
//! property in the ordinary test suite.

mod common;

use common::{ctx, replay, transcript};
use keel_core::StreamEvent;
use keel_providers::anthropic::AnthropicDecoder;
use keel_providers::gemini::GeminiDecoder;
use keel_providers::openai_chat::ChatDecoder;
use keel_providers::openai_responses::ResponsesDecoder;
use proptest::prelude::*;

fn assert_terminated(events: &[StreamEvent]) {
    let terminal = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Finish { .. } | StreamEvent::Error(_)))
        .count();
    assert_eq!(terminal, 1, "{events:#?}");
    assert!(
        matches!(
            events.last(),
            Some(StreamEvent::Finish { .. } | StreamEvent::Error(_))
        ),
        "{events:#?}"
    );
}

fn decode_all(bytes: &[u8]) {
    assert_terminated(&replay(ChatDecoder::new(ctx()), bytes));
    assert_terminated(&replay(ResponsesDecoder::new(ctx()), bytes));
    assert_terminated(&replay(AnthropicDecoder::new(ctx()), bytes));
    assert_terminated(&replay(GeminiDecoder::new(ctx()), bytes));
}

const TRANSCRIPTS: [&str; 6] = [
    "openai_chat_tools.sse",
    "openai_chat_text.sse",
    "openai_responses_tools.sse",
    "openai_responses_web_search.sse",
    "anthropic_thinking_tools.sse",
    "anthropic_web_search.sse",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn arbitrary_events(
        events in proptest::collection::vec(("[a-z_.]{0,24}", "\\PC{0,64}"), 0..16),
    ) {
        let mut body = String::new();
        for (name, data) in events {
            body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
        }
        decode_all(body.as_bytes());
    }

    /// Real transcripts with bytes overwritten: mostly valid JSON with wrong types and
    /// truncations in the middle.
    #[test]
    fn damaged_transcripts(
        which in 0..TRANSCRIPTS.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut bytes = transcript(TRANSCRIPTS[which]);
        for (at, byte) in edits {
            let len = bytes.len();
            bytes[at % len] = byte;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        decode_all(&bytes);
    }
}
