//! The framing Anthropic Messages and OpenAI Responses share: every event is a JSON object
//! named by its `type` field (or, lacking one, by the SSE event name), and a stream that
//! closes before the protocol's terminal event was cut. A decoder of such a protocol
//! implements [`TypedEvents`] (with [`typed_events!`], when its state has the usual `ctx`
//! and `finished` fields) and gets its [`Decoder`] from here.

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

/// Implements [`TypedEvents`] for a decoder whose state holds `ctx: ErrorContext` and
/// `finished: bool` and whose `handle_event` decodes one event; `$terminal` names the event
/// that ends a complete stream.
macro_rules! typed_events {
    ($decoder:ty, $terminal:literal) => {
        impl $crate::typed_events::TypedEvents for $decoder {
            const TERMINAL: &'static str = $terminal;

            fn ctx(&self) -> &$crate::http::ErrorContext {
                &self.ctx
            }

            fn is_done(&self) -> bool {
                self.finished
            }

            fn handle(
                &mut self,
                ty: &str,
                event: &serde_json::Value,
                data: &str,
                out: &mut Vec<keel_core::StreamEvent>,
            ) {
                self.handle_event(ty, event, data, out);
            }

            fn fail(
                &mut self,
                error: keel_core::ProviderError,
                out: &mut Vec<keel_core::StreamEvent>,
            ) {
                out.push(keel_core::StreamEvent::Error(error));
                self.finished = true;
            }
        }
    };
}
pub(crate) use typed_events;
