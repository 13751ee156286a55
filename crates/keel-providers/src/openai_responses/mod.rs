//! The OpenAI Responses adapter (`openai-responses`), with chain mode through
//! `previous_response_id` and reasoning items round-tripped opaquely.

mod decode;
mod request;

use async_trait::async_trait;
use keel_core::{Cancel, EventStream, LanguageModel, ModelCall, ProviderError};

pub use decode::ResponsesDecoder;
pub use request::{METADATA_KEY, build as build_request, new_input};

use crate::http::Endpoint;
use crate::sse::decode_stream;

/// A model behind a Responses endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiResponses {
    endpoint: Endpoint,
}

impl OpenAiResponses {
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint }
    }
}

#[async_trait]
impl LanguageModel for OpenAiResponses {
    fn provider(&self) -> &str {
        self.endpoint.provider()
    }

    fn model(&self) -> &str {
        self.endpoint.model()
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        let body = build_request(&call, self.endpoint.model());
        let response = self.endpoint.post("responses", &body, &cancel).await?;
        let ctx = self.endpoint.ctx.clone();
        Ok(decode_stream(
            response.bytes_stream(),
            ResponsesDecoder::new(ctx.clone()),
            cancel,
            ctx,
        ))
    }
}
