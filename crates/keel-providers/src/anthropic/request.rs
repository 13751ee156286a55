//! Builds the Messages API request body from a [`ModelCall`].
//!
//! Leading system messages become `system` blocks; the rest alternate user and assistant
//! turns, consecutive messages of one side merged, tool results sent as `tool_result`
//! blocks of a user turn. Thinking blocks go back with their signatures unchanged, and
//! messages marked as cache breakpoints carry `cache_control` on their last block.

use keel_core::{CallOptions, Message, ModelCall, PartKind, Role, Thinking, ToolChoice};
use serde_json::{Map, Value, json};

use crate::convert::{
    CONTINUE_PROMPT, UserInput, args_object, ends_with_assistant, metadata_for, tool_result_text,
    user_inputs,
};

/// The key of this protocol's data in a part's `provider_metadata`.
pub const METADATA_KEY: &str = "anthropic";

/// The output limit when the call sets none; the API requires one.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The JSON body of a streaming Messages request; a trailing assistant message is
/// continued as prefill.
pub fn build(call: &ModelCall, model: &str) -> Value {
    build_continuing(call, model, true)
}

/// [`build`], continuing a trailing assistant message as prefill only when `prefill`.
pub fn build_continuing(call: &ModelCall, model: &str, prefill: bool) -> Value {
    let o = &call.options;
    let budget = o.thinking_budget_tokens.filter(|b| *b > 0);
    let mut body = Map::new();
    body.insert("model".into(), json!(model));

    let leading = call
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let system: Vec<Value> = call.messages[..leading]
        .iter()
        .filter_map(|m| {
            let text = m.text();
            if text.is_empty() {
                return None;
            }
            let mut block = json!({"type": "text", "text": text});
            if m.cache_breakpoint {
                block["cache_control"] = ephemeral();
            }
            Some(block)
        })
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    // A paused turn always goes back as it is: that is how the API carries it on
    // (https://platform.claude.com/docs/en/agents-and-tools/tool-use/server-tools,
    // "The server-side loop and pause_turn").
    let prefill = continues_natively(prefill, o) || o.paused_turn;
    body.insert(
        "messages".into(),
        Value::Array(messages(&call.messages[leading..], prefill)),
    );

    let mut max_tokens = o.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if o.thinking == Some(Thinking::Adaptive) {
        // Adaptive thinking has no budget: the model decides, guided by the effort
        // (https://platform.claude.com/docs/en/build-with-claude/adaptive-thinking).
        body.insert("thinking".into(), json!({"type": "adaptive"}));
    } else if let Some(budget) = budget {
        // The thinking budget counts against max_tokens and must stay below it.
        if max_tokens <= budget {
            max_tokens = budget.saturating_add(max_tokens);
        }
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    // Thinking accepts neither a temperature nor a narrowed top_p.
    if !o.thinks() {
        if let Some(t) = o.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = o.top_p {
            body.insert("top_p".into(), json!(p));
        }
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    if let Some(effort) = o.effort {
        body.insert("output_config".into(), json!({"effort": effort}));
    }

    let tools: Vec<Value> = call
        .tools
        .iter()
        .map(|t| match &t.provider_tool {
            Some(kind) => json!({"type": kind, "name": t.name}),
            None => json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.parameters,
            }),
        })
        .collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        let choice = match o.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
            ToolChoice::Required => "any",
        };
        body.insert("tool_choice".into(), json!({"type": choice}));
    }
    body.insert("stream".into(), json!(true));
    for (k, v) in &o.provider_options {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

/// Whether a call with `options` continues a trailing assistant message as prefill, on a
/// model that takes prefill (`prefill`): never with thinking on, which does not allow it
/// (https://platform.claude.com/docs/en/build-with-claude/extended-thinking, "Feature
/// compatibility"); the reply is then continued by instruction.
pub(crate) fn continues_natively(prefill: bool, options: &CallOptions) -> bool {
    prefill && !options.thinks()
}

fn messages(messages: &[Message], prefill: bool) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages.iter().filter(|m| !is_refused_turn(m)) {
        let role = if message.role == Role::Assistant {
            "assistant"
        } else {
            "user"
        };
        let mut blocks = if role == "assistant" {
            assistant_blocks(message)
        } else {
            user_blocks(message)
        };
        if blocks.is_empty() {
            continue;
        }
        if message.cache_breakpoint
            && let Some(last) = blocks.last_mut()
        {
            last["cache_control"] = ephemeral();
        }
        match turns.last_mut() {
            Some((r, existing)) if *r == role => existing.append(&mut blocks),
            _ => turns.push((role, blocks)),
        }
    }
    if ends_with_assistant(messages) {
        if prefill {
            trim_prefill(&mut turns);
        } else {
            turns.push((
                "user",
                vec![json!({"type": "text", "text": CONTINUE_PROMPT})],
            ));
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A turn the model refused is left out of later requests: the API asks for the refused turn
/// to be removed before the conversation goes on, or it refuses again
/// (https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals,
/// "Reset context after refusal"). A refused turn that called tools stays (without its
/// refusal), since its calls are answered by the next message.
fn is_refused_turn(message: &Message) -> bool {
    message.role == Role::Assistant && message.is_refusal() && message.tool_calls().next().is_none()
}

/// The API rejects a final assistant turn ending in whitespace, or with an empty block.
fn trim_prefill(turns: &mut [(&'static str, Vec<Value>)]) {
    let Some(("assistant", blocks)) = turns.last_mut() else {
        return;
    };
    let Some(last) = blocks.last_mut() else {
        return;
    };
    if last.get("type").and_then(Value::as_str) != Some("text") {
        return;
    }
    let trimmed = last
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim_end()
        .to_owned();
    if trimmed.is_empty() {
        blocks.pop();
    } else {
        last["text"] = json!(trimmed);
    }
}

fn assistant_blocks(message: &Message) -> Vec<Value> {
    let mut blocks = Vec::new();
    for part in &message.parts {
        match &part.kind {
            PartKind::Text { text } if !text.is_empty() => {
                blocks.push(json!({"type": "text", "text": text}));
            }
            PartKind::Reasoning {
                text,
                provider_metadata,
            } => {
                // Thinking without this provider's signature cannot be verified by the API
                // and is left out.
                let Some(meta) = metadata_for(provider_metadata.as_ref(), METADATA_KEY) else {
                    continue;
                };
                if let Some(data) = meta.get("redacted_data").and_then(Value::as_str) {
                    blocks.push(json!({"type": "redacted_thinking", "data": data}));
                } else if let Some(sig) = meta.get("signature").and_then(Value::as_str) {
                    blocks.push(json!({"type": "thinking", "thinking": text, "signature": sig}));
                }
            }
            PartKind::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_executed,
                ..
            } => {
                let ty = if *provider_executed {
                    "server_tool_use"
                } else {
                    "tool_use"
                };
                blocks.push(json!({
                    "type": ty,
                    "id": tool_call_id,
                    "name": tool_name,
                    "input": args_object(args),
                }));
            }
            PartKind::ToolResult {
                tool_call_id,
                tool_name,
                result,
                provider_executed: true,
                ..
            } => blocks.push(json!({
                "type": format!("{tool_name}_tool_result"),
                "tool_use_id": tool_call_id,
                "content": result,
            })),
            _ => {}
        }
    }
    blocks
}

fn user_blocks(message: &Message) -> Vec<Value> {
    let mut blocks = Vec::new();
    for input in user_inputs(message) {
        match input {
            UserInput::Text(text) => {
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
            }
            UserInput::ToolResult {
                call_id,
                result,
                is_error,
                ..
            } => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": tool_result_text(result),
                });
                if is_error {
                    block["is_error"] = json!(true);
                }
                blocks.push(block);
            }
            UserInput::File(file) => {
                let source = match (file.data, file.url) {
                    (Some(data), _) => {
                        json!({"type": "base64", "media_type": file.media_type, "data": data})
                    }
                    (None, Some(url)) => json!({"type": "url", "url": url}),
                    (None, None) => continue,
                };
                let ty = if file.is_image() { "image" } else { "document" };
                blocks.push(json!({"type": ty, "source": source}));
            }
        }
    }
    blocks
}
