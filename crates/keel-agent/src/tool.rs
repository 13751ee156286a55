//! Tools the loop can run locally, and what they return.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Cancel, ToolDefinition};
use serde_json::{Value, json};

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRequest {
    pub tool_call_id: String,
    pub tool_name: String,
    /// The raw JSON argument text as the model produced it.
    pub args: String,
}

/// What a tool produced.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    Text(String),
    Json(Value),
    /// The tool ran and reports a failure to the model.
    Error(String),
    /// An image or other media, base64-encoded.
    Media {
        media_type: String,
        data: String,
    },
}

impl ToolOutput {
    /// The `result` JSON and `is_error` flag of the stored tool_result part.
    pub fn into_result(self) -> (Value, bool) {
        match self {
            ToolOutput::Text(text) => (Value::String(text), false),
            ToolOutput::Json(value) => (value, false),
            ToolOutput::Error(message) => (Value::String(message), true),
            ToolOutput::Media { media_type, data } => (
                json!({"type": "media", "media_type": media_type, "data": data}),
                false,
            ),
        }
    }
}

/// A failure running a tool. It becomes an error result the model can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

/// A tool the loop runs locally.
#[async_trait]
pub trait Tool: Send + Sync {
    fn definition(&self) -> ToolDefinition;

    /// Running it twice has the same effect as running it once; a call that was running when
    /// the daemon died may then be run again instead of being reported as interrupted.
    fn idempotent(&self) -> bool {
        false
    }

    /// It must run alone: a batch mixing it with other calls runs none of them.
    fn exclusive(&self) -> bool {
        false
    }

    /// Runs the call. Long-running tools must stop promptly when `cancel` fires.
    async fn call(&self, call: ToolCallRequest, cancel: Cancel) -> Result<ToolOutput, ToolError>;
}

/// A tool the provider knows by type (web search, ...). Offered to the model always; run
/// locally only when a local runner is given and the provider did not execute it itself.
#[derive(Clone)]
pub struct ProviderTool {
    pub definition: ToolDefinition,
    pub runner: Option<Arc<dyn Tool>>,
}

impl std::fmt::Debug for ProviderTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderTool")
            .field("definition", &self.definition)
            .field("runner", &self.runner.is_some())
            .finish()
    }
}
