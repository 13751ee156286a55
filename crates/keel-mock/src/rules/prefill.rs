//! Chat Completions servers that continue a partial assistant reply natively.
//!
//! * vLLM, extra chat parameters
//!   (https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html#chat-api_1):
//!   `continue_final_message` continues the final message, which must be the assistant's,
//!   and "cannot be used at the same time as `add_generation_prompt`" — which defaults to
//!   true, so it must be sent as false.
//! * DeepSeek, chat prefix completion
//!   (https://api-docs.deepseek.com/guides/chat_prefix_completion): the last message must be
//!   the assistant's with `prefix: true`; no other message may carry `prefix`.

use serde_json::Value;

use super::Violation;

/// Checks a Chat Completions request's continuation markers.
pub(crate) fn check(request: &Value) -> Result<(), Violation> {
    let messages = request["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let last_is_assistant = messages.last().is_some_and(|m| m["role"] == "assistant");
    if request["continue_final_message"] == true {
        if request["add_generation_prompt"] != false {
            return Err(Violation::new(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            ));
        }
        if !last_is_assistant {
            return Err(Violation::new(
                "continue_final_message is set but the final message is not the assistant's",
            ));
        }
    }
    let last = messages.len().saturating_sub(1);
    for (i, message) in messages.iter().enumerate() {
        if message["prefix"] == true && (i != last || message["role"] != "assistant") {
            return Err(Violation::new(
                "The last message of messages must be the assistant's when `prefix` is set",
            )
            .param("messages"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn continuing(extra: Value) -> Value {
        let mut request = json!({"messages": [
            {"role": "user", "content": "write"},
            {"role": "assistant", "content": "Roses are", "prefix": true},
        ]});
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        request
    }

    #[test]
    fn vllm_continues_the_final_message_only_without_a_generation_prompt() {
        let ok =
            continuing(json!({"continue_final_message": true, "add_generation_prompt": false}));
        assert!(check(&ok).is_ok());
        let both = continuing(json!({"continue_final_message": true}));
        assert!(
            check(&both)
                .unwrap_err()
                .message
                .contains("Cannot set both")
        );
        let user_last = json!({
            "continue_final_message": true, "add_generation_prompt": false,
            "messages": [{"role": "user", "content": "write"}],
        });
        assert!(check(&user_last).is_err());
    }

    #[test]
    fn deepseek_prefix_marks_only_the_last_assistant_message() {
        assert!(check(&continuing(json!({}))).is_ok());
        let early = json!({"messages": [
            {"role": "assistant", "content": "a", "prefix": true},
            {"role": "user", "content": "b"},
        ]});
        assert!(check(&early).is_err());
    }
}
