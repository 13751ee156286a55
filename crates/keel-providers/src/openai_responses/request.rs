//! Builds the Responses API request body from a [`ModelCall`].
//!
//! In chain mode (`previous_response_id` set) the provider already holds the conversation,
//! so only the input after the last assistant turn is sent. Provider tools go in `tools` by
//! their own type; the calls they made go back as the items they came as.

use keel_core::{Message, ModelCall, Part, PartKind, Role, ToolChoice};
use serde_json::{Map, Value, json};

use crate::convert::{
    CONTINUE_PROMPT, UserInput, ends_with_assistant, metadata_for, tool_result_text, user_inputs,
};

/// The key of this protocol's data in a part's `provider_metadata`.
pub const METADATA_KEY: &str = "openai_responses";

/// The JSON body of a streaming Responses request.
pub fn build(call: &ModelCall, model: &str) -> Value {
    let o = &call.options;
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let messages = match &o.previous_response_id {
        Some(_) => new_input(&call.messages),
        None => &call.messages[..],
    };
    body.insert("input".into(), Value::Array(input(messages, o.store)));
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(o.store));
    if let Some(id) = &o.previous_response_id {
        body.insert("previous_response_id".into(), json!(id));
    }
    let tools: Vec<Value> = call
        .tools
        .iter()
        .map(|t| match &t.provider_tool {
            Some(kind) => json!({"type": kind}),
            None => json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": false,
            }),
        })
        .collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        let choice = match o.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
            ToolChoice::Required => "required",
        };
        body.insert("tool_choice".into(), json!(choice));
    }
    if let Some(t) = o.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = o.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(max) = o.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(effort) = &o.reasoning_effort {
        body.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
        // Without storage, reasoning can only be carried to the next turn encrypted.
        if !o.store {
            body.insert("include".into(), json!(["reasoning.encrypted_content"]));
        }
    }
    for (k, v) in &o.provider_options {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

/// The messages after the last assistant turn. A trailing assistant message is a partial
/// reply the provider never stored, so it is new input too.
pub fn new_input(messages: &[Message]) -> &[Message] {
    let history_end = if ends_with_assistant(messages) {
        messages.len() - 1
    } else {
        messages.len()
    };
    let start = messages[..history_end]
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    &messages[start..]
}

fn input(messages: &[Message], store: bool) -> Vec<Value> {
    let mut items = Vec::new();
    for message in messages {
        match message.role {
            Role::System => items.push(json!({"role": "system", "content": message.text()})),
            Role::Assistant => assistant(message, store, &mut items),
            Role::User | Role::Tool => user_or_tool(message, &mut items),
        }
    }
    if ends_with_assistant(messages) {
        items.push(json!({"role": "user", "content": CONTINUE_PROMPT}));
    }
    items
}

/// An assistant turn as output items. A reasoning item goes back only together with the
/// item that followed it, carrying that item's id (`next_item` in the reasoning metadata):
/// the API pairs them by id and refuses a reasoning item whose follower is missing or
/// anonymous.
fn assistant(message: &Message, store: bool, items: &mut Vec<Value>) {
    let mut turn = Turn {
        items,
        content: Vec::new(),
        awaiting: None,
    };
    for part in &message.parts {
        match &part.kind {
            PartKind::Text { text } => turn.say("output_text", "text", text),
            PartKind::Refusal { text } => turn.say("refusal", "refusal", text),
            PartKind::Reasoning { .. } => {
                if let Some((item, next)) = reasoning_item(part, store) {
                    turn.flush_text();
                    turn.settle();
                    turn.items.push(item);
                    turn.awaiting = Some((turn.items.len() - 1, next));
                }
            }
            PartKind::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_executed: false,
                ..
            } => {
                turn.flush_text();
                let mut item = json!({
                    "type": "function_call",
                    "call_id": tool_call_id,
                    "name": tool_name,
                    "arguments": if args.is_empty() { "{}" } else { args.as_str() },
                });
                if let Some(id) = turn.follower_id("function_call", Some(tool_call_id)) {
                    item["id"] = json!(id);
                }
                turn.push(item);
            }
            // A call the provider ran goes back as the output item it came as (kept whole
            // as its result), with its id, status and action: the API takes it as input
            // (<https://platform.openai.com/docs/api-reference/responses/create>, `input`,
            // "Web search tool call"). A call cut before its item was done has no result
            // and is left out.
            PartKind::ToolResult {
                result,
                provider_executed: true,
                ..
            } if is_provider_item(result) => {
                turn.flush_text();
                turn.push(result.clone());
            }
            _ => {}
        }
    }
    turn.flush_text();
    turn.settle();
}

/// Whether a provider-run tool's result is the whole output item of its call.
fn is_provider_item(result: &Value) -> bool {
    let kind = result
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    kind.ends_with("_call") && result.get("id").is_some_and(Value::is_string)
}

/// The items of one assistant turn being built.
struct Turn<'a> {
    items: &'a mut Vec<Value>,
    /// The content parts of the message item being built: `output_text` and `refusal`, the
    /// two an assistant message takes
    /// (<https://platform.openai.com/docs/api-reference/responses/create>, output message).
    content: Vec<Value>,
    /// The last reasoning item (its index) and the follower it needs.
    awaiting: Option<(usize, Value)>,
}

impl Turn<'_> {
    /// The id the next item carries when it is the awaited follower of kind `kind`.
    fn follower_id(&self, kind: &str, call_id: Option<&str>) -> Option<String> {
        let (_, next) = self.awaiting.as_ref()?;
        let matches = next.get("type").and_then(Value::as_str) == Some(kind)
            && call_id.is_none_or(|c| next.get("call_id").and_then(Value::as_str) == Some(c));
        matches
            .then(|| next.get("id").and_then(Value::as_str).map(str::to_owned))
            .flatten()
    }

    /// Appends an item; a reasoning item still awaiting a follower that this is not is
    /// dropped first.
    fn push(&mut self, item: Value) {
        let follows = self
            .awaiting
            .as_ref()
            .is_some_and(|(_, next)| item.get("id").is_some() && item.get("id") == next.get("id"));
        if follows {
            self.awaiting = None;
        } else {
            self.settle();
        }
        self.items.push(item);
    }

    /// Adds text to the message item being built: to its last part when that is of the
    /// same kind, else as a new part.
    fn say(&mut self, kind: &str, field: &str, text: &str) {
        if text.is_empty() {
            return;
        }
        if let Some(last) = self.content.last_mut()
            && last["type"] == kind
            && let Some(Value::String(said)) = last.get_mut(field)
        {
            said.push_str(text);
            return;
        }
        let mut part = json!({"type": kind, field: text});
        if kind == "output_text" {
            part["annotations"] = json!([]);
        }
        self.content.push(part);
    }

    fn flush_text(&mut self) {
        if self.content.is_empty() {
            return;
        }
        let content = std::mem::take(&mut self.content);
        let item = match self.follower_id("message", None) {
            Some(id) => json!({
                "type": "message",
                "id": id,
                "role": "assistant",
                "status": "completed",
                "content": content,
            }),
            None => match content.as_slice() {
                [only] if only["type"] == "output_text" => {
                    json!({"role": "assistant", "content": only["text"]})
                }
                _ => json!({"role": "assistant", "content": content}),
            },
        };
        self.push(item);
    }

    /// Drops a reasoning item whose follower never came (the reply was cut after it).
    fn settle(&mut self) {
        if let Some((index, _)) = self.awaiting.take() {
            self.items.remove(index);
        }
    }
}

/// A reasoning part as the reasoning item it came from. Without storage the item must carry
/// its encrypted content; with storage its id suffices.
fn reasoning_item(part: &Part, store: bool) -> Option<(Value, Value)> {
    let PartKind::Reasoning {
        text,
        provider_metadata,
    } = &part.kind
    else {
        return None;
    };
    let meta = metadata_for(provider_metadata.as_ref(), METADATA_KEY)?;
    let id = meta.get("item_id").and_then(Value::as_str)?;
    // Without the item that followed it, a reasoning item cannot be sent back.
    let next = meta.get("next_item").filter(|n| n.is_object())?.clone();
    let encrypted = meta.get("encrypted_content").and_then(Value::as_str);
    if encrypted.is_none() && !store {
        return None;
    }
    let summary: Vec<Value> = if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "summary_text", "text": text})]
    };
    let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
    if let (Some(enc), Some(obj)) = (encrypted, item.as_object_mut()) {
        obj.insert("encrypted_content".into(), json!(enc));
    }
    Some((item, next))
}

fn user_or_tool(message: &Message, items: &mut Vec<Value>) {
    let mut content = Vec::new();
    for input in user_inputs(message) {
        match input {
            UserInput::ToolResult {
                call_id, result, ..
            } => items.push(json!({
                "type": "function_call_output",
                "call_id": call_id,
                "output": tool_result_text(result),
            })),
            UserInput::Text(text) => content.push(json!({"type": "input_text", "text": text})),
            UserInput::File(file) => {
                let url = file.url();
                content.push(if file.is_image() {
                    json!({"type": "input_image", "image_url": url})
                } else if url.starts_with("data:") {
                    json!({"type": "input_file", "filename": "attachment", "file_data": url})
                } else {
                    json!({"type": "input_file", "file_url": url})
                });
            }
        }
    }
    if !content.is_empty() {
        items.push(json!({"role": "user", "content": content}));
    }
}
