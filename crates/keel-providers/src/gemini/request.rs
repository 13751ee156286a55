//! Builds the `generateContent` request body from a [`ModelCall`]
//! (<https://ai.google.dev/api/generate-content#request-body>).
//!
//! Leading system messages become `systemInstruction`; the rest become `contents` of role
//! `user` or `model`, consecutive messages of one side merged into one turn, tool results
//! sent as `functionResponse` parts of a user turn. A thought signature goes back on the
//! part it came with: the function call (where Gemini 3 requires it) or the thought.

use keel_core::{Message, ModelCall, PartKind, ReasoningEffort, Role, ToolChoice};
use serde_json::{Map, Value, json};

use crate::convert::{
    CONTINUE_PROMPT, FileInput, UserInput, args_object, ends_with_assistant, metadata_for,
    user_inputs,
};

/// The key of this protocol's data in a part's `provider_metadata`.
pub const METADATA_KEY: &str = "gemini";

/// The key of a thought signature under [`METADATA_KEY`].
pub const SIGNATURE: &str = "thought_signature";

/// Call ids Keel made for calls Gemini sent without one (models before Gemini 3); they are
/// not sent back, since Gemini never issued them.
pub const LOCAL_CALL_ID_PREFIX: &str = "gemini-call-";

/// The JSON body of a `streamGenerateContent` request. A trailing model turn is always
/// followed by an instruction to continue (see [`super::Gemini`]).
pub fn build(call: &ModelCall) -> Value {
    let o = &call.options;
    let mut body = Map::new();
    let leading = call
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let system: Vec<Value> = call.messages[..leading]
        .iter()
        .map(Message::text)
        .filter(|t| !t.is_empty())
        .map(|text| json!({"text": text}))
        .collect();
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": system}));
    }
    body.insert(
        "contents".into(),
        Value::Array(contents(&call.messages[leading..])),
    );

    let declarations: Vec<Value> = call
        .tools
        .iter()
        .filter(|t| !t.is_provider_tool())
        .map(|t| {
            // `parametersJsonSchema` takes JSON Schema as tools declare it; `parameters`
            // takes only Google's OpenAPI subset and refuses e.g. `additionalProperties`.
            json!({
                "name": t.name,
                "description": t.description,
                "parametersJsonSchema": t.parameters,
            })
        })
        .collect();
    if !declarations.is_empty() {
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
        let mode = match o.tool_choice {
            ToolChoice::Auto => "AUTO",
            ToolChoice::None => "NONE",
            ToolChoice::Required => "ANY",
        };
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": {"mode": mode}}),
        );
    }

    let mut generation = Map::new();
    if let Some(t) = o.temperature {
        generation.insert("temperature".into(), json!(t));
    }
    if let Some(p) = o.top_p {
        generation.insert("topP".into(), json!(p));
    }
    if let Some(max) = o.max_output_tokens {
        generation.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(thinking) = thinking_config(call) {
        generation.insert("thinkingConfig".into(), thinking);
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    for (k, v) in &o.provider_options {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

/// `thinkingConfig` from the call's options: `reasoning_effort` as Gemini 3's
/// `thinkingLevel`, else `thinking_budget_tokens` as Gemini 2.5's `thinkingBudget`; never
/// both, which Gemini refuses (<https://ai.google.dev/gemini-api/docs/thinking>, "Thinking
/// levels"). Thoughts are asked for whenever thinking is configured, so they are shown.
fn thinking_config(call: &ModelCall) -> Option<Value> {
    let o = &call.options;
    if let Some(effort) = o.reasoning_effort {
        let config = match effort {
            // Gemini 2.5 turns thinking off with a zero budget; Gemini 3 cannot.
            ReasoningEffort::None => json!({"thinkingBudget": 0}),
            ReasoningEffort::Minimal => {
                json!({"thinkingLevel": "minimal", "includeThoughts": true})
            }
            ReasoningEffort::Low => json!({"thinkingLevel": "low", "includeThoughts": true}),
            ReasoningEffort::Medium => json!({"thinkingLevel": "medium", "includeThoughts": true}),
            ReasoningEffort::High | ReasoningEffort::Xhigh => {
                json!({"thinkingLevel": "high", "includeThoughts": true})
            }
        };
        return Some(config);
    }
    o.thinking_budget_tokens
        .map(|budget| json!({"thinkingBudget": budget, "includeThoughts": budget > 0}))
}

fn contents(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, mut parts) = match message.role {
            Role::Assistant => ("model", model_parts(message)),
            _ => ("user", user_parts(message)),
        };
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, existing)) if *r == role => existing.append(&mut parts),
            _ => turns.push((role, parts)),
        }
    }
    if ends_with_assistant(messages) {
        turns.push(("user", vec![json!({"text": CONTINUE_PROMPT})]));
    }
    turns
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

/// This provider's thought signature in a part's metadata.
fn signature_of(metadata: Option<&Value>) -> Option<&str> {
    metadata_for(metadata, METADATA_KEY)?
        .get(SIGNATURE)
        .and_then(Value::as_str)
}

fn model_parts(message: &Message) -> Vec<Value> {
    let mut parts = Vec::new();
    for part in &message.parts {
        match &part.kind {
            PartKind::Text { text } if !text.is_empty() => parts.push(json!({"text": text})),
            PartKind::Reasoning {
                text,
                provider_metadata,
            } => {
                // Thought summaries are not context for the model; only a thought that
                // carried a signature goes back, so the signature stays where it came.
                if let Some(sig) = signature_of(provider_metadata.as_ref()) {
                    parts.push(json!({"text": text, "thought": true, "thoughtSignature": sig}));
                }
            }
            PartKind::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_executed: false,
                provider_metadata,
            } => {
                let mut call = json!({"name": tool_name, "args": args_object(args)});
                if !tool_call_id.starts_with(LOCAL_CALL_ID_PREFIX) {
                    call["id"] = json!(tool_call_id);
                }
                let mut part = json!({ "functionCall": call });
                if let Some(sig) = signature_of(provider_metadata.as_ref()) {
                    part["thoughtSignature"] = json!(sig);
                }
                parts.push(part);
            }
            _ => {}
        }
    }
    parts
}

fn user_parts(message: &Message) -> Vec<Value> {
    let mut parts = Vec::new();
    for input in user_inputs(message) {
        match input {
            UserInput::Text(text) => {
                if !text.is_empty() {
                    parts.push(json!({"text": text}));
                }
            }
            UserInput::ToolResult {
                call_id,
                tool_name,
                result,
                is_error,
            } => {
                // `response` must be an object: "output" for a result, "error" for a
                // failure (https://ai.google.dev/api/caching#FunctionResponse).
                let key = if is_error { "error" } else { "output" };
                let mut response = json!({"name": tool_name, "response": { key: result }});
                if !call_id.starts_with(LOCAL_CALL_ID_PREFIX) {
                    response["id"] = json!(call_id);
                }
                parts.push(json!({ "functionResponse": response }));
            }
            UserInput::File(FileInput {
                media_type,
                data,
                url,
            }) => match (data, url) {
                (Some(data), _) => {
                    parts.push(json!({"inlineData": {"mimeType": media_type, "data": data}}));
                }
                (None, Some(url)) => {
                    parts.push(json!({"fileData": {"mimeType": media_type, "fileUri": url}}));
                }
                (None, None) => {}
            },
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::{CallOptions, Part, ToolDefinition};

    fn signed(sig: &str) -> Option<Value> {
        Some(json!({ METADATA_KEY: { SIGNATURE: sig } }))
    }

    fn call_part(id: &str, sig: Option<&str>) -> Part {
        Part::tool_call(id, "read_file", r#"{"path":"a.txt"}"#, false)
            .with_call_metadata(sig.and_then(signed))
    }

    fn tool_turn() -> Vec<Message> {
        vec![
            Message::system("Be brief."),
            Message::user("read both"),
            Message::new(
                Role::Assistant,
                vec![
                    Part::reasoning("Both files.", signed("t-sig")),
                    call_part("c1", Some("sig-1")),
                    call_part("gemini-call-x", None),
                ],
            ),
            Message::new(
                Role::Tool,
                vec![
                    Part::tool_result("c1", "read_file", json!("alpha"), false, false),
                    Part::tool_result(
                        "gemini-call-x",
                        "read_file",
                        json!("no such file"),
                        true,
                        false,
                    ),
                ],
            ),
        ]
    }

    #[test]
    fn signatures_stay_on_their_parts_and_results_follow_the_calls() {
        let call = ModelCall {
            messages: tool_turn(),
            tools: vec![ToolDefinition::function(
                "read_file",
                "Reads a file",
                json!({"properties": {"path": {"type": "string"}}}),
            )],
            options: CallOptions::default(),
        };
        let body = build(&call);
        assert_eq!(
            body["systemInstruction"],
            json!({"parts": [{"text": "Be brief."}]})
        );
        let contents = body["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 3, "{body}");
        assert_eq!(contents[1]["role"], "model");
        assert_eq!(
            contents[1]["parts"],
            json!([
                {"text": "Both files.", "thought": true, "thoughtSignature": "t-sig"},
                {"functionCall": {"id": "c1", "name": "read_file", "args": {"path": "a.txt"}},
                 "thoughtSignature": "sig-1"},
                {"functionCall": {"name": "read_file", "args": {"path": "a.txt"}}},
            ])
        );
        assert_eq!(contents[2]["role"], "user");
        assert_eq!(
            contents[2]["parts"],
            json!([
                {"functionResponse": {"id": "c1", "name": "read_file",
                                      "response": {"output": "alpha"}}},
                {"functionResponse": {"name": "read_file",
                                      "response": {"error": "no such file"}}},
            ])
        );
        assert_eq!(
            body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["type"],
            "object"
        );
        assert_eq!(body["toolConfig"]["functionCallingConfig"]["mode"], "AUTO");
        assert!(body.get("generationConfig").is_none(), "{body}");
    }

    #[test]
    fn unsigned_thoughts_stay_home_and_a_cut_reply_is_continued_by_instruction() {
        let messages = vec![
            Message::user("hi"),
            Message::new(
                Role::Assistant,
                vec![Part::reasoning("hm", None), Part::text("Hel")],
            ),
        ];
        let body = build(&ModelCall {
            messages,
            ..ModelCall::default()
        });
        let contents = body["contents"].as_array().unwrap();
        assert_eq!(contents[1]["parts"], json!([{"text": "Hel"}]));
        assert_eq!(contents[2]["role"], "user");
        assert_eq!(contents[2]["parts"][0]["text"], CONTINUE_PROMPT);
    }

    #[test]
    fn thinking_is_a_level_or_a_budget_never_both() {
        let with = |options: CallOptions| {
            build(&ModelCall {
                messages: vec![Message::user("hi")],
                options,
                ..ModelCall::default()
            })["generationConfig"]
                .clone()
        };
        let level = with(CallOptions {
            reasoning_effort: Some(ReasoningEffort::High),
            thinking_budget_tokens: Some(1024),
            max_output_tokens: Some(300),
            ..CallOptions::default()
        });
        assert_eq!(
            level,
            json!({"maxOutputTokens": 300,
                   "thinkingConfig": {"thinkingLevel": "high", "includeThoughts": true}})
        );
        let budget = with(CallOptions {
            thinking_budget_tokens: Some(1024),
            temperature: Some(0.5),
            ..CallOptions::default()
        });
        assert_eq!(
            budget,
            json!({"temperature": 0.5,
                   "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
        );
    }
}
