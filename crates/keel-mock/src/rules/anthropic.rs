//! Rules of the Anthropic Messages API over the `messages` of a request.

use std::collections::HashSet;

use serde_json::Value;

use super::{Rule, Violation, array, str_at};

/// Every Messages rule, in the order the server checks them.
pub(crate) const RULES: &[Rule] = &[
    tool_use_ids_are_unique,
    tool_uses_are_answered_next,
    tool_results_answer_the_previous_turn,
    server_tool_uses_have_results,
    no_prefill_on_claude_4_6_and_later,
];

fn blocks(message: &Value) -> &[Value] {
    array(message, "content")
}

/// Every `tool_use` id is unique within a request.
/// <https://docs.anthropic.com/en/api/messages> (`tool_use` content block `id`).
pub(crate) fn tool_use_ids_are_unique(request: &Value) -> Result<(), Violation> {
    let mut seen = HashSet::new();
    for (i, message) in array(request, "messages").iter().enumerate() {
        for (j, block) in blocks(message).iter().enumerate() {
            let kind = str_at(block, "type");
            if (kind == "tool_use" || kind == "server_tool_use")
                && !seen.insert(str_at(block, "id"))
            {
                return Err(Violation::new(format!(
                    "messages.{i}.content.{j}: `tool_use` ids must be unique"
                )));
            }
        }
    }
    Ok(())
}

/// Each `tool_use` block needs a `tool_result` block in the very next (user) message.
/// <https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use>
/// ("Handling results from client tools").
pub(crate) fn tool_uses_are_answered_next(request: &Value) -> Result<(), Violation> {
    let messages = array(request, "messages");
    for (i, message) in messages.iter().enumerate() {
        if str_at(message, "role") != "assistant" {
            continue;
        }
        let uses: Vec<&str> = blocks(message)
            .iter()
            .filter(|b| str_at(b, "type") == "tool_use")
            .map(|b| str_at(b, "id"))
            .collect();
        // A final assistant turn is a prefill; nothing can answer it yet.
        let Some(next) = messages.get(i + 1) else {
            continue;
        };
        let results: HashSet<&str> = blocks(next)
            .iter()
            .filter(|b| str_at(b, "type") == "tool_result")
            .map(|b| str_at(b, "tool_use_id"))
            .collect();
        let missing: Vec<&str> = uses
            .into_iter()
            .filter(|id| !results.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(Violation::new(format!(
                "messages.{}: `tool_use` ids were found without `tool_result` blocks \
                 immediately after: {}. Each `tool_use` block must have a corresponding \
                 `tool_result` block in the next message.",
                i + 1,
                missing.join(", ")
            )));
        }
    }
    Ok(())
}

/// Each `tool_result` block answers a `tool_use` block of the message right before.
/// <https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use>
/// ("Handling results from client tools").
pub(crate) fn tool_results_answer_the_previous_turn(request: &Value) -> Result<(), Violation> {
    let messages = array(request, "messages");
    for (i, message) in messages.iter().enumerate() {
        let uses: HashSet<&str> = i
            .checked_sub(1)
            .and_then(|p| messages.get(p))
            .filter(|p| str_at(p, "role") == "assistant")
            .map(|p| {
                blocks(p)
                    .iter()
                    .filter(|b| str_at(b, "type") == "tool_use")
                    .map(|b| str_at(b, "id"))
                    .collect()
            })
            .unwrap_or_default();
        for (j, block) in blocks(message).iter().enumerate() {
            if str_at(block, "type") == "tool_result"
                && !uses.contains(str_at(block, "tool_use_id"))
            {
                return Err(Violation::new(format!(
                    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` \
                     blocks: {}. Each `tool_result` block must have a corresponding `tool_use` \
                     block in the previous message.",
                    str_at(block, "tool_use_id")
                )));
            }
        }
    }
    Ok(())
}

/// A tool the server ran (`server_tool_use`) is followed by its result block in the same
/// assistant turn; a client-side `tool_result` cannot stand in for it.
/// <https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/web-search-tool>
/// ("Response": `server_tool_use` and `web_search_tool_result`).
pub(crate) fn server_tool_uses_have_results(request: &Value) -> Result<(), Violation> {
    for (i, message) in array(request, "messages").iter().enumerate() {
        let content = blocks(message);
        let results: HashSet<&str> = content
            .iter()
            .filter(|b| str_at(b, "type").ends_with("_tool_result"))
            .map(|b| str_at(b, "tool_use_id"))
            .collect();
        for (j, block) in content.iter().enumerate() {
            if str_at(block, "type") == "server_tool_use" && !results.contains(str_at(block, "id"))
            {
                return Err(Violation::new(format!(
                    "messages.{i}.content.{j}: `server_tool_use` block with id `{}` was found \
                     without a corresponding result block",
                    str_at(block, "id")
                )));
            }
        }
    }
    Ok(())
}

/// Claude 4.6 and later refuse a request that ends in an assistant turn (prefill), with
/// the message below. Anthropic's migration guide
/// (<https://platform.claude.com/docs/en/about-claude/models/migration-guide>): "Prefilling
/// assistant messages returns a 400 error on Claude 4.6 models." A turn the server paused
/// (one holding `server_tool_use`) still goes back as it is: that is how a paused turn is
/// carried on (<https://platform.claude.com/docs/en/agents-and-tools/tool-use/server-tools>,
/// "The server-side loop and pause_turn").
pub(crate) fn no_prefill_on_claude_4_6_and_later(request: &Value) -> Result<(), Violation> {
    if !keel_core::claude::refuses_prefill(str_at(request, "model")) {
        return Ok(());
    }
    let Some(last) = array(request, "messages").last() else {
        return Ok(());
    };
    let paused = blocks(last)
        .iter()
        .any(|b| str_at(b, "type") == "server_tool_use");
    if str_at(last, "role") != "assistant" || paused {
        return Ok(());
    }
    Err(Violation::new(
        "This model does not support assistant message prefill. The conversation must end \
         with a user message.",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_use(id: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": "f", "input": {}})
    }

    fn result(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})
    }

    #[test]
    fn tool_uses_and_results_pair_across_adjacent_turns() {
        let good = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [tool_use("a")]},
            {"role": "user", "content": [result("a")]},
        ]});
        assert!(super::super::check(RULES, &good).is_ok());
        let missing = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [tool_use("a"), tool_use("b")]},
            {"role": "user", "content": [result("a")]},
        ]});
        let error = tool_uses_are_answered_next(&missing).unwrap_err();
        assert!(error.message.contains("immediately after: b"), "{error:?}");
        let stray = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            {"role": "user", "content": [result("a")]},
        ]});
        assert!(tool_results_answer_the_previous_turn(&stray).is_err());
    }

    #[test]
    fn tool_use_ids_are_unique_across_the_conversation() {
        let twice = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [tool_use("call_0")]},
            {"role": "user", "content": [result("call_0"), {"type": "text", "text": "again"}]},
            {"role": "assistant", "content": [tool_use("call_0")]},
            {"role": "user", "content": [result("call_0")]},
        ]});
        assert!(tool_use_ids_are_unique(&twice).is_err());
    }

    #[test]
    fn a_server_tool_use_needs_its_result_block_not_a_client_result() {
        let server = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}});
        let interrupted = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [server]},
            {"role": "user", "content": [result("srvtoolu_1")]},
        ]});
        assert!(server_tool_uses_have_results(&interrupted).is_err());
        assert!(tool_results_answer_the_previous_turn(&interrupted).is_err());
        let done = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [server, {"type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1", "content": []}]},
        ]});
        assert!(super::super::check(RULES, &done).is_ok());
    }

    #[test]
    fn claude_4_6_and_later_refuse_a_final_assistant_turn() {
        let request = |model: &str, last: Value| json!({"model": model, "messages": [{"role": "user", "content": "hi"}, last]});
        let prefill = json!({"role": "assistant", "content": [{"type": "text", "text": "Roses"}]});
        let refused =
            no_prefill_on_claude_4_6_and_later(&request("claude-sonnet-4-6", prefill.clone()))
                .unwrap_err();
        assert!(
            refused
                .message
                .contains("does not support assistant message prefill"),
            "{refused:?}"
        );
        assert!(
            no_prefill_on_claude_4_6_and_later(&request("claude-opus-4-7", prefill.clone()))
                .is_err()
        );
        assert!(
            no_prefill_on_claude_4_6_and_later(&request("claude-sonnet-4-5", prefill.clone()))
                .is_ok()
        );
        assert!(no_prefill_on_claude_4_6_and_later(&request("mock", prefill)).is_ok());
        let instruction = json!({"role": "user", "content": "continue"});
        assert!(
            no_prefill_on_claude_4_6_and_later(&request("claude-sonnet-4-6", instruction)).is_ok()
        );
        let paused = json!({"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        ]});
        assert!(no_prefill_on_claude_4_6_and_later(&request("claude-sonnet-4-6", paused)).is_ok());
    }
}
