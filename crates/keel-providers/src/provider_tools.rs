//! Tools a provider runs itself, by the name a model's configuration gives them
//! (`provider_tools = ["web_search"]`), and the tool definition each provider kind is
//! offered them with. The one place that knows which kind has which tool.

use keel_core::ToolDefinition;

use crate::config::ProviderKind;

/// Every provider tool name the configuration accepts.
pub const PROVIDER_TOOL_NAMES: &[&str] = &[WEB_SEARCH];

const WEB_SEARCH: &str = "web_search";

/// Why a provider tool cannot be offered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderToolError {
    #[error("unknown provider tool `{name}`; known: {}", PROVIDER_TOOL_NAMES.join(", "))]
    Unknown { name: String },
    #[error("{kind} providers have no `{name}` tool")]
    NotOffered { name: String, kind: ProviderKind },
}

/// The definition `kind` is offered the provider tool `name` with: the tool keeps `name`
/// (the name its calls and results carry) and gets the provider's own tool type.
pub fn provider_tool(kind: ProviderKind, name: &str) -> Result<ToolDefinition, ProviderToolError> {
    if !PROVIDER_TOOL_NAMES.contains(&name) {
        return Err(ProviderToolError::Unknown {
            name: name.to_owned(),
        });
    }
    let provider_type = match kind {
        // https://platform.openai.com/docs/guides/tools-web-search: `{"type": "web_search"}`
        // (the generally available type; `web_search_preview` is the older one).
        ProviderKind::OpenAiResponses => Some("web_search"),
        // https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-search-tool:
        // `{"type": "web_search_20250305", "name": "web_search"}`.
        ProviderKind::Anthropic => Some("web_search_20250305"),
        // Chat Completions has no provider-run tools to offer in `tools`.
        _ => None,
    };
    provider_type
        .map(|ty| ToolDefinition::provider(name, ty))
        .ok_or_else(|| ProviderToolError::NotOffered {
            name: name.to_owned(),
            kind,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_search_has_each_providers_own_type() {
        let anthropic = provider_tool(ProviderKind::Anthropic, "web_search").unwrap();
        assert_eq!(anthropic.name, "web_search");
        assert_eq!(
            anthropic.provider_tool.as_deref(),
            Some("web_search_20250305")
        );
        let responses = provider_tool(ProviderKind::OpenAiResponses, "web_search").unwrap();
        assert_eq!(responses.provider_tool.as_deref(), Some("web_search"));
    }

    #[test]
    fn an_unknown_name_or_a_kind_without_the_tool_is_refused() {
        assert_eq!(
            provider_tool(ProviderKind::Anthropic, "code_interpreter"),
            Err(ProviderToolError::Unknown {
                name: "code_interpreter".into()
            })
        );
        let chat = provider_tool(ProviderKind::OpenAiChat, "web_search").unwrap_err();
        assert_eq!(
            chat.to_string(),
            "openai-chat providers have no `web_search` tool"
        );
    }
}
