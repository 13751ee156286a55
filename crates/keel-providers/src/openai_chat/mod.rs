//! The OpenAI Chat Completions adapter (`openai-chat`), for OpenAI and every compatible
//! server (vLLM, llama.cpp, Ollama, DeepSeek, ...).

mod decode;
mod request;

use async_trait::async_trait;
use keel_core::{CallOptions, Cancel, EventStream, LanguageModel, ModelCall, ProviderError};

pub use decode::ChatDecoder;
pub use request::{ChatRequestOptions, build as build_request};

use crate::http::Endpoint;
use crate::sse::decode_stream;

/// A model behind a Chat Completions endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    endpoint: Endpoint,
    options: ChatRequestOptions,
}

impl OpenAiChat {
    pub fn new(endpoint: Endpoint, include_usage: bool) -> Self {
        // OpenAI itself rejects `max_tokens` for reasoning models; compatible servers do not
        // all know `max_completion_tokens`.
        let official = reqwest::Url::parse(&endpoint.base_url)
            .is_ok_and(|u| u.host_str() == Some("api.openai.com"));
        Self {
            endpoint,
            options: ChatRequestOptions {
                include_usage,
                legacy_max_tokens: !official,
                reasoning_content: !official,
                prefill: false,
            },
        }
    }

    /// Continue cut replies with the server's native prefill (`continuation = "prefill"`).
    pub fn with_prefill(mut self, prefill: bool) -> Self {
        self.options.prefill = prefill;
        self
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
