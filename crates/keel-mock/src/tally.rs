//! What the mock reported: the usage figures of every response it delivered whole, for
//! `GET /stats`, so a client's accounting can be checked against what it was told.
//!
//! A response counts once its last frame (the one carrying the final usage, or following it)
//! was handed to the connection: a stream cut, ended by an error event, abandoned by its
//! client or refused with an HTTP error reported nothing and is not counted.
//!
//! Scripted responses are listed one by one; unscripted ones (echoes, the demo model's
//! replies) are summed per model, protocol and kind, so a long-lived server's tally stays
//! small.

use serde::Serialize;

use crate::plan::Reply;

/// A response delivered whole with the usage it reported, or the sum of several unscripted
/// ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reported {
    /// How many responses the figures add up: 1 for a scripted one.
    pub responses: u64,
    /// The `id` of the `#mock` script the response answered (its source text when the script
    /// has no id); `None` for an unscripted reply.
    pub key: Option<String>,
    /// The model the request named.
    pub model: String,
    /// `openai-chat`, `openai-responses`, `anthropic` or `gemini`.
    pub protocol: &'static str,
    /// Whether it was streamed.
    pub stream: bool,
    /// Prompt tokens neither read from nor written to a cache.
    pub input_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Reported {
    pub(crate) fn of(reply: &Reply, protocol: &'static str, stream: bool) -> Self {
        let u = reply.usage;
        Self {
            responses: 1,
            key: reply.key.clone(),
            model: reply.model.clone(),
            protocol,
            stream,
            input_tokens: u.input,
            cache_read_tokens: u.cache_read,
            cache_write_tokens: u.cache_write,
            output_tokens: u.output,
            reasoning_tokens: u.reasoning,
        }
    }
}

/// Adds `reported` to `tally`: a scripted response as an entry of its own, an unscripted one
/// into the entry of its model, protocol and kind.
pub(crate) fn add(tally: &mut Vec<Reported>, reported: Reported) {
    let same = |r: &&mut Reported| {
        r.key.is_none()
            && (&r.model, r.protocol, r.stream)
                == (&reported.model, reported.protocol, reported.stream)
    };
    match tally.iter_mut().find(same) {
        Some(sum) if reported.key.is_none() => {
            sum.responses += 1;
            sum.input_tokens += reported.input_tokens;
            sum.cache_read_tokens += reported.cache_read_tokens;
            sum.cache_write_tokens += reported.cache_write_tokens;
            sum.output_tokens += reported.output_tokens;
            sum.reasoning_tokens += reported.reasoning_tokens;
        }
        _ => tally.push(reported),
    }
}

/// The body of `GET /stats`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stats<'a> {
    pub completed: &'a [Reported],
}
