//! The Google Gemini adapter (`gemini`): the native `streamGenerateContent` API with
//! thoughts, thought signatures and parallel function calls.
//!
//! A cut reply is continued by instruction, never as a trailing `model` turn: Gemini's
//! reference documents no continuation of a final model turn
//! (<https://ai.google.dev/api/generate-content>), and a model turn that ends a request is
//! not promised to be carried on rather than answered anew; the loop checks the seam.

mod decode;
mod request;

use async_trait::async_trait;
use keel_core::{Cancel, EventStream, LanguageModel, ModelCall, ProviderError};

pub use decode::GeminiDecoder;
pub use request::{LOCAL_CALL_ID_PREFIX, METADATA_KEY, SIGNATURE, build as build_request};

use crate::http::Endpoint;
use crate::sse::decode_stream;

/// A model behind the Gemini API.
#[derive(Debug, Clone)]
pub struct Gemini {
    endpoint: Endpoint,
}

impl Gemini {
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint }
    }
}

#[async_trait]
impl LanguageModel for Gemini {
    fn provider(&self) -> &str {
        self.endpoint.provider()
    }

    fn model(&self) -> &str {
        self.endpoint.model()
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        let body = build_request(&call);
        let path = format!(
            "models/{}:streamGenerateContent?alt=sse",
            self.endpoint.model()
        );
        let response = self.endpoint.post(&path, &body, &cancel).await?;
        let ctx = self.endpoint.ctx.clone();
        Ok(decode_stream(
            response.bytes_stream(),
            GeminiDecoder::new(ctx.clone()),
            cancel,
            ctx,
        ))
    }
}
