//! The Anthropic Messages adapter (`anthropic`): native prefill, extended thinking with
//! signatures round-tripped, provider-run tools, and prompt caching.

mod cache;
mod decode;
mod request;

use async_trait::async_trait;
use keel_core::{Cancel, EventStream, LanguageModel, Message, ModelCall, ProviderError};

pub use cache::mark_cache_breakpoints;
pub use decode::AnthropicDecoder;
pub use request::{DEFAULT_MAX_TOKENS, METADATA_KEY, build as build_request};

use crate::http::Endpoint;
use crate::sse::decode_stream;

/// The `anthropic-version` header every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// A model behind the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct Anthropic {
    endpoint: Endpoint,
}

impl Anthropic {
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint }
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
        true
    }

    fn prepare_prompt(&self, messages: &mut [Message]) {
        mark_cache_breakpoints(messages);
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        let body = build_request(&call, self.endpoint.model());
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
