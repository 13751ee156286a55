//! The interface every model provider implements.

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cancel::Cancel;
use crate::error::ProviderError;
use crate::message::Message;
use crate::stream::StreamEvent;

/// The events of one streamed reply. An error after the stream started arrives as
/// [`StreamEvent::Error`]; the stream may also simply end.
pub type EventStream = Pin<Box<dyn Stream<Item = StreamEvent> + Send>>;

/// A language model reachable through some provider.
#[async_trait]
pub trait LanguageModel: Send + Sync {
    /// The provider's configured name (for metrics and errors).
    fn provider(&self) -> &str;

    /// The upstream model name.
    fn model(&self) -> &str;

    /// Whether a call with `options` continues a trailing assistant message natively
    /// (assistant prefill), as Anthropic does without thinking. A prompt ending in an
    /// assistant message is a request to continue it; a call without prefill carries an
    /// instruction to continue instead, and the loop checks where that continuation starts.
    fn supports_prefill(&self, _options: &CallOptions) -> bool {
        false
    }

    /// The provider refused a native continuation ([`crate::classify::is_prefill_refusal`]):
    /// continue this model by instruction from now on. Returns whether that changed
    /// anything (the first refusal, which is logged); the loop retries any refused call at
    /// once when [`LanguageModel::supports_prefill`] then says no.
    fn refuse_prefill(&self) -> bool {
        false
    }

    /// Whether a tool-use turn sent back to this model must start with the reasoning the
    /// provider signed (Anthropic extended thinking). A step whose signed reasoning cannot be
    /// restored is then restarted rather than finished as a tool-use step.
    fn requires_signed_reasoning(&self, _options: &CallOptions) -> bool {
        false
    }

    /// Provider-specific preparation of a prompt *copy* right before a call, e.g. prompt
    /// cache markers. Never applied to stored history.
    fn prepare_prompt(&self, _messages: &mut [Message]) {}

    /// Starts streaming a reply. An error before the first event is returned directly.
    /// Implementations must stop promptly when `cancel` fires.
    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError>;
}

/// One request to a model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelCall {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
    pub options: CallOptions,
}

/// Sampling and provider options of a call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallOptions {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<ReasoningEffort>,
    pub thinking_budget_tokens: Option<u32>,
    /// Anthropic: thinking whose depth the model decides (`thinking: {type: "adaptive"}`).
    #[serde(default)]
    pub thinking: Option<Thinking>,
    /// Anthropic: how much effort the model spends, thinking included
    /// (`output_config.effort`).
    #[serde(default)]
    pub effort: Option<Effort>,
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// OpenAI Responses chain mode: continue from this stored response.
    pub previous_response_id: Option<String>,
    /// OpenAI Responses: ask the provider to store the response (enables chain mode).
    #[serde(default)]
    pub store: bool,
    /// Anything else, passed through to the provider unchanged.
    #[serde(default)]
    pub provider_options: Map<String, Value>,
    /// The trailing assistant message is a turn the provider paused (Anthropic
    /// `pause_turn`): it goes back exactly as it is, never with an instruction to continue,
    /// and the provider carries the turn on. Set by the loop for one call, never configured.
    #[serde(skip)]
    pub paused_turn: bool,
}

/// How hard a reasoning model thinks before answering: the values OpenAI's `reasoning_effort`
/// (Chat Completions) and `reasoning.effort` (Responses) accept, per the API reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
}

/// A thinking mode chosen by name (Anthropic's `thinking.type`); a budget of thinking
/// tokens is [`CallOptions::thinking_budget_tokens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    /// The model decides whether and how much to think (Claude 4.6 and later), guided by
    /// [`Effort`].
    Adaptive,
}

/// The values Anthropic's `output_config.effort` accepts, per the effort guide
/// (https://platform.claude.com/docs/en/build-with-claude/effort); `xhigh` and `max` only on
/// the models that offer them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl CallOptions {
    /// Whether the call asks for thinking: a budget, or adaptive thinking.
    pub fn thinks(&self) -> bool {
        self.thinking.is_some() || self.thinking_budget_tokens.is_some_and(|b| b > 0)
    }
}

/// Whether and how the model may call tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    Required,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments; always an object schema.
    pub parameters: Value,
    /// Set for tools the provider runs itself (web search, ...): the provider's tool type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_tool: Option<String>,
}

impl ToolDefinition {
    /// A function tool. The schema is normalised: it is made an object schema and an empty
    /// `required` list is dropped, which some providers reject.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters: normalise_schema(parameters),
            provider_tool: None,
        }
    }

    /// A tool executed by the provider.
    pub fn provider(name: impl Into<String>, provider_tool: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            parameters: normalise_schema(Value::Null),
            provider_tool: Some(provider_tool.into()),
        }
    }

    pub fn is_provider_tool(&self) -> bool {
        self.provider_tool.is_some()
    }
}

fn normalise_schema(parameters: Value) -> Value {
    let mut schema = match parameters {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    schema.insert("type".into(), Value::String("object".into()));
    if !schema.contains_key("properties") {
        schema.insert("properties".into(), Value::Object(Map::new()));
    }
    if matches!(schema.get("required"), Some(Value::Array(a)) if a.is_empty()) {
        schema.remove("required");
    }
    Value::Object(schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_required_is_omitted_and_schema_is_an_object() {
        let def = ToolDefinition::function("t", "d", json!({"properties": {}, "required": []}));
        assert_eq!(def.parameters, json!({"type":"object","properties":{}}));
        let def = ToolDefinition::function("t", "d", Value::Null);
        assert_eq!(def.parameters, json!({"type":"object","properties":{}}));
        let def = ToolDefinition::function(
            "t",
            "d",
            json!({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}),
        );
        assert_eq!(def.parameters["required"], json!(["a"]));
    }
}
