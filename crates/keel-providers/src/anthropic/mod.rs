//! The Anthropic Messages adapter (`anthropic`): native prefill, extended thinking with
//! signatures round-tripped, provider-run tools, and prompt caching.

mod cache;
mod decode;
mod request;

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use keel_core::{
    CallOptions, Cancel, EventStream, LanguageModel, Message, ModelCall, ProviderError,
};

pub use cache::mark_cache_breakpoints;
pub use decode::AnthropicDecoder;
use request::continues_natively;
pub use request::{DEFAULT_MAX_TOKENS, METADATA_KEY, build as build_request, build_continuing};

use crate::http::Endpoint;
use crate::sse::decode_stream;

/// The `anthropic-version` header every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// A model behind the Anthropic Messages API.
#[derive(Debug)]
pub struct Anthropic {
    endpoint: Endpoint,
    /// Whether this model takes prefill: as configured, until the API refuses it
    /// ([`LanguageModel::refuse_prefill`]); then by instruction for the process's life.
    prefill: AtomicBool,
}

impl Anthropic {
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            prefill: AtomicBool::new(true),
        }
    }

    /// Continue cut replies as a final assistant turn (the default) or by instruction
    /// (`continuation = "prompt"`).
    pub fn with_prefill(self, prefill: bool) -> Self {
        self.prefill.store(prefill, Ordering::Relaxed);
        self
    }

    fn prefill(&self) -> bool {
        self.prefill.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl LanguageModel for Anthropic {
    fn provider(&self) -> &str {
        self.endpoint.provider()
    }

    fn model(&self) -> &str {
        self.endpoint.model()
    }

    fn supports_prefill(&self, options: &CallOptions) -> bool {
        continues_natively(self.prefill(), options)
    }

    fn refuse_prefill(&self) -> bool {
        let switched = self.prefill.swap(false, Ordering::Relaxed);
        if switched {
            tracing::warn!(provider = %self.provider(), model = %self.model(),
                "the model refuses assistant prefill; continuing it by instruction from now on \
                 (set continuation = \"prompt\" on it to skip the refused request)");
        }
        switched
    }

    /// Thinking blocks come signed, with a budget or adaptive alike.
    fn requires_signed_reasoning(&self, options: &CallOptions) -> bool {
        options.thinks()
    }

    fn prepare_prompt(&self, messages: &mut [Message]) {
        mark_cache_breakpoints(messages);
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        let body = build_continuing(&call, self.endpoint.model(), self.prefill());
        let response = self.endpoint.post("v1/messages", &body, &cancel).await?;
        let ctx = self.endpoint.ctx.clone();
        Ok(decode_stream(
            response.bytes_stream(),
            AnthropicDecoder::new(ctx.clone()),
            cancel,
            ctx,
        ))
    }
}
