//! The Gemini API's `generateContent` rules
//! (<https://ai.google.dev/api/generate-content>, request body; `Content` and `Part` at
//! <https://ai.google.dev/api/caching#Content>): the request's JSON is read as the API's
//! message types, so a field they do not have is refused; turns are `user` or `model` and
//! never empty; a function response turn answers the call turn right before it, one
//! response per call (<https://ai.google.dev/gemini-api/docs/function-calling>); thinking
//! takes a level or a budget, not both (<https://ai.google.dev/gemini-api/docs/thinking>);
//! Gemini 3 wants the first call of each step of the current turn back with its thought
//! signature (<https://ai.google.dev/gemini-api/docs/thought-signatures>).

use serde_json::Value;

use super::{Rule, Violation, array, str_at};

pub(crate) const RULES: &[Rule] = &[
    known_fields,
    roles,
    parts_not_empty,
    responses_follow_calls,
    one_thinking_control,
];

const REQUEST: &[&str] = &[
    "contents",
    "tools",
    "toolConfig",
    "safetySettings",
    "systemInstruction",
    "generationConfig",
    "cachedContent",
];
const CONTENT: &[&str] = &["role", "parts"];
const PART: &[&str] = &[
    "text",
    "thought",
    "thoughtSignature",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "videoMetadata",
    "partMetadata",
    "mediaResolution",
];
const GENERATION: &[&str] = &[
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "enableEnhancedCivicAnswers",
    "speechConfig",
    "thinkingConfig",
    "imageConfig",
    "mediaResolution",
];
const THINKING: &[&str] = &["includeThoughts", "thinkingBudget", "thinkingLevel"];

/// Google's JSON parser refuses a field its message type does not have.
fn unknown<'a>(value: &'a Value, known: &[&str]) -> Option<&'a str> {
    value
        .as_object()?
        .keys()
        .map(String::as_str)
        .find(|k| !known.contains(k))
}

fn unknown_field(name: &str, at: &str) -> Violation {
    Violation::new(format!(
        "Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
    ))
}

fn known_fields(request: &Value) -> Result<(), Violation> {
    if let Some(name) = unknown(request, REQUEST) {
        return Err(Violation::new(format!(
            "Invalid JSON payload received. Unknown name \"{name}\": Cannot find field."
        )));
    }
    let generation = &request["generationConfig"];
    if let Some(name) = unknown(generation, GENERATION) {
        return Err(unknown_field(name, "generation_config"));
    }
    if let Some(name) = unknown(&generation["thinkingConfig"], THINKING) {
        return Err(unknown_field(name, "generation_config.thinking_config"));
    }
    for (i, content) in array(request, "contents").iter().enumerate() {
        if let Some(name) = unknown(content, CONTENT) {
            return Err(unknown_field(name, &format!("contents[{i}]")));
        }
        for (j, part) in array(content, "parts").iter().enumerate() {
            if let Some(name) = unknown(part, PART) {
                return Err(unknown_field(name, &format!("contents[{i}].parts[{j}]")));
            }
        }
    }
    Ok(())
}

fn roles(request: &Value) -> Result<(), Violation> {
    // A single-turn request may leave the role unset.
    let valid = |c: &Value| matches!(str_at(c, "role"), "user" | "model" | "");
    if array(request, "contents").iter().all(valid) {
        Ok(())
    } else {
        Err(Violation::new("Please use a valid role: user, model."))
    }
}

fn parts_not_empty(request: &Value) -> Result<(), Violation> {
    let contents = array(request, "contents");
    if contents.is_empty() {
        return Err(Violation::new(
            "* GenerateContentRequest.contents: contents is not specified\n",
        ));
    }
    match contents.iter().position(|c| array(c, "parts").is_empty()) {
        Some(i) => Err(Violation::new(format!(
            "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.\n"
        ))),
        None => Ok(()),
    }
}

fn count(content: &Value, kind: &str) -> usize {
    array(content, "parts")
        .iter()
        .filter(|p| p.get(kind).is_some())
        .count()
}

fn responses_follow_calls(request: &Value) -> Result<(), Violation> {
    let contents = array(request, "contents");
    for (i, content) in contents.iter().enumerate() {
        let responses = count(content, "functionResponse");
        if responses == 0 {
            continue;
        }
        let calls = i
            .checked_sub(1)
            .map(|p| &contents[p])
            .filter(|p| str_at(p, "role") == "model")
            .map_or(0, |p| count(p, "functionCall"));
        if calls == 0 {
            return Err(Violation::new(
                "Please ensure that function response turn comes immediately after a function \
                 call turn.",
            ));
        }
        if calls != responses {
            return Err(Violation::new(
                "Please ensure that the number of function response parts is equal to the \
                 number of function call parts of the function call turn.",
            ));
        }
    }
    Ok(())
}

fn one_thinking_control(request: &Value) -> Result<(), Violation> {
    let thinking = &request["generationConfig"]["thinkingConfig"];
    if thinking.get("thinkingLevel").is_some() && thinking.get("thinkingBudget").is_some() {
        return Err(Violation::new(
            "You can only set only one of thinking budget and thinking level.",
        ));
    }
    Ok(())
}

/// The signature the mock issues for a call: the one of its OpenAI-compatible endpoint
/// ([`super::thought_signature`]) in base64, since the native API carries it as `bytes`
/// (<https://ai.google.dev/api/caching#Part>, `thoughtSignature`) and Google's SDKs decode it.
pub(crate) fn signature(call: &Value) -> String {
    base64(super::thought_signature::signature(call_key(call)).as_bytes())
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What the mock signs a call with: its id, else (Gemini before 3 sends none) its name.
fn call_key(call: &Value) -> &str {
    match str_at(call, "id") {
        "" => str_at(call, "name"),
        id => id,
    }
}

/// Gemini 3 models: the first call of every model step of the current turn (after the last
/// user text) comes back with the signature it was issued.
pub(crate) fn signatures_come_back(model: &str, request: &Value) -> Result<(), Violation> {
    if !model.starts_with("gemini-3") {
        return Ok(());
    }
    let contents = array(request, "contents");
    let is_user_text = |c: &Value| {
        str_at(c, "role") == "user" && array(c, "parts").iter().any(|p| p.get("text").is_some())
    };
    let turn_start = contents.iter().rposition(is_user_text).map_or(0, |i| i + 1);
    for (i, content) in contents.iter().enumerate().skip(turn_start) {
        let Some(first) = array(content, "parts")
            .iter()
            .find(|p| p.get("functionCall").is_some())
        else {
            continue;
        };
        let call = &first["functionCall"];
        let expected = signature(call);
        match first.get("thoughtSignature").and_then(Value::as_str) {
            Some(sent) if sent == expected => {}
            Some(_) => return Err(Violation::new("Corrupted thought signature.")),
            None => {
                return Err(Violation::new(format!(
                    "Function call is missing a thought_signature in functionCall parts. This \
                     is required for tools to work correctly, and missing thought_signature \
                     may lead to degraded model performance. Additional data, function call \
                     `default_api:{}` , position {}. Please refer to \
                     https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    str_at(call, "name"),
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
    use crate::rules::check;
    use serde_json::json;

    fn turn(signature: Option<&str>) -> Value {
        let mut call = json!({"functionCall": {"id": "c1", "name": "read_file", "args": {}}});
        if let Some(sig) = signature {
            call["thoughtSignature"] = json!(sig);
        }
        json!({"contents": [
            {"role": "user", "parts": [{"text": "read it"}]},
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [{"functionResponse":
                {"id": "c1", "name": "read_file", "response": {"output": "alpha"}}}]},
        ]})
    }

    #[test]
    fn gemini_3_wants_the_first_calls_signature_back() {
        let issued = signature(&json!({"id": "c1"}));
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        assert!(signatures_come_back("gemini-3-flash-preview", &turn(Some(&issued))).is_ok());
        let missing = signatures_come_back("gemini-3-pro-preview", &turn(None)).unwrap_err();
        assert!(
            missing.message.contains("missing a thought_signature"),
            "{missing:?}"
        );
        assert!(signatures_come_back("gemini-3-pro-preview", &turn(Some("x"))).is_err());
        assert!(signatures_come_back("gemini-2.5-flash", &turn(None)).is_ok());
        let mut later = turn(None);
        later["contents"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "parts": [{"text": "thanks"}]}));
        assert!(signatures_come_back("gemini-3-pro-preview", &later).is_ok());
    }

    #[test]
    fn what_the_api_refuses() {
        assert!(check(RULES, &turn(None)).is_ok());
        let refused = |request: Value| check(RULES, &request).unwrap_err().message;
        let mut assistant = turn(None);
        assistant["contents"][1]["role"] = json!("assistant");
        assert!(refused(assistant).contains("valid role"));
        let mut stray = turn(None);
        stray["stream"] = json!(true);
        assert!(refused(stray).contains("Unknown name \"stream\""));
        let mut snake = turn(None);
        snake["generationConfig"] = json!({"max_output_tokens": 5});
        assert!(refused(snake).contains("generation_config"));
        let mut orphan = turn(None);
        orphan["contents"].as_array_mut().unwrap().remove(1);
        assert!(refused(orphan).contains("immediately after a function call turn"));
        let mut short = turn(None);
        short["contents"][1]["parts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"functionCall": {"name": "read_file"}}));
        assert!(refused(short).contains("number of function response parts"));
        let mut empty = turn(None);
        empty["contents"][0]["parts"] = json!([]);
        assert!(refused(empty).contains("must not be empty"));
        let mut both = turn(None);
        both["generationConfig"] =
            json!({"thinkingConfig": {"thinkingLevel": "high", "thinkingBudget": 10}});
        assert!(refused(both).contains("only one of thinking budget"));
    }
}
