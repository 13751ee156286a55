//! Rules of the provider-run web search and of provider tools in `tools`, per protocol.
//!
//! Anthropic: a `web_search_tool_result` goes back only after the `server_tool_use` it
//! answers, in the same assistant turn, with its results' `encrypted_content` exactly as
//! the API sent it; Responses: a `web_search_call` item goes back whole. On both, a tool
//! type the API does not know is refused.

use std::collections::HashSet;

use serde_json::Value;

use super::{Rule, Violation, array, str_at};

/// The Messages rules of this module.
pub(crate) const ANTHROPIC: &[Rule] = &[
    anthropic_tool_types_are_known,
    search_results_follow_their_call,
    search_results_are_unmodified,
];

/// The Responses rules of this module.
pub(crate) const RESPONSES: &[Rule] = &[
    responses_tool_types_are_known,
    web_search_calls_go_back_whole,
];

/// The `encrypted_content` the mock gives a search result at `url`; the API decrypts what
/// comes back, so anything else is refused.
pub(crate) fn encrypted_content(url: &str) -> String {
    format!("mock-enc-{:016x}", super::thinking::stable_hash(url))
}

/// The server tool types of the Messages API
/// (<https://docs.claude.com/en/docs/agents-and-tools/tool-use/overview>, "Server tools"
/// and the client tools Anthropic defines); a tool without a `type` (or `custom`) is the
/// caller's own function.
const ANTHROPIC_TOOL_TYPES: &[&str] = &[
    "custom",
    "web_search_20250305",
    "web_fetch_20250910",
    "code_execution_20250522",
    "code_execution_20250825",
    "bash_20250124",
    "text_editor_20250124",
    "text_editor_20250429",
    "text_editor_20250728",
    "computer_20250124",
    "memory_20250818",
];

/// An unknown tool type is refused; the web search tool is named `web_search`.
/// <https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-search-tool> ("Tool
/// definition": `"type": "web_search_20250305", "name": "web_search"`).
pub(crate) fn anthropic_tool_types_are_known(request: &Value) -> Result<(), Violation> {
    for (i, tool) in array(request, "tools").iter().enumerate() {
        let kind = str_at(tool, "type");
        if !kind.is_empty() && !ANTHROPIC_TOOL_TYPES.contains(&kind) {
            return Err(Violation::new(format!(
                "tools.{i}: Input tag '{kind}' found using 'type' does not match any of the \
                 expected tags: {}",
                ANTHROPIC_TOOL_TYPES.join(", ")
            )));
        }
        if kind == "web_search_20250305" && str_at(tool, "name") != "web_search" {
            return Err(Violation::new(format!(
                "tools.{i}.name: Input should be 'web_search'"
            )));
        }
    }
    Ok(())
}

/// A `web_search_tool_result` answers a `server_tool_use` that comes before it in the same
/// assistant turn. <https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-search-tool>
/// ("Response": the `server_tool_use` block, then its `web_search_tool_result`).
pub(crate) fn search_results_follow_their_call(request: &Value) -> Result<(), Violation> {
    for (i, message) in array(request, "messages").iter().enumerate() {
        let mut calls = HashSet::new();
        for (j, block) in array(message, "content").iter().enumerate() {
            match str_at(block, "type") {
                "server_tool_use" => {
                    calls.insert(str_at(block, "id"));
                }
                "web_search_tool_result" if !calls.contains(str_at(block, "tool_use_id")) => {
                    return Err(Violation::new(format!(
                        "messages.{i}.content.{j}: `web_search_tool_result` block with \
                         tool_use_id `{}` does not follow a `server_tool_use` block with that id",
                        str_at(block, "tool_use_id")
                    )));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A search result's `encrypted_content` goes back exactly as the API sent it: the API
/// decrypts it to give the model the page again.
/// <https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-search-tool> ("Search
/// results": "`encrypted_content`: Encrypted content that must be passed back in multi-turn
/// conversations for citations").
pub(crate) fn search_results_are_unmodified(request: &Value) -> Result<(), Violation> {
    for (i, message) in array(request, "messages").iter().enumerate() {
        for (j, block) in array(message, "content").iter().enumerate() {
            if str_at(block, "type") != "web_search_tool_result" {
                continue;
            }
            for (k, result) in array(block, "content").iter().enumerate() {
                if str_at(result, "encrypted_content") != encrypted_content(str_at(result, "url")) {
                    return Err(Violation::new(format!(
                        "messages.{i}.content.{j}.content.{k}.encrypted_content: invalid \
                         encrypted content"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The tool types of the Responses API
/// (<https://platform.openai.com/docs/api-reference/responses/create>, `tools`).
const RESPONSES_TOOL_TYPES: &[&str] = &[
    "function",
    "file_search",
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "computer_use_preview",
    "mcp",
    "code_interpreter",
    "image_generation",
    "local_shell",
    "shell",
    "custom",
    "apply_patch",
];

/// An unknown tool type is refused.
/// <https://platform.openai.com/docs/api-reference/responses/create> (`tools`).
pub(crate) fn responses_tool_types_are_known(request: &Value) -> Result<(), Violation> {
    for (i, tool) in array(request, "tools").iter().enumerate() {
        let kind = str_at(tool, "type");
        if !RESPONSES_TOOL_TYPES.contains(&kind) {
            return Err(Violation::new(format!(
                "Invalid value: '{kind}'. Supported values are: {}.",
                RESPONSES_TOOL_TYPES
                    .iter()
                    .map(|t| format!("'{t}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .code("invalid_value")
            .param(format!("tools[{i}].type")));
        }
    }
    Ok(())
}

/// A `web_search_call` input item carries its `id`, `status` and `action`, all required.
/// <https://platform.openai.com/docs/api-reference/responses/create> (`input`, "Web search
/// tool call").
pub(crate) fn web_search_calls_go_back_whole(request: &Value) -> Result<(), Violation> {
    for (i, item) in array(request, "input").iter().enumerate() {
        if str_at(item, "type") != "web_search_call" {
            continue;
        }
        if let Some(field) = ["id", "status", "action"]
            .into_iter()
            .find(|field| item.get(*field).is_none_or(Value::is_null))
        {
            return Err(Violation::new(format!(
                "Missing required parameter: 'input[{i}].{field}'."
            ))
            .code("missing_required_parameter")
            .param(format!("input[{i}].{field}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(content: Value) -> Value {
        json!({"messages": [{"role": "user", "content": "hi"},
                            {"role": "assistant", "content": content}]})
    }

    fn call() -> Value {
        json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
               "input": {"query": "q"}})
    }

    fn result(encrypted: &str) -> Value {
        json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
            {"type": "web_search_result", "url": "https://a/", "title": "A",
             "encrypted_content": encrypted}]})
    }

    #[test]
    fn a_search_result_goes_back_after_its_call_and_unchanged() {
        let good = encrypted_content("https://a/");
        assert!(super::super::check(ANTHROPIC, &turn(json!([call(), result(&good)]))).is_ok());
        let alone = turn(json!([result(&good)]));
        assert!(search_results_follow_their_call(&alone).is_err());
        let before = turn(json!([result(&good), call()]));
        assert!(search_results_follow_their_call(&before).is_err());
        let edited = turn(json!([call(), result("mock-enc-0")]));
        let error = search_results_are_unmodified(&edited).unwrap_err();
        assert!(error.message.contains("content.1.content.0"), "{error:?}");
    }

    #[test]
    fn unknown_tool_types_are_refused() {
        let tools = |tools: Value| json!({"tools": tools});
        let search = tools(
            json!([{"type": "web_search_20250305", "name": "web_search"},
                                  {"name": "f", "input_schema": {"type": "object"}}]),
        );
        assert!(anthropic_tool_types_are_known(&search).is_ok());
        let openai_type = tools(json!([{"type": "web_search", "name": "web_search"}]));
        assert!(anthropic_tool_types_are_known(&openai_type).is_err());
        let renamed = tools(json!([{"type": "web_search_20250305", "name": "search"}]));
        assert!(anthropic_tool_types_are_known(&renamed).is_err());
        assert!(responses_tool_types_are_known(&tools(json!([{"type": "web_search"}]))).is_ok());
        let anthropic_type = tools(json!([{"type": "web_search_20250305"}]));
        let error = responses_tool_types_are_known(&anthropic_type).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("tools[0].type"));
    }

    #[test]
    fn a_web_search_call_goes_back_whole() {
        let item = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
                          "action": {"type": "search", "query": "q"}});
        assert!(web_search_calls_go_back_whole(&json!({"input": [item]})).is_ok());
        let by_id = json!({"input": [{"type": "web_search_call", "id": "ws_1"}]});
        let error = web_search_calls_go_back_whole(&by_id).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("input[0].status"));
    }
}
