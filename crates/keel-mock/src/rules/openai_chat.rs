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
    reasoning_models_take_max_completion_tokens,
    super::thought_signature::signatures_come_back,
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

/// OpenAI's reasoning models (o-series, gpt-5) refuse the deprecated `max_tokens`, on
/// OpenAI, on Azure OpenAI and behind any gateway alike.
/// <https://platform.openai.com/docs/api-reference/chat/create> (`max_tokens`: "now
/// deprecated in favor of `max_completion_tokens`, and is not compatible with o-series
/// models"); <https://platform.openai.com/docs/guides/reasoning>.
pub(crate) fn reasoning_models_take_max_completion_tokens(
    request: &Value,
) -> Result<(), Violation> {
    if request.get("max_tokens").is_none() || !openai_reasoning_model(str_at(request, "model")) {
        return Ok(());
    }
    Err(Violation::new(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use \
         'max_completion_tokens' instead.",
    )
    .code("unsupported_parameter")
    .param("max_tokens"))
}

/// o1, o3, o4-mini, gpt-5, gpt-5-mini, ... (a deployment named after its model on Azure).
fn openai_reasoning_model(model: &str) -> bool {
    let mut chars = model.chars();
    model.starts_with("gpt-5")
        || (chars.next() == Some('o') && chars.next().is_some_and(|c| c.is_ascii_digit()))
}

/// Cerebras refuses `reasoning_content` in any assistant message (it returns reasoning as
/// `reasoning`), with every model. Its API reference lists the fields an assistant message
/// takes, and `reasoning_content` is not one
/// (<https://inference-docs.cerebras.ai/api-reference/chat-completions>,
/// <https://inference-docs.cerebras.ai/capabilities/reasoning>); the error is the one its
/// API answers.
pub(crate) fn reasoning_content_is_unsupported(request: &Value) -> Result<(), Violation> {
    let refused: Vec<String> = array(request, "messages")
        .iter()
        .enumerate()
        .filter(|(_, m)| str_at(m, "role") == "assistant" && m.get("reasoning_content").is_some())
        .map(|(i, _)| {
            format!(
                "messages.{i}.assistant.reasoning_content: property \
                 'messages.{i}.assistant.reasoning_content' is unsupported"
            )
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(Violation::new(refused.join("\n"))
        .code("wrong_api_format")
        .param("validation_error"))
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

    #[test]
    fn reasoning_models_refuse_max_tokens_with_openais_message() {
        for model in ["gpt-5", "gpt-5-mini", "o3", "o4-mini", "o1"] {
            let error =
                check_all(&json!({"model": model, "max_tokens": 10, "messages": []})).unwrap_err();
            assert_eq!(
                error.message,
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
            );
            assert_eq!(error.param.as_deref(), Some("max_tokens"));
            let newer = json!({"model": model, "max_completion_tokens": 10, "messages": []});
            assert!(check_all(&newer).is_ok(), "{model}");
        }
        for model in ["gpt-4.1", "deepseek-chat", "openai-proxy", "mock"] {
            let older = json!({"model": model, "max_tokens": 10, "messages": []});
            assert!(check_all(&older).is_ok(), "{model}");
        }
    }

    #[test]
    fn cerebras_refuses_reasoning_content_in_any_assistant_message() {
        let request = json!({"model": "gpt-oss-120b", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "reasoning_content": "greet"},
            {"role": "user", "content": "again"},
        ]});
        let error = reasoning_content_is_unsupported(&request).unwrap_err();
        assert_eq!(
            error.message,
            "messages.1.assistant.reasoning_content: property 'messages.1.assistant.reasoning_content' is unsupported"
        );
        assert_eq!(error.code, Some("wrong_api_format"));
        let plain = json!({"messages": [{"role": "assistant", "content": "hello"}]});
        assert!(reasoning_content_is_unsupported(&plain).is_ok());
    }

    fn check_all(request: &Value) -> Result<(), Violation> {
        super::super::check(RULES, request)
    }
}
