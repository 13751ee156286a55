//! Anthropic Messages: extended thinking blocks and their signatures.
//!
//! From the extended-thinking guide
//! (https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking#preserving-thinking-blocks)
//! and the Messages API reference (https://docs.anthropic.com/en/api/messages):
//!
//! * With `thinking` enabled, the final assistant message — the one a tool-use loop is
//!   continuing (the turn before the last user turn of `tool_result`s), or a trailing
//!   assistant turn — must start with a `thinking` or `redacted_thinking` block.
//! * A `thinking` block sent back must carry the `signature` the API returned with it,
//!   unchanged: the API checks that the thinking text is its own.
//!
//! The mock's signature is a hash of the thinking text, so a block whose text or signature
//! was altered, or whose signature is missing, is refused like the real API refuses it.

use serde_json::Value;

use super::Violation;

/// The signature the mock gives a thinking block with this text.
pub(crate) fn sign(thinking: &str) -> String {
    format!("mock-sig-{:016x}", stable_hash(thinking))
}

/// FNV-1a: stable across processes and builds, unlike the std hasher.
pub(crate) fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Checks a Messages request's thinking blocks.
pub(crate) fn check(request: &Value) -> Result<(), Violation> {
    let messages = request["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for (i, message) in messages.iter().enumerate() {
        if message["role"] != "assistant" {
            continue;
        }
        for (j, block) in blocks(message).iter().enumerate() {
            if block["type"] != "thinking" {
                continue;
            }
            let Some(signature) = block["signature"].as_str() else {
                return Err(Violation::new(format!(
                    "messages.{i}.content.{j}.thinking.signature: Field required"
                )));
            };
            if signature != sign(block["thinking"].as_str().unwrap_or_default()) {
                return Err(Violation::new(format!(
                    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )));
            }
        }
    }
    if request["thinking"]["type"] != "enabled" {
        return Ok(());
    }
    let Some(index) = final_assistant(messages) else {
        return Ok(());
    };
    let first = blocks(&messages[index])
        .first()
        .cloned()
        .unwrap_or_default();
    let kind = first["type"].as_str().unwrap_or("nothing");
    if kind == "thinking" || kind == "redacted_thinking" {
        return Ok(());
    }
    Err(Violation::new(format!(
        "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found \
         `{kind}`. When `thinking` is enabled, a final `assistant` message must start with a \
         thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). \
         We recommend you include thinking blocks from previous turns. To avoid this \
         requirement, disable `thinking`."
    )))
}

/// The assistant message a request continues: a trailing one, or the one a trailing user
/// turn of tool results answers.
fn final_assistant(messages: &[Value]) -> Option<usize> {
    let last = messages.len().checked_sub(1)?;
    if messages[last]["role"] == "assistant" {
        return Some(last);
    }
    let answers_tools = blocks(&messages[last])
        .iter()
        .any(|b| b["type"] == "tool_result");
    (answers_tools && last > 0 && messages[last - 1]["role"] == "assistant").then(|| last - 1)
}

/// A message's content blocks (a string content is one text block).
fn blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::Array(blocks) => blocks.clone(),
        Value::String(text) => vec![serde_json::json!({"type": "text", "text": text})],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn thinking(text: &str) -> Value {
        json!({"type": "thinking", "thinking": text, "signature": sign(text)})
    }

    fn tool_loop(assistant: Vec<Value>) -> Value {
        json!({
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "read it"},
                {"role": "assistant", "content": assistant},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
                ]},
            ]
        })
    }

    fn tool_use() -> Value {
        json!({"type": "tool_use", "id": "t1", "name": "read_file", "input": {}})
    }

    #[test]
    fn a_tool_loop_with_thinking_must_send_the_signed_thinking_back_first() {
        assert!(check(&tool_loop(vec![thinking("hmm"), tool_use()])).is_ok());
        let violation = check(&tool_loop(vec![tool_use()])).unwrap_err();
        assert!(
            violation
                .message
                .contains("a final `assistant` message must start with a thinking block"),
            "{}",
            violation.message
        );
    }

    #[test]
    fn a_thinking_block_needs_its_own_signature() {
        let mut forged = thinking("hmm");
        forged["thinking"] = json!("something else");
        let violation = check(&tool_loop(vec![forged, tool_use()])).unwrap_err();
        assert!(violation.message.contains("Invalid `signature`"));
        let unsigned = json!({"type": "thinking", "thinking": "hmm"});
        let violation = check(&tool_loop(vec![unsigned, tool_use()])).unwrap_err();
        assert!(violation.message.ends_with("signature: Field required"));
    }

    #[test]
    fn without_thinking_or_a_tool_loop_no_thinking_block_is_required() {
        let mut request = tool_loop(vec![tool_use()]);
        request["thinking"] = Value::Null;
        assert!(check(&request).is_ok());
        let new_turn = json!({
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
                {"role": "user", "content": "again"},
            ]
        });
        assert!(check(&new_turn).is_ok());
    }

    #[test]
    fn signatures_depend_on_the_text() {
        assert_eq!(sign("a"), sign("a"));
        assert_ne!(sign("a"), sign("b"));
    }
}
