//! Messages and parts, in the shape the public HTTP contract gives them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The text that introduces a conversation summary when it is sent to a model.
pub const SUMMARY_PREFIX: &str = "Summary of the conversation so far:";

/// The result recorded for a tool call that never produced one: the run stopped (a user
/// interrupt, a crash) between the call and its result, and the model must still see the
/// call answered.
pub const INTERRUPTED_RESULT: &str = "tool call was interrupted before it produced a result";

/// A call to a client-side tool: the loop does not run it, the chat waits in
/// `requires_action` until the client sends its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingToolCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        crate::names::serde_name(&self)
    }
}

/// One message of a conversation: a role and an ordered list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
    /// Asks providers with prompt caching to cache the prompt up to and including this
    /// message. Set only on prompt copies by provider preparation; never stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache_breakpoint: bool,
}

impl Message {
    pub fn new(role: Role, parts: Vec<Part>) -> Self {
        Self {
            role,
            parts,
            cache_breakpoint: false,
        }
    }

    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, vec![Part::text(text)])
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![Part::text(text)])
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![Part::text(text)])
    }

    /// The user message that carries a conversation summary into a prompt: models follow
    /// user text more reliably than a system message in the middle of a conversation.
    pub fn summary(text: &str) -> Self {
        Self::user(format!("{SUMMARY_PREFIX}\n\n{text}"))
    }

    /// The concatenated text of all text parts.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| match &p.kind {
                PartKind::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Whether the model declined this turn (a refusal part).
    pub fn is_refusal(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p.kind, PartKind::Refusal { .. }))
    }

    /// Tool calls in this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &Part> {
        self.parts
            .iter()
            .filter(|p| matches!(p.kind, PartKind::ToolCall { .. }))
    }
}

/// One part of a message. `created_at` is set on assistant and tool parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Part {
    #[serde(flatten)]
    pub kind: PartKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
}

impl Part {
    pub fn new(kind: PartKind) -> Self {
        Self {
            kind,
            created_at: None,
        }
    }

    pub fn at(mut self, when: DateTime<Utc>) -> Self {
        self.created_at = Some(when);
        self
    }

    pub fn text(text: impl Into<String>) -> Self {
        Self::new(PartKind::Text { text: text.into() })
    }

    pub fn reasoning(text: impl Into<String>, provider_metadata: Option<Value>) -> Self {
        Self::new(PartKind::Reasoning {
            text: text.into(),
            provider_metadata,
        })
    }

    pub fn refusal(text: impl Into<String>) -> Self {
        Self::new(PartKind::Refusal { text: text.into() })
    }

    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        args: impl Into<String>,
        provider_executed: bool,
    ) -> Self {
        Self::new(PartKind::ToolCall {
            tool_call_id: id.into(),
            tool_name: name.into(),
            args: args.into(),
            provider_executed,
            provider_metadata: None,
        })
    }

    /// A tool call part with the provider data that must go back with it; other parts are
    /// returned as they are.
    pub fn with_call_metadata(mut self, metadata: Option<Value>) -> Self {
        if let PartKind::ToolCall {
            provider_metadata, ..
        } = &mut self.kind
        {
            *provider_metadata = metadata;
        }
        self
    }

    pub fn tool_result(
        id: impl Into<String>,
        name: impl Into<String>,
        result: Value,
        is_error: bool,
        provider_executed: bool,
    ) -> Self {
        Self::new(PartKind::ToolResult {
            tool_call_id: id.into(),
            tool_name: name.into(),
            result,
            is_error,
            provider_executed,
        })
    }

    /// The tool call id of a tool_call or tool_result part.
    pub fn tool_call_id(&self) -> Option<&str> {
        match &self.kind {
            PartKind::ToolCall { tool_call_id, .. } | PartKind::ToolResult { tool_call_id, .. } => {
                Some(tool_call_id)
            }
            _ => None,
        }
    }
}

/// The content of a part. The serde tag `type` and the field names are the public contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PartKind {
    Text {
        text: String,
    },
    Reasoning {
        text: String,
        /// Opaque provider data (signatures, encrypted content) that must round-trip unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
    ToolCall {
        tool_call_id: String,
        tool_name: String,
        /// The raw JSON text of the arguments; partial JSON when the call was interrupted.
        args: String,
        #[serde(default)]
        provider_executed: bool,
        /// Opaque provider data (a Gemini thought signature) that must go back with the
        /// call unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_metadata: Option<Value>,
    },
    ToolResult {
        tool_call_id: String,
        tool_name: String,
        result: Value,
        #[serde(default)]
        is_error: bool,
        #[serde(default)]
        provider_executed: bool,
    },
    /// The model declined to answer: OpenAI's `refusal` (a Chat delta, a Responses content
    /// part) or an Anthropic reply stopped with `stop_reason: "refusal"` (then the text is
    /// the provider's explanation, or a fixed notice when it gives none).
    Refusal {
        text: String,
    },
    Source {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    File {
        media_type: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_serialise_as_the_contract_shows() {
        let call = Part::tool_call("c1", "read_file", "{\"path\":", false);
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"type":"tool_call","tool_call_id":"c1","tool_name":"read_file","args":"{\"path\":","provider_executed":false})
        );
        let text: Part = serde_json::from_value(json!({"type":"text","text":"hi"})).unwrap();
        assert_eq!(text, Part::text("hi"));
        let file: Part = serde_json::from_value(
            json!({"type":"file","media_type":"image/png","url":"http://x"}),
        )
        .unwrap();
        assert!(matches!(file.kind, PartKind::File { ref url, .. } if url.is_some()));
        let refusal: Part =
            serde_json::from_value(json!({"type":"refusal","text":"I can't help with that."}))
                .unwrap();
        assert_eq!(refusal, Part::refusal("I can't help with that."));
    }

    #[test]
    fn unknown_part_types_are_rejected() {
        assert!(serde_json::from_value::<Part>(json!({"type":"video","src":"x"})).is_err());
        assert!(serde_json::from_value::<Part>(json!({"text":"no type"})).is_err());
    }

    #[test]
    fn created_at_round_trips() {
        let when = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        let part = Part::text("x").at(when);
        let back: Part = serde_json::from_str(&serde_json::to_string(&part).unwrap()).unwrap();
        assert_eq!(back.created_at, Some(when));
    }
}
