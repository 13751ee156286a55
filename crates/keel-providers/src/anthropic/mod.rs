//! The Anthropic Messages adapter (`anthropic`): native prefill, extended thinking with
//! signatures round-tripped, provider-run tools, and prompt caching.

mod cache;
mod decode;
mod request;

use async_trait::async_trait;
use keel_core::{
    CallOptions, Cancel, EventStream, LanguageModel, Message, ModelCall, ProviderError,
};

pub use cache::mark_cache_breakpoints;
pub use decode::AnthropicDecoder;
pub use request::{DEFAULT_MAX_TOKENS, METADATA_KEY, build as build_request, build_continuing};

use crate::http::Endpoint;
use crate::sse::decode_stream;

/// The `anthropic-version` header every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// A model behind the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct Anthropic {
    endpoint: Endpoint,
    prefill: bool,
}

impl Anthropic {
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            prefill: true,
        }
    }

    /// Continue cut replies as a final assistant turn (the default) or by instruction
    /// (`continuation = "prompt"`).
    pub fn with_prefill(mut self, prefill: bool) -> Self {
        self.prefill = prefill;
        self
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

    fn supports_prefill(&self) -> bool {
        self.prefill
    }

    fn requires_signed_reasoning(&self, options: &CallOptions) -> bool {
        options.thinking_budget_tokens.is_some_and(|b| b > 0)
    }

    fn prepare_prompt(&self, messages: &mut [Message]) {
        mark_cache_breakpoints(messages);
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        let body = build_continuing(&call, self.endpoint.model(), self.prefill);
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
