//! A Chat Completions response body, framed and decoded as the adapter does.
#![no_main]

use keel_fuzz::{ctx, cuts_and_body, replay_both};
use keel_providers::openai_chat::ChatDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (cuts, body) = cuts_and_body(data);
    replay_both(|| ChatDecoder::new(ctx()), body, &cuts);
});
