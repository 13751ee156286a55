//! The spans of a run, as `tracing` spans whose fields follow OpenTelemetry's semantic
//! conventions for generative AI: a step (`keel.step`), each model call of it
//! (`chat {model}`: one per attempt), each local tool call (`execute_tool {name}`) and a
//! compaction (`keel.compaction`, around the summary's model call). Retries and recovery
//! plans are events of the model call that failed. The loop knows nothing of exporters:
//! the daemon turns these spans into OpenTelemetry spans when telemetry is on, and nothing
//! is recorded when no subscriber wants them.
//!
//! Content (prompts, replies, tool arguments and results) is recorded only with
//! [`RunOptions::capture_content`](crate::RunOptions::capture_content).

use keel_core::{LanguageModel, ModelCall, ProviderError, Usage};
use tracing::Span;
use tracing::field::Empty;

use crate::accumulate::StepAccumulator;
use crate::recovery::RecoveryPlan;
use crate::tool::{ToolCallRequest, ToolError, ToolOutput};

/// The target of every span and event of this module, which the daemon's log leaves out.
pub const TARGET: &str = "keel::trace";

/// A step of the loop: its model calls, its tool calls and its commit.
pub(crate) fn step(index: usize) -> Span {
    tracing::info_span!(
        target: TARGET,
        "keel.step",
        keel.step.index = i64::try_from(index).unwrap_or(i64::MAX)
    )
}

/// A compaction: the summary's model call and its commit.
pub(crate) fn compaction() -> Span {
    tracing::info_span!(target: TARGET, "keel.compaction")
}

/// One model call (an attempt of a step), named `chat {model}`.
pub(crate) fn model_call(model: &dyn LanguageModel, call: &ModelCall, capture: bool) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = format!("chat {}", model.model()),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = model.provider(),
        gen_ai.system = model.provider(),
        gen_ai.request.model = model.model(),
        gen_ai.request.max_tokens = call.options.max_output_tokens.map(i64::from),
        gen_ai.request.temperature = call.options.temperature,
        gen_ai.request.top_p = call.options.top_p,
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        keel.usage.cached_input_tokens = Empty,
        keel.usage.reasoning_tokens = Empty,
        error.type = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
    );
    if capture && !span.is_disabled() {
        span.record(
            "gen_ai.input.messages",
            serde_json::to_string(&call.messages).unwrap_or_default(),
        );
    }
    span
}

/// The usage as the span records it: `input` is the whole prompt (cache reads and writes
/// included, as the conventions count it), `cached` the part read from a cache.
pub(crate) fn usage_counts(usage: &Usage) -> (u64, u64) {
    let input = usage.input_tokens + usage.cache_write_tokens + usage.cache_read_tokens;
    (input, usage.cache_read_tokens)
}

/// Records what a finished call answered: the model, finish reason and usage of the step
/// (the usage that is committed with it), and with `capture` the reply.
pub(crate) fn finished(span: &Span, model: &str, acc: &StepAccumulator, capture: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.response.model", model);
    if let Some(id) = &acc.response_id {
        span.record("gen_ai.response.id", id.as_str());
    }
    let reason = acc.finish_reason.unwrap_or_default();
    span.record("gen_ai.response.finish_reasons", finish_reason(reason));
    if !acc.usage.is_zero() {
        let (input, cached) = usage_counts(&acc.usage);
        span.record("gen_ai.usage.input_tokens", signed(input));
        span.record(
            "gen_ai.usage.output_tokens",
            signed(acc.usage.output_tokens),
        );
        span.record("keel.usage.cached_input_tokens", signed(cached));
        span.record(
            "keel.usage.reasoning_tokens",
            signed(acc.usage.reasoning_tokens),
        );
    }
    if capture {
        let message = crate::response::assistant_message(acc, true, chrono::Utc::now());
        span.record(
            "gen_ai.output.messages",
            serde_json::to_string(&message.into_iter().collect::<Vec<_>>()).unwrap_or_default(),
        );
    }
}

/// A count as a signed integer: OpenTelemetry's integers are `i64`, and an unsigned field
/// would be exported as text.
fn signed(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The conventions' name of a finish reason.
pub(crate) fn finish_reason(reason: keel_core::FinishReason) -> &'static str {
    use keel_core::FinishReason::*;
    match reason {
        Stop => "stop",
        Length => "length",
        ToolCalls => "tool_calls",
        ContentFilter => "content_filter",
        PauseTurn => "pause_turn",
        Error => "error",
        Unknown => "unknown",
    }
}

/// Marks a call as failed with the provider's error kind.
pub(crate) fn failed(span: &Span, error: &ProviderError) {
    span.record("otel.status_code", "error");
    span.record("otel.status_description", error.message.as_str());
    span.record("error.type", error.kind.as_str());
}

/// The event of a failed call that is tried again as it was, after `delay_ms`.
pub(crate) fn retry(span: &Span, attempt: u32, delay_ms: u64, error: &ProviderError) {
    span.in_scope(|| {
        tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            keel.retry.attempt = i64::from(attempt),
            keel.retry.delay_ms = signed(delay_ms),
            error.type = error.kind.as_str(),
            "retry"
        );
    });
}

/// The event of a call cut after content, naming the recovery plan that follows it.
pub(crate) fn recovery(span: &Span, plan: &RecoveryPlan, error: Option<&ProviderError>) {
    span.in_scope(|| {
        tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            keel.recovery.plan = plan_name(plan),
            error.type = error.map(|e| e.kind.as_str()),
            "recovery"
        );
    });
}

/// How the recovery plans are named in traces.
pub(crate) fn plan_name(plan: &RecoveryPlan) -> &'static str {
    match plan {
        RecoveryPlan::ContinueText { .. } => "continue_text",
        RecoveryPlan::SynthesizeToolUse { .. } => "synthesize_tool_use",
        RecoveryPlan::TruncateBeforeTool { .. } => "truncate_before_tool",
        RecoveryPlan::WholeRestart => "whole_restart",
    }
}

/// One local tool call, named `execute_tool {name}`.
pub(crate) fn tool_call(request: &ToolCallRequest, capture: bool) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = format!("execute_tool {}", request.tool_name),
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = request.tool_name.as_str(),
        gen_ai.tool.call.id = request.tool_call_id.as_str(),
        gen_ai.tool.type = "function",
        error.type = Empty,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
    );
    if capture && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", request.args.as_str());
    }
    span
}

/// Records a tool call's outcome on its span.
pub(crate) fn tool_result(span: &Span, outcome: &Result<ToolOutput, ToolError>, capture: bool) {
    if span.is_disabled() {
        return;
    }
    let (text, error) = match outcome {
        Ok(ToolOutput::Text(text)) => (text.clone(), false),
        Ok(ToolOutput::Json(value)) => (value.to_string(), false),
        Ok(ToolOutput::Error(message)) => (message.clone(), true),
        Ok(ToolOutput::Media { media_type, .. }) => (format!("[{media_type}]"), false),
        Err(error) => (error.0.clone(), true),
    };
    if error {
        span.record("otel.status_code", "error");
        span.record("error.type", "tool_error");
    }
    if capture {
        span.record("gen_ai.tool.call.result", text.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_count_is_the_whole_prompt_and_cached_is_its_cache_reads() {
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 4,
            cache_read_tokens: 100,
            cache_write_tokens: 5,
            reasoning_tokens: 2,
        };
        assert_eq!(usage_counts(&usage), (115, 100));
    }
}
