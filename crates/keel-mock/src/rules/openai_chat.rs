//! Rules of OpenAI Chat Completions and the servers that speak it.

use std::collections::HashSet;

use serde_json::Value;

use super::{Rule, Violation, array, foreign_assistant_part, str_at};

/// Every Chat Completions rule, in the order the server checks them.
pub(crate) const RULES: &[Rule] = &[
    tool_calls_are_answered,
    tool_messages_answer_a_call,
    reasoning_content_is_passed_back,
    assistant_parts_are_text_or_refusal,
];

/// An assistant message with `tool_calls` must be followed by one `role: tool` message per
/// call id before any other message.
/// <https://platform.openai.com/docs/guides/function-calling> ("Handling function calls"),
/// <https://platform.openai.com/docs/api-reference/chat/create> (`messages`).
pub(crate) fn tool_calls_are_answered(request: &Value) -> Result<(), Violation> {
    let messages = array(request, "messages");
    for (i, message) in messages.iter().enumerate() {
        let calls = array(message, "tool_calls");
        if str_at(message, "role") != "assistant" || calls.is_empty() {
            continue;
        }
        let answered: HashSet<&str> = messages[i + 1..]
            .iter()
            .take_while(|m| str_at(m, "role") == "tool")
            .map(|m| str_at(m, "tool_call_id"))
            .collect();
        let missing: Vec<&str> = calls
            .iter()
            .map(|c| str_at(c, "id"))
            .filter(|id| !answered.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(Violation::new(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {}",
                missing.join(", ")
            ))
            .param(format!("messages.[{}].role", i + 1)));
        }
    }
    Ok(())
}

/// A `role: tool` message must answer a call of the assistant message before it (other tool
/// messages may come between).
/// <https://platform.openai.com/docs/api-reference/chat/create> (`messages`, tool message).
pub(crate) fn tool_messages_answer_a_call(request: &Value) -> Result<(), Violation> {
    let messages = array(request, "messages");
    for (i, message) in messages.iter().enumerate() {
        if str_at(message, "role") != "tool" {
            continue;
        }
        let owner = messages[..i]
            .iter()
            .rev()
            .find(|m| str_at(m, "role") != "tool");
        let id = str_at(message, "tool_call_id");
        let answers = owner.is_some_and(|m| {
            str_at(m, "role") == "assistant"
                && array(m, "tool_calls").iter().any(|c| str_at(c, "id") == id)
        });
        if !answers {
            return Err(Violation::new(
                "Invalid parameter: messages with role 'tool' must be a response to a \
                 preceeding message with 'tool_calls'.",
            )
            .param(format!("messages.[{i}].role")));
        }
    }
    Ok(())
}

/// DeepSeek in thinking mode (and vLLM / SGLang serving such models): an assistant message
/// that called tools must carry its `reasoning_content` in every later request.
/// <https://api-docs.deepseek.com/guides/thinking_mode> ("Tool Calls").
pub(crate) fn reasoning_content_is_passed_back(request: &Value) -> Result<(), Violation> {
    if !thinking_mode(request) {
        return Ok(());
    }
    let missing = array(request, "messages").iter().any(|m| {
        str_at(m, "role") == "assistant"
            && !array(m, "tool_calls").is_empty()
            && !m.get("reasoning_content").is_some_and(Value::is_string)
    });
    if missing {
        return Err(Violation::new(
            "The reasoning_content in the thinking mode must be passed back to the API.",
        ));
    }
    Ok(())
}

/// An assistant message's content parts are `text` or `refusal`, nothing else.
/// <https://platform.openai.com/docs/api-reference/chat/create> (`messages`, assistant
/// message, `content`: array of content parts).
pub(crate) fn assistant_parts_are_text_or_refusal(request: &Value) -> Result<(), Violation> {
    match foreign_assistant_part(array(request, "messages"), &["text", "refusal"]) {
        Some((i, j, kind)) => Err(Violation::new(format!(
            "Invalid value: '{kind}'. Supported values are: 'text' and 'refusal'."
        ))
        .code("invalid_value")
        .param(format!("messages[{i}].content[{j}].type"))),
        None => Ok(()),
    }
}

/// Whether a request runs in DeepSeek's thinking mode: asked for with `thinking`, or the
/// default of DeepSeek's reasoning models.
fn thinking_mode(request: &Value) -> bool {
    match request.pointer("/thinking/type").and_then(Value::as_str) {
        Some(kind) => kind == "enabled",
        None => {
            let model = str_at(request, "model");
            model.starts_with("deepseek-reasoner") || model.starts_with("deepseek-v4")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
    }

    #[test]
    fn a_tool_call_needs_its_tool_message_before_anything_else() {
        let unanswered = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "user", "content": "next"},
        ]});
        let error = tool_calls_are_answered(&unanswered).unwrap_err();
        assert!(error.message.ends_with("response messages: b"), "{error:?}");
        let answered = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
        ]});
        assert!(check_all(&answered).is_ok());
    }

    #[test]
    fn a_tool_message_must_follow_its_call() {
        let stray = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
        ]});
        assert!(tool_messages_answer_a_call(&stray).is_err());
        let wrong_id = json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "z", "content": "1"},
        ]});
        assert!(tool_messages_answer_a_call(&wrong_id).is_err());
    }

    #[test]
    fn thinking_mode_tool_turns_need_their_reasoning_content() {
        let turn = |reasoning: Option<&str>| {
            let mut assistant =
                json!({"role": "assistant", "content": null, "tool_calls": [call("a")]});
            if let Some(r) = reasoning {
                assistant["reasoning_content"] = json!(r);
            }
            vec![
                json!({"role": "user", "content": "hi"}),
                assistant,
                json!({"role": "tool", "tool_call_id": "a", "content": "1"}),
            ]
        };
        let without = json!({"model": "deepseek-reasoner", "messages": turn(None)});
        assert!(reasoning_content_is_passed_back(&without).is_err());
        let with = json!({"model": "deepseek-reasoner", "messages": turn(Some("think"))});
        assert!(reasoning_content_is_passed_back(&with).is_ok());
        let other = json!({"model": "gpt-4.1", "messages": turn(None)});
        assert!(reasoning_content_is_passed_back(&other).is_ok());
        let vllm =
            json!({"model": "qwen3", "thinking": {"type": "enabled"}, "messages": turn(None)});
        assert!(reasoning_content_is_passed_back(&vllm).is_err());
        let off = json!({"model": "deepseek-v4-pro", "thinking": {"type": "disabled"}, "messages": turn(None)});
        assert!(reasoning_content_is_passed_back(&off).is_ok());
    }

    #[test]
    fn assistant_content_parts_are_text_or_refusal() {
        let refused = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Well"},
                                              {"type": "refusal", "refusal": "No."}]},
        ]});
        assert!(check_all(&refused).is_ok());
        let image = json!({"messages": [
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        ]});
        let error = assistant_parts_are_text_or_refusal(&image).unwrap_err();
        assert!(error.message.contains("'image_url'"), "{error:?}");
    }

    fn check_all(request: &Value) -> Result<(), Violation> {
        super::super::check(RULES, request)
    }
}
