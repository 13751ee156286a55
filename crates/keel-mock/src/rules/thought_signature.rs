//! Gemini's thought signatures on its OpenAI-compatible endpoint.
//!
//! A Gemini model's reply that calls functions carries a signature on its first call, in
//! `extra_content.google.thought_signature`; Gemini 3 refuses a request whose current turn
//! (everything after the last user message) sends such a call back without it, unchanged.
//! <https://ai.google.dev/gemini-api/docs/thought-signatures> ("Function calling": strict
//! validation of the current turn, a 400 otherwise; in parallel calls only the first has a
//! signature), <https://ai.google.dev/gemini-api/docs/openai> ("Thought signatures").
//!
//! The mock's signature is a function of the call's id, so the rule needs no memory.

use serde_json::{Value, json};

use super::{Violation, array, str_at};

/// The `extra_content` of call number `position` of a reply from `model`, if Gemini would
/// sign it.
pub(crate) fn extra_content(model: &str, call_id: &str, position: usize) -> Option<Value> {
    (model.starts_with("gemini-") && position == 0)
        .then(|| json!({"google": {"thought_signature": signature(call_id)}}))
}

pub(crate) fn signature(call_id: &str) -> String {
    format!("mock-thought-signature-{call_id}")
}

/// Gemini 3 models: the first call of every assistant message of the current turn comes
/// back with the signature it was issued.
pub(crate) fn signatures_come_back(request: &Value) -> Result<(), Violation> {
    if !str_at(request, "model").starts_with("gemini-3") {
        return Ok(());
    }
    let messages = array(request, "messages");
    let turn_start = messages
        .iter()
        .rposition(|m| str_at(m, "role") == "user")
        .map_or(0, |i| i + 1);
    for (i, message) in messages.iter().enumerate().skip(turn_start) {
        if str_at(message, "role") != "assistant" {
            continue;
        }
        let Some(first) = array(message, "tool_calls").first() else {
            continue;
        };
        let sent = first
            .pointer("/extra_content/google/thought_signature")
            .and_then(Value::as_str);
        match sent {
            Some(sent) if sent == signature(str_at(first, "id")) => {}
            Some(_) => return Err(Violation::new("Corrupted thought signature.")),
            None => {
                return Err(Violation::new(format!(
                    "Function call is missing a thought_signature in functionCall parts. This \
                     is required for tools to work correctly, and missing thought_signature \
                     may lead to degraded model performance. Additional data, function call \
                     `default_api:{}` , position {}. Please refer to \
                     https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    first
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    i + 1,
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(model: &str, extra: Option<Value>) -> Value {
        let mut call = json!({"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": "{}"}});
        if let Some(extra) = extra {
            call["extra_content"] = extra;
        }
        json!({"model": model, "messages": [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "alpha"},
        ]})
    }

    #[test]
    fn gemini_3_wants_the_first_calls_signature_back_unchanged() {
        let issued = extra_content("gemini-3-pro-preview", "c1", 0);
        assert!(signatures_come_back(&request("gemini-3-pro-preview", issued)).is_ok());
        let error = signatures_come_back(&request("gemini-3-flash", None)).unwrap_err();
        assert!(
            error
                .message
                .starts_with("Function call is missing a thought_signature")
                && error.message.contains("default_api:read_file"),
            "{error:?}"
        );
        let forged = json!({"google": {"thought_signature": "other"}});
        assert!(signatures_come_back(&request("gemini-3-flash", Some(forged))).is_err());
        // Gemini 2.5 signs calls too but does not insist.
        assert!(signatures_come_back(&request("gemini-2.5-flash", None)).is_ok());
        assert!(extra_content("gemini-2.5-flash", "c1", 0).is_some());
        assert!(extra_content("gemini-3-flash", "c2", 1).is_none());
        assert!(extra_content("gpt-5", "c1", 0).is_none());
    }

    #[test]
    fn earlier_turns_are_not_checked() {
        let mut earlier = request("gemini-3-flash", None);
        earlier["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": "thanks"}));
        assert!(signatures_come_back(&earlier).is_ok());
    }
}
