//! Rules of the OpenAI Responses API over the `input` items of a request.

use std::collections::HashSet;

use serde_json::Value;

use super::{Rule, Violation, array, foreign_assistant_part, str_at};

/// Every Responses rule, in the order the server checks them.
pub(crate) const RULES: &[Rule] = &[
    outputs_answer_a_call,
    calls_have_outputs,
    reasoning_is_followed_by_its_item,
    assistant_parts_are_output_text_or_refusal,
];

/// Items the client runs itself: each needs an output item of the matching type.
/// <https://platform.openai.com/docs/api-reference/responses/create> (`input`: function tool
/// call, computer tool call, local shell call, custom tool call, and their outputs).
const CLIENT_CALLS: &[&str] = &[
    "function_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "custom_tool_call",
];

fn input(request: &Value) -> &[Value] {
    array(request, "input")
}

fn kind(item: &Value) -> &str {
    match str_at(item, "type") {
        "" => "message",
        kind => kind,
    }
}

/// An output item (`function_call_output`, ...) must answer a call of the same request;
/// with `previous_response_id` the call may live in the stored response instead.
/// <https://platform.openai.com/docs/guides/function-calling> ("Handling function calls").
pub(crate) fn outputs_answer_a_call(request: &Value) -> Result<(), Violation> {
    if request
        .get("previous_response_id")
        .is_some_and(Value::is_string)
    {
        return Ok(());
    }
    let mut calls: HashSet<(&str, &str)> = HashSet::new();
    for item in input(request) {
        let kind = kind(item);
        if CLIENT_CALLS.contains(&kind) {
            calls.insert((kind, str_at(item, "call_id")));
        } else if let Some(call_kind) = kind.strip_suffix("_output")
            && CLIENT_CALLS.contains(&call_kind)
        {
            let id = str_at(item, "call_id");
            if !calls.contains(&(call_kind, id)) {
                return Err(Violation::new(format!(
                    "No tool call found for function call output with call_id {id}."
                ))
                .param("input"));
            }
        }
    }
    Ok(())
}

/// A call the client runs must be answered by its output item somewhere after it.
/// <https://platform.openai.com/docs/guides/function-calling> ("Handling function calls").
pub(crate) fn calls_have_outputs(request: &Value) -> Result<(), Violation> {
    let items = input(request);
    for (i, item) in items.iter().enumerate() {
        let kind = kind(item);
        if !CLIENT_CALLS.contains(&kind) {
            continue;
        }
        let id = str_at(item, "call_id");
        let output = format!("{kind}_output");
        let answered = items[i + 1..]
            .iter()
            .any(|later| self::kind(later) == output && str_at(later, "call_id") == id);
        if !answered {
            return Err(
                Violation::new(format!("No tool output found for function call {id}."))
                    .param("input"),
            );
        }
    }
    Ok(())
}

/// A reasoning item sent back must be followed by the item it produced (a `message` or a
/// call), identified by its `id`: the API pairs them by id, and an assistant message sent
/// without one cannot be paired.
/// <https://platform.openai.com/docs/guides/reasoning> ("Keeping reasoning items in context"),
/// <https://platform.openai.com/docs/api-reference/responses/create> (`input`, reasoning item).
pub(crate) fn reasoning_is_followed_by_its_item(request: &Value) -> Result<(), Violation> {
    let items = input(request);
    for (i, item) in items.iter().enumerate() {
        if kind(item) != "reasoning" {
            continue;
        }
        let followed = items.get(i + 1).is_some_and(|next| {
            kind(next) != "reasoning" && !str_at(next, "id").is_empty() && {
                let next_kind = kind(next);
                next_kind == "message" || next_kind.ends_with("_call")
            }
        });
        if !followed {
            return Err(Violation::new(format!(
                "Item '{}' of type 'reasoning' was provided without its required following item.",
                str_at(item, "id")
            ))
            .param("input"));
        }
    }
    Ok(())
}

/// An assistant message's content parts are `output_text` or `refusal`: what the model
/// said goes back as it said it, never as input parts.
/// <https://platform.openai.com/docs/api-reference/responses/create> (`input`, output
/// message, `content`).
pub(crate) fn assistant_parts_are_output_text_or_refusal(request: &Value) -> Result<(), Violation> {
    match foreign_assistant_part(input(request), &["output_text", "refusal"]) {
        Some((i, j, kind)) => Err(Violation::new(format!(
            "Invalid value: '{kind}'. Supported values are: 'output_text' and 'refusal'."
        ))
        .code("invalid_value")
        .param(format!("input[{i}].content[{j}]"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outputs_and_calls_pair_up() {
        let orphan_output = json!({"input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
        ]});
        assert!(outputs_answer_a_call(&orphan_output).is_err());
        let chained = json!({"previous_response_id": "resp_1", "input": [
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
        ]});
        assert!(outputs_answer_a_call(&chained).is_ok());
        let unanswered = json!({"input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        ]});
        assert!(calls_have_outputs(&unanswered).is_err());
        let fake = json!({"input": [
            {"type": "computer_call", "id": "cu_1", "call_id": "c1", "action": {}},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
        ]});
        assert!(outputs_answer_a_call(&fake).is_err());
        assert!(calls_have_outputs(&fake).is_err());
        let paired = json!({"input": [
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
        ]});
        assert!(super::super::check(RULES, &paired).is_ok());
    }

    #[test]
    fn assistant_content_is_output_text_or_refusal() {
        let refused = json!({"input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
        ]});
        assert!(super::super::check(RULES, &refused).is_ok());
        let as_input = json!({"input": [
            {"role": "assistant", "content": [{"type": "input_text", "text": "No."}]},
        ]});
        let error = assistant_parts_are_output_text_or_refusal(&as_input).unwrap_err();
        assert!(error.message.contains("'input_text'"), "{error:?}");
    }

    #[test]
    fn a_reasoning_item_needs_its_following_item_by_id() {
        let reasoning =
            json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"});
        let anonymous = json!({"input": [reasoning, {"role": "assistant", "content": "hi"}]});
        let error = reasoning_is_followed_by_its_item(&anonymous).unwrap_err();
        assert!(error.message.contains("'rs_1'"), "{error:?}");
        let last = json!({"input": [reasoning]});
        assert!(reasoning_is_followed_by_its_item(&last).is_err());
        let message = json!({"input": [reasoning, {"type": "message", "id": "msg_1", "role": "assistant",
            "content": [{"type": "output_text", "text": "hi"}]}]});
        assert!(reasoning_is_followed_by_its_item(&message).is_ok());
        let call = json!({"input": [reasoning, {"type": "function_call", "id": "fc_1", "call_id": "c",
            "name": "f", "arguments": "{}"}]});
        assert!(reasoning_is_followed_by_its_item(&call).is_ok());
    }
}
