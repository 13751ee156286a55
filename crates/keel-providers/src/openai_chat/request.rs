//! Builds the Chat Completions request body from a [`ModelCall`].

use keel_core::{Message, ModelCall, PartKind, Role, ToolChoice};
use serde_json::{Map, Value, json};

use crate::config::{OutputLimitField, ReasoningContent};
use crate::convert::{
    CONTINUE_PROMPT, UserInput, ends_with_assistant, metadata_for, tool_result_text, user_inputs,
};

/// The key of this protocol's data in a part's `provider_metadata`.
pub const METADATA_KEY: &str = "openai_chat";

/// The field of a tool call that carries a server's own data about it: Gemini's
/// OpenAI-compatible endpoint puts the call's thought signature there
/// (`{"google": {"thought_signature": "..."}}`), and Gemini 3 refuses the next request of
/// the turn without it (<https://ai.google.dev/gemini-api/docs/thought-signatures>).
pub const EXTRA_CONTENT: &str = "extra_content";

/// Per-provider switches of the request shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatRequestOptions {
    /// Send `stream_options.include_usage`.
    pub include_usage: bool,
    /// The field the output limit is sent in.
    pub output_limit: OutputLimitField,
    /// Whether an assistant turn's reasoning goes back as `reasoning_content`.
    pub reasoning_content: ReasoningContent,
    /// Continue a trailing assistant message natively (server-side prefill) instead of by
    /// instruction.
    pub prefill: bool,
}

impl Default for ChatRequestOptions {
    fn default() -> Self {
        Self {
            include_usage: true,
            output_limit: OutputLimitField::default(),
            reasoning_content: ReasoningContent::default(),
            prefill: false,
        }
    }
}

/// The JSON body of a streaming Chat Completions request.
pub fn build(call: &ModelCall, model: &str, options: ChatRequestOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(messages(
            &call.messages,
            options.prefill,
            options.reasoning_content == ReasoningContent::Send,
        )),
    );
    if options.prefill && ends_with_assistant(&call.messages) {
        // vLLM (and SGLang) continue the final assistant message only when told, and refuse
        // it together with a generation prompt.
        body.insert("continue_final_message".into(), json!(true));
        body.insert("add_generation_prompt".into(), json!(false));
    }
    body.insert("stream".into(), json!(true));
    if options.include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let tools: Vec<Value> = call
        .tools
        .iter()
        .filter(|t| !t.is_provider_tool())
        .map(|t| {
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                }
            })
        })
        .collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        let choice = match call.options.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
            ToolChoice::Required => "required",
        };
        body.insert("tool_choice".into(), json!(choice));
    }
    let o = &call.options;
    if let Some(t) = o.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = o.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(max) = o.max_output_tokens {
        body.insert(options.output_limit.as_str().into(), json!(max));
    }
    if let Some(effort) = &o.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    for (k, v) in &o.provider_options {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

fn messages(messages: &[Message], prefill: bool, reasoning_content: bool) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    for message in messages {
        match message.role {
            Role::System => out.push(json!({"role": "system", "content": message.text()})),
            Role::Assistant => out.extend(assistant(message, reasoning_content)),
            Role::User | Role::Tool => out.extend(user_or_tool(message)),
        }
    }
    if ends_with_assistant(messages) {
        match out.last_mut() {
            // DeepSeek continues an assistant message marked as a prefix (its beta endpoint);
            // llama.cpp's server continues a trailing assistant message as it is.
            Some(last) if prefill && last["role"] == "assistant" => {
                last["prefix"] = json!(true);
            }
            _ => out.push(json!({"role": "user", "content": CONTINUE_PROMPT})),
        }
    }
    out
}

fn assistant(message: &Message, reasoning_content: bool) -> Option<Value> {
    let text = message.text();
    let calls: Vec<Value> = message
        .parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_executed: false,
                provider_metadata,
            } => {
                let mut call = json!({
                    "id": tool_call_id,
                    "type": "function",
                    "function": {
                        "name": tool_name,
                        "arguments": if args.is_empty() { "{}" } else { args.as_str() },
                    }
                });
                // Gemini's thought signature goes back exactly as it came.
                if let Some(extra) = metadata_for(provider_metadata.as_ref(), METADATA_KEY)
                    .and_then(|m| m.get(EXTRA_CONTENT))
                {
                    call[EXTRA_CONTENT] = extra.clone();
                }
                Some(call)
            }
            _ => None,
        })
        .collect();
    let refusal: String = message
        .parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Refusal { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if text.is_empty() && calls.is_empty() && refusal.is_empty() {
        return None;
    }
    let mut m = Map::new();
    m.insert("role".into(), json!("assistant"));
    m.insert("content".into(), assistant_content(text, refusal));
    let mut reasoning: Option<String> = None;
    for part in &message.parts {
        if let PartKind::Reasoning { text, .. } = &part.kind {
            reasoning.get_or_insert_with(String::new).push_str(text);
        }
    }
    // A turn that called tools always carries the field (empty when it did not reason):
    // DeepSeek refuses such a turn without it in thinking mode.
    if reasoning_content && (reasoning.is_some() || !calls.is_empty()) {
        m.insert(
            "reasoning_content".into(),
            json!(reasoning.unwrap_or_default()),
        );
    }
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    Some(Value::Object(m))
}

/// An assistant turn's `content`: its text, or content parts when it refused, since a
/// refusal goes back as a part of its own (`{"type": "refusal"}`, the only part besides
/// `text` an assistant message takes;
/// <https://platform.openai.com/docs/api-reference/chat/create>, assistant message).
fn assistant_content(text: String, refusal: String) -> Value {
    if refusal.is_empty() {
        return if text.is_empty() {
            Value::Null
        } else {
            json!(text)
        };
    }
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(json!({"type": "text", "text": text}));
    }
    parts.push(json!({"type": "refusal", "refusal": refusal}));
    Value::Array(parts)
}

/// A user or tool message: tool results become one `role: tool` message each, in order,
/// and the remaining content one user message after them.
fn user_or_tool(message: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    let mut content = Vec::new();
    let mut has_file = false;
    for input in user_inputs(message) {
        match input {
            UserInput::ToolResult {
                call_id, result, ..
            } => out.push(json!({
                "role": "tool",
                "tool_call_id": call_id,
                "content": tool_result_text(result),
            })),
            UserInput::Text(text) => content.push(json!({"type": "text", "text": text})),
            UserInput::File(file) => {
                has_file = true;
                let url = file.url();
                content.push(if file.is_image() {
                    json!({"type": "image_url", "image_url": {"url": url}})
                } else {
                    json!({"type": "file", "file": {"filename": "attachment", "file_data": url}})
                });
            }
        }
    }
    if !content.is_empty() {
        let content = if has_file {
            Value::Array(content)
        } else {
            json!(message.text())
        };
        out.push(json!({"role": "user", "content": content}));
    }
    out
}
