//! The OpenAI Chat Completions adapter (`openai-chat`), for OpenAI and every compatible
//! server (vLLM, llama.cpp, Ollama, DeepSeek, ...).

mod decode;
mod request;

use async_trait::async_trait;
use keel_core::{CallOptions, Cancel, EventStream, LanguageModel, ModelCall, ProviderError};

pub use decode::ChatDecoder;
pub use request::{ChatRequestOptions, EXTRA_CONTENT, METADATA_KEY, build as build_request};

use crate::http::Endpoint;
use crate::sse::decode_stream;

/// A model behind a Chat Completions endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    endpoint: Endpoint,
    options: ChatRequestOptions,
}

impl OpenAiChat {
    /// The request shape comes from the provider's settings, never from its host name:
    /// the same server is reached through Azure, gateways and proxies under other names.
    pub fn new(endpoint: Endpoint, options: ChatRequestOptions) -> Self {
        Self { endpoint, options }
    }
}

#[async_trait]
impl LanguageModel for OpenAiChat {
    fn provider(&self) -> &str {
        self.endpoint.provider()
    }

    fn model(&self) -> &str {
        self.endpoint.model()
    }

    fn supports_prefill(&self, _options: &CallOptions) -> bool {
        self.options.prefill
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        let body = build_request(&call, self.endpoint.model(), self.options);
        let response = self
            .endpoint
            .post("chat/completions", &body, &cancel)
            .await?;
        let ctx = self.endpoint.ctx.clone();
        Ok(decode_stream(
            response.bytes_stream(),
            ChatDecoder::new(ctx.clone()),
            cancel,
            ctx,
        ))
    }
}
