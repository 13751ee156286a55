//! The provider-neutral stream of events a model adapter produces.
//!
//! Every adapter (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, the mock)
//! maps its wire protocol onto these events; the agent loop consumes nothing else.

use serde_json::Value;

use crate::error::ProviderError;
use crate::usage::{FinishReason, Usage};

/// One event of a model's streamed reply. `id`s tie start/delta/end events of one block
/// together; they are the adapter's own and only need to be unique within a stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        delta: String,
    },
    TextEnd {
        id: String,
    },
    /// Text of a refusal (OpenAI `refusal` deltas, or the explanation of an Anthropic
    /// `stop_reason: "refusal"`); deltas of one `id` form one refusal part.
    RefusalDelta {
        id: String,
        delta: String,
    },
    ReasoningStart {
        id: String,
        metadata: Option<Value>,
    },
    ReasoningDelta {
        id: String,
        delta: String,
        metadata: Option<Value>,
    },
    /// End of a reasoning block. Its metadata (e.g. a completed signature) wins over any seen
    /// before.
    ReasoningEnd {
        id: String,
        metadata: Option<Value>,
    },
    /// A tool call's arguments start streaming.
    ToolInputStart {
        id: String,
        tool_name: String,
        provider_executed: bool,
    },
    ToolInputDelta {
        id: String,
        delta: String,
    },
    ToolInputEnd {
        id: String,
    },
    /// A complete tool call with its whole argument text.
    ToolCall {
        id: String,
        tool_name: String,
        args: String,
        provider_executed: bool,
    },
    /// Opaque provider data of the complete call `id` (a Gemini thought signature) that must
    /// go back with the call in later requests; it follows the call's `ToolCall`.
    ToolCallMetadata {
        id: String,
        metadata: Value,
    },
    /// The result of a tool the provider ran itself (e.g. web search).
    ToolResult {
        id: String,
        tool_name: String,
        result: Value,
        is_error: bool,
    },
    Source {
        url: String,
        title: Option<String>,
    },
    File {
        media_type: String,
        data: String,
    },
    Finish {
        reason: FinishReason,
        usage: Usage,
        provider_metadata: Option<Value>,
    },
    /// The provider is alive but sent no content: an Anthropic `ping`, a Responses
    /// `response.in_progress`, an SSE comment. It resets the idle watchdog, never the
    /// startup timeout (a server that only pings has not started answering).
    KeepAlive,
    /// Provider response identity (e.g. the OpenAI Responses id used for chaining).
    ResponseId {
        id: String,
    },
    Error(ProviderError),
}
