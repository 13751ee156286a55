//! Server-sent-event framing under `decode_stream`: any body, cut anywhere, frames into the
//! same events, and no event carries a line break the framing should have consumed.
#![no_main]

use keel_core::StreamEvent;
use keel_fuzz::{cuts_and_body, replay, split};
use keel_providers::sse::{Decoder, SseEvent};
use libfuzzer_sys::fuzz_target;

/// Hands every framed event back as a text delta (name as id, data as delta) so the driver's
/// own output is what gets compared.
struct Echo;

impl Decoder for Echo {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) {
        out.push(StreamEvent::TextDelta {
            id: event.event.clone(),
            delta: event.data.clone(),
        });
    }

    fn is_finished(&self) -> bool {
        false
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) {}
}

fuzz_target!(|data: &[u8]| {
    let (cuts, body) = cuts_and_body(data);
    let whole = replay(Echo, vec![body.to_vec()]);
    for event in &whole {
        if let StreamEvent::TextDelta { id, delta } = event {
            assert!(
                !id.contains(['\r', '\n']),
                "event name keeps a line break: {id:?}"
            );
            assert!(
                !delta.contains('\r'),
                "data keeps a carriage return: {delta:?}"
            );
        }
    }
    let chunked = replay(Echo, split(body, &cuts));
    assert_eq!(whole, chunked, "chunking changed the framed events");
});
