//! The conventions' array attributes: a `tracing` field holds one value, so the loop records
//! `gen_ai.response.finish_reasons` as text (`keel_agent::trace`) and this processor makes it
//! the array of strings the conventions define before the span is exported.

use std::time::Duration;

use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

/// Attributes the conventions define as arrays of strings, recorded comma-separated.
const ARRAYS: &[&str] = &["gen_ai.response.finish_reasons"];

/// A span processor that rewrites [`ARRAYS`] and hands every span on to `next`.
#[derive(Debug)]
pub(super) struct GenAiArrays<P> {
    next: P,
}

impl<P> GenAiArrays<P> {
    pub(super) fn new(next: P) -> Self {
        Self { next }
    }
}

/// A comma-separated text as an array of strings.
fn as_array(value: &Value) -> Option<Value> {
    let Value::String(text) = value else {
        return None;
    };
    let items: Vec<StringValue> = text
        .as_str()
        .split(',')
        .map(|item| StringValue::from(item.trim().to_owned()))
        .collect();
    Some(Value::Array(Array::String(items)))
}

impl<P: SpanProcessor> SpanProcessor for GenAiArrays<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.next.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        for attribute in &mut span.attributes {
            if ARRAYS.contains(&attribute.key.as_str())
                && let Some(array) = as_array(&attribute.value)
            {
                *attribute = KeyValue::new(attribute.key.clone(), array);
            }
        }
        self.next.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.next.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.next.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.next.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_text_becomes_an_array_of_strings() {
        let value = as_array(&Value::from("stop, tool_calls")).unwrap();
        assert_eq!(
            value,
            Value::Array(Array::String(vec!["stop".into(), "tool_calls".into()]))
        );
        assert_eq!(as_array(&Value::I64(1)), None);
    }
}
