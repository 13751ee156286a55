//! The daemon's edge of OpenTelemetry: W3C trace context in and out, and the span of a run.
//!
//! A request's `traceparent` header is kept with the run it starts (`keel_store::trace`);
//! the worker that runs the chat, on any replica, makes it the parent of the run's span
//! (`invoke_agent`), and records that span's own context, so that a daemon taking the chat
//! over after a crash links its run to it. The loop's own spans (`keel_agent::trace`) are
//! children of the run's. Which spans leave the process, and how, is the `keel` binary's
//! business (its exporter); without one, spans cost next to nothing and carry no ids.

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of the spans of runs (and only those): what a trace exporter takes and the
/// log leaves out.
pub const TRACE_TARGET: &str = keel_agent::trace::TARGET;

/// A `traceparent` value (`00-TRACE_ID-SPAN_ID-FLAGS`) as a span context, if it is one: the
/// ids in lower-case hex and not all zero. A later version's value is read by its first
/// four fields, as the W3C recommendation asks.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut fields = value.trim().split('-');
    let (version, trace, span, flags) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let valid = hex(version, 2)
        && version != "ff"
        && (version != "00" || fields.next().is_none())
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2);
    if !valid {
        return None;
    }
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & 1),
        true,
        TraceState::NONE,
    );
    context.is_valid().then_some(context)
}

/// A span context as a `traceparent` value.
pub fn format_traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// The trace id of a `traceparent` value, for the log.
pub(crate) fn trace_id_of(traceparent: &str) -> Option<String> {
    parse_traceparent(traceparent).map(|c| c.trace_id().to_string())
}

/// The span of one run of a chat: a child of the request that started it, linked to the run
/// a dead owner left when this one takes the chat over.
pub(crate) fn run_span(
    chat: &keel_store::Chat,
    trace: &keel_store::trace::RunTrace,
    taken_over: bool,
) -> Span {
    let span = tracing::info_span!(
        target: keel_agent::trace::TARGET,
        "invoke_agent",
        otel.name = "invoke_agent",
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.conversation.id = %chat.id,
        gen_ai.request.model = chat.model.as_str(),
        keel.run.resumed = taken_over,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(parent) = trace.parent.as_deref().and_then(parse_traceparent) {
        let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    }
    if taken_over && let Some(previous) = trace.run.as_deref().and_then(parse_traceparent) {
        span.add_link(previous);
    }
    span
}

/// The `traceparent` of a span, when an exporter gave it ids.
pub(crate) fn traceparent_of(span: &Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| format_traceparent(&span_context))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_and_writes_back_unchanged() {
        let context = parse_traceparent(VALUE).unwrap();
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(format_traceparent(&context), VALUE);
        assert_eq!(
            trace_id_of(VALUE).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
    }

    #[test]
    fn what_is_not_a_traceparent_is_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
        // A later version keeps its first four fields' meaning.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        assert!(!parse_traceparent(later).unwrap().is_sampled());
    }
}
