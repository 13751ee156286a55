//! The framing Anthropic Messages and OpenAI Responses share: every event is a JSON object
//! named by its `type` field (or, lacking one, by the SSE event name), and a stream that
//! closes before the protocol's terminal event was cut. A decoder of such a protocol
//! implements [`TypedEvents`] and gets its [`Decoder`] from here.

use keel_core::{ProviderError, StreamEvent};
use serde_json::Value;

use crate::http::ErrorContext;
use crate::sse::{Decoder, SseEvent};

/// A protocol of JSON events named by their `type`.
pub trait TypedEvents: Send + 'static {
    /// The event that ends a complete stream, named when a stream closes without it.
    const TERMINAL: &'static str;

    fn ctx(&self) -> &ErrorContext;

    /// Whether the terminal event or a failure was seen.
    fn is_done(&self) -> bool;

    /// Decodes one event of type `ty`; `data` is its text as it arrived.
    fn handle(&mut self, ty: &str, event: &Value, data: &str, out: &mut Vec<StreamEvent>);

    /// Appends `error` as the stream's last event.
    fn fail(&mut self, error: ProviderError, out: &mut Vec<StreamEvent>);
}

impl<T: TypedEvents> Decoder for T {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) {
        if self.is_done() {
            return;
        }
        let Ok(value) = serde_json::from_str::<Value>(&event.data) else {
            tracing::debug!(provider = %self.ctx().provider, "ignoring a non-JSON event");
            return;
        };
        let ty = match value.get("type").and_then(Value::as_str) {
            Some(ty) => ty.to_owned(),
            None => event.event.clone(),
        };
        self.handle(&ty, &value, &event.data, out);
    }

    fn is_finished(&self) -> bool {
        self.is_done()
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.is_done() {
            let error = self
                .ctx()
                .message(&format!("stream closed before {}", T::TERMINAL));
            self.fail(error, out);
        }
    }
}
