//! What the mock reported: the usage figures of every response it delivered whole, for
//! `GET /stats`, so a client's accounting can be checked against what it was told.
//!
//! A response counts once its last frame (the one carrying the final usage) was handed to
//! the connection: a stream cut, ended by an error event, abandoned by its client or
//! refused with an HTTP error reported nothing and is not counted.

use serde::Serialize;

use crate::plan::Reply;

/// One response delivered whole, with the usage it reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reported {
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

/// The body of `GET /stats`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stats<'a> {
    pub completed: &'a [Reported],
}
