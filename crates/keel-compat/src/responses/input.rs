//! `input` of `POST /v1/responses` as Keel turns: a pure reading of the request, so every
//! item a client may send is decided here, apart from the store.
//!
//! | item | Keel |
//! | --- | --- |
//! | a string | one user message |
//! | `message` `user` (string, `input_text`, `input_image`, `input_file`) | a user message; consecutive ones are one message with several parts |
//! | `message` `assistant` (string, `output_text`, `refusal`) | text (refusal) parts of an assistant message |
//! | `function_call` | a tool call of that assistant message |
//! | `reasoning` | a reasoning part of it (the summary's text; `encrypted_content` is not passed on) |
//! | `function_call_output` | a tool result; consecutive ones are one tool message |
//! | `mcp_call` with `server_label: "keel"` (Keel's own tools, as its responses show them) | the call in the assistant message, its `output` (or `error`) as its result |
//! | `message` `system` / `developer` before the first turn | the chat's system prompt |
//!
//! Anything else (`item_reference`, hosted tools' items, a system message after the first
//! turn, a file by `file_id`) is refused with the item's index and type: Keel keeps no
//! items of its own to resolve and would otherwise lose it without a word.

use std::collections::HashMap;

use keel_core::{Part, PartKind, Role};
use serde_json::Value;

/// One turn of the conversation the input describes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Turn {
    pub role: Role,
    pub parts: Vec<Part>,
    /// The index of the turn's first item, for errors.
    pub first: usize,
}

/// What `input` holds: system prompts given as leading messages, then the turns in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Conversation {
    pub system: Vec<String>,
    pub turns: Vec<Turn>,
}

/// A refusal naming the item (`input[3] (item_reference): ...`).
fn refuse(index: usize, kind: &str, why: impl std::fmt::Display) -> String {
    format!("input[{index}] ({kind}): {why}")
}

/// Reads `input`: a string, or a list of items.
pub(crate) fn parse(input: &Value) -> Result<Conversation, String> {
    let items = match input {
        Value::String(text) => {
            return Ok(Conversation {
                system: Vec::new(),
                turns: vec![Turn {
                    role: Role::User,
                    parts: vec![Part::text(text.clone())],
                    first: 0,
                }],
            });
        }
        Value::Array(items) => items,
        _ => return Err("`input` must be a string or a list of items".to_owned()),
    };
    let mut out = Conversation::default();
    for (index, item) in items.iter().enumerate() {
        let role = item.get("role").and_then(Value::as_str);
        let kind = match item.get("type").and_then(Value::as_str) {
            Some(kind) => kind,
            None if role.is_some() => "message",
            None => return Err(format!("input[{index}] needs a `type` or a `role`")),
        };
        let (role, part) = match (kind, role) {
            ("message", Some(role @ ("system" | "developer"))) => {
                let what = format!("{role} message");
                if !out.turns.is_empty() {
                    return Err(refuse(
                        index,
                        &what,
                        "Keel takes system and developer messages only before the conversation's first turn (they become the chat's system prompt)",
                    ));
                }
                out.system
                    .push(system_text(item.get("content")).map_err(|e| refuse(index, &what, e))?);
                continue;
            }
            ("message", Some("user")) => {
                let parts = user_parts(item.get("content"))
                    .map_err(|e| refuse(index, "user message", e))?;
                push(&mut out.turns, Role::User, parts, index);
                continue;
            }
            ("message", Some("assistant")) => {
                let parts = assistant_parts(item.get("content"))
                    .map_err(|e| refuse(index, "assistant message", e))?;
                push(&mut out.turns, Role::Assistant, parts, index);
                continue;
            }
            ("message", other) => {
                return Err(refuse(
                    index,
                    "message",
                    format!(
                        "unknown role {}; expected user, assistant, system or developer",
                        other.map_or("(none)".to_owned(), |r| format!("`{r}`"))
                    ),
                ));
            }
            ("function_call", _) => (
                Role::Assistant,
                function_call(item).map_err(|e| refuse(index, kind, e))?,
            ),
            ("function_call_output", _) => (
                Role::Tool,
                function_output(item).map_err(|e| refuse(index, kind, e))?,
            ),
            ("reasoning", _) => match reasoning(item) {
                Some(part) => (Role::Assistant, part),
                // Nothing a model could read: only another session's encrypted content.
                None => continue,
            },
            ("mcp_call", _) if item.get("server_label").and_then(Value::as_str) == Some("keel") => {
                // One of Keel's own tools, as Keel's responses show it: the call and its result.
                let (call, result) = keel_tool(item).map_err(|e| refuse(index, kind, e))?;
                push(&mut out.turns, Role::Assistant, vec![call], index);
                push(&mut out.turns, Role::Tool, vec![result], index);
                continue;
            }
            ("item_reference", _) => {
                return Err(refuse(
                    index,
                    kind,
                    "Keel keeps no items to refer to; send the item itself",
                ));
            }
            (other, _) => {
                return Err(refuse(
                    index,
                    other,
                    "Keel cannot take this item; send messages, function_call, function_call_output or reasoning items",
                ));
            }
        };
        push(&mut out.turns, role, vec![part], index);
    }
    Ok(out)
}

/// Adds parts to the last turn when it has the same role, else starts a turn.
fn push(turns: &mut Vec<Turn>, role: Role, parts: Vec<Part>, index: usize) {
    match turns.last_mut() {
        Some(last) if last.role == role => last.parts.extend(parts),
        _ => turns.push(Turn {
            role,
            parts,
            first: index,
        }),
    }
}

fn content_list(content: Option<&Value>) -> Result<Vec<Value>, String> {
    match content {
        Some(Value::String(text)) => Ok(vec![
            serde_json::json!({"type": "input_text", "text": text}),
        ]),
        Some(Value::Array(parts)) => Ok(parts.clone()),
        _ => Err("`content` must be a string or a list of content parts".to_owned()),
    }
}

fn part_text(part: &Value, index: usize) -> Result<String, String> {
    part.get("text")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or(format!("content[{index}] needs `text`"))
}

fn kind_of(part: &Value) -> &str {
    part.get("type").and_then(Value::as_str).unwrap_or("(none)")
}

fn system_text(content: Option<&Value>) -> Result<String, String> {
    let mut text = String::new();
    for (i, part) in content_list(content)?.iter().enumerate() {
        match kind_of(part) {
            "input_text" | "text" => text.push_str(&part_text(part, i)?),
            other => {
                return Err(format!(
                    "content[{i}] is `{other}`; only text is a system prompt"
                ));
            }
        }
    }
    Ok(text)
}

fn user_parts(content: Option<&Value>) -> Result<Vec<Part>, String> {
    let mut out = Vec::new();
    for (i, part) in content_list(content)?.iter().enumerate() {
        out.push(match kind_of(part) {
            "input_text" | "text" => Part::text(part_text(part, i)?),
            "input_image" => {
                let url = part
                    .get("image_url")
                    .and_then(Value::as_str)
                    .ok_or(format!("content[{i}] (input_image): Keel takes images by `image_url` (a URL or a data URL), not by `file_id`"))?;
                file(url, image_type(url))
            }
            "input_file" => {
                if let Some(data) = part.get("file_data").and_then(Value::as_str) {
                    file(data, "application/octet-stream")
                } else if let Some(url) = part.get("file_url").and_then(Value::as_str) {
                    file(url, "application/octet-stream")
                } else {
                    return Err(format!(
                        "content[{i}] (input_file): Keel takes files by `file_data` or `file_url`, not by `file_id`"
                    ));
                }
            }
            other => return Err(format!("content[{i}] is `{other}`, which a user message cannot hold")),
        });
    }
    Ok(out)
}

fn assistant_parts(content: Option<&Value>) -> Result<Vec<Part>, String> {
    let mut out = Vec::new();
    for (i, part) in content_list(content)?.iter().enumerate() {
        out.push(match kind_of(part) {
            "output_text" | "input_text" | "text" => Part::text(part_text(part, i)?),
            "refusal" => Part::refusal(
                part.get("refusal")
                    .and_then(Value::as_str)
                    .ok_or(format!("content[{i}] needs `refusal`"))?,
            ),
            other => {
                return Err(format!(
                    "content[{i}] is `{other}`, which an assistant message cannot hold"
                ));
            }
        });
    }
    Ok(out)
}

/// A file part: a data URL is the file itself (its media type wins), anything else a link.
fn file(url: &str, media_type: &str) -> Part {
    let inline = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"));
    let (media_type, data, url) = match inline {
        Some((media, data)) if !media.is_empty() => (media.to_owned(), Some(data.to_owned()), None),
        Some((_, data)) => (media_type.to_owned(), Some(data.to_owned()), None),
        None => (media_type.to_owned(), None, Some(url.to_owned())),
    };
    Part::new(PartKind::File {
        media_type,
        data,
        url,
    })
}

/// The media type of an image link, by its extension (`image/*` when it names none).
fn image_type(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let extension = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => "image/*",
    }
}

fn required<'a>(item: &'a Value, key: &str) -> Result<&'a str, String> {
    item.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or(format!("`{key}` is required"))
}

fn function_call(item: &Value) -> Result<Part, String> {
    let arguments = item
        .get("arguments")
        .and_then(Value::as_str)
        .unwrap_or("{}");
    Ok(Part::tool_call(
        required(item, "call_id")?,
        required(item, "name")?,
        arguments,
        false,
    ))
}

/// A call of one of Keel's own tools (`mcp_call`, `server_label: "keel"`) and its result.
fn keel_tool(item: &Value) -> Result<(Part, Part), String> {
    let id = required(item, "id")?;
    let name = required(item, "name")?;
    let arguments = item
        .get("arguments")
        .and_then(Value::as_str)
        .unwrap_or("{}");
    let (result, is_error) = match (item.get("output"), item.get("error")) {
        (_, Some(error)) if !error.is_null() => (error.clone(), true),
        (Some(output), _) if !output.is_null() => (output.clone(), false),
        _ => return Err("a call of Keel's own tool needs its `output` or `error`".to_owned()),
    };
    Ok((
        Part::tool_call(id, name, arguments, false),
        Part::tool_result(id, name, result, is_error, false),
    ))
}

/// A tool result; its tool's name is filled in from its call ([`pair_calls`]).
fn function_output(item: &Value) -> Result<Part, String> {
    let output = match item.get("output") {
        Some(output @ (Value::String(_) | Value::Array(_))) => output.clone(),
        _ => return Err("`output` must be a string or a list of content parts".to_owned()),
    };
    Ok(Part::tool_result(
        required(item, "call_id")?,
        "",
        output,
        false,
        false,
    ))
}

fn reasoning(item: &Value) -> Option<Part> {
    let texts: Vec<&str> = ["summary", "content"]
        .iter()
        .filter_map(|key| item.get(*key).and_then(Value::as_array))
        .flatten()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .filter(|t| !t.is_empty())
        .collect();
    (!texts.is_empty()).then(|| Part::reasoning(texts.join("\n\n"), None))
}

/// Checks that a whole conversation (no `previous_response_id`) pairs every
/// `function_call` with exactly one later `function_call_output` and the other way round,
/// names each result's tool after its call, and ends where a model can answer: with a user
/// message or with function outputs.
pub(crate) fn pair_calls(conversation: &mut Conversation) -> Result<(), String> {
    let mut calls: HashMap<String, (String, bool)> = HashMap::new();
    for turn in &mut conversation.turns {
        for part in &mut turn.parts {
            match &mut part.kind {
                PartKind::ToolCall {
                    tool_call_id,
                    tool_name,
                    ..
                } if calls
                    .insert(tool_call_id.clone(), (tool_name.clone(), false))
                    .is_some() =>
                {
                    return Err(format!(
                        "input[{}] (function_call): call_id `{tool_call_id}` is used twice",
                        turn.first
                    ));
                }
                PartKind::ToolResult {
                    tool_call_id,
                    tool_name,
                    ..
                } => match calls.get_mut(tool_call_id.as_str()) {
                    Some((name, answered @ false)) => {
                        *answered = true;
                        tool_name.clone_from(name);
                    }
                    Some((_, true)) => {
                        return Err(format!(
                            "input[{}] (function_call_output): call_id `{tool_call_id}` is answered twice",
                            turn.first
                        ));
                    }
                    None => {
                        return Err(format!(
                            "input[{}] (function_call_output): no function_call item with call_id `{tool_call_id}` comes before it; without previous_response_id the input must hold the call too",
                            turn.first
                        ));
                    }
                },
                _ => {}
            }
        }
    }
    let mut open: Vec<&String> = calls
        .iter()
        .filter(|(_, (_, answered))| !answered)
        .map(|(id, _)| id)
        .collect();
    open.sort();
    if let Some(id) = open.first() {
        return Err(format!(
            "function_call `{id}` has no function_call_output item; the input must answer every call it holds"
        ));
    }
    match conversation.turns.last() {
        Some(Turn {
            role: Role::User | Role::Tool,
            ..
        }) => Ok(()),
        Some(turn) => Err(format!(
            "input[{}] (assistant): the input must end with a user message or function_call_output items, for the model to answer",
            turn.first
        )),
        None => Err("`input` holds no user message to answer".to_owned()),
    }
}

/// What a turn after `previous_response_id` may be: a user message or answers to the
/// previous response's calls; earlier turns are stored already.
pub(crate) fn single_turn(conversation: Conversation) -> Result<Turn, String> {
    let mut turns = conversation.turns.into_iter();
    let turn = turns
        .next()
        .ok_or("`input` holds no user message or function_call_output item")?;
    let extra = turns.next();
    match (turn.role, extra) {
        (Role::User | Role::Tool, None) => Ok(turn),
        (Role::Assistant | Role::System, _) => Err(refuse(
            turn.first,
            "assistant",
            "with previous_response_id the conversation is stored already: send only the new user message or function_call_output items, or send the whole conversation without previous_response_id",
        )),
        (_, Some(next)) => Err(refuse(
            next.first,
            if next.role == Role::User {
                "user message"
            } else {
                "item"
            },
            "with previous_response_id the input is one turn: a user message, or function_call_output items",
        )),
    }
}

#[cfg(test)]
mod tests;
