//! A chat's current branch as Markdown, for people: the title, the model and system prompt,
//! then each message under its speaker, with reasoning folded away, tool calls and results
//! as code blocks. Summaries of compacted history are left out, as clients never see them.

use std::collections::HashMap;
use std::fmt::Write as _;

use keel_core::{PartKind, Role};
use keel_store::{ChatExport, MessageKind, StoredMessage};

/// The current branch of `export`, first message first.
fn current_branch(export: &ChatExport) -> Vec<&StoredMessage> {
    let by_id: HashMap<i64, &StoredMessage> = export.messages.iter().map(|m| (m.id, m)).collect();
    let mut branch = Vec::new();
    let mut at = by_id.get(&export.chat.leaf_id);
    while let Some(message) = at {
        branch.push(*message);
        // Ids grow along a path: a link that does not point back is corrupt and ends it.
        at = message
            .parent_id
            .filter(|parent| *parent < message.id)
            .and_then(|parent| by_id.get(&parent));
    }
    branch.reverse();
    branch
}

/// The Markdown document of the chat's current branch.
pub(crate) fn render(export: &ChatExport) -> String {
    let chat = &export.chat;
    let mut out = String::new();
    let title = chat.title.as_deref().unwrap_or("Untitled chat");
    let _ = writeln!(out, "# {}\n", one_line(title));
    let _ = writeln!(out, "Model: `{}`", chat.model);
    let _ = writeln!(
        out,
        "Created: {}\n",
        crate::api::dto::timestamp(&chat.created_at)
    );
    if let Some(system) = chat.system.as_deref() {
        let _ = writeln!(out, "## System prompt\n\n{}\n", quoted(system));
    }
    for message in current_branch(export) {
        if message.kind == MessageKind::Summary {
            continue;
        }
        let speaker = match (message.kind, message.role) {
            (MessageKind::CompactionNotice, _) => "Notice",
            (_, Role::User) => "User",
            (_, Role::Assistant) => "Assistant",
            (_, Role::Tool) => "Tool",
            (_, Role::System) => "System",
        };
        let _ = writeln!(out, "## {speaker}\n");
        for part in &message.parts {
            render_part(&mut out, &part.kind);
        }
        if message.interrupted {
            out.push_str("*(interrupted)*\n\n");
        }
    }
    out
}

fn render_part(out: &mut String, part: &PartKind) {
    match part {
        PartKind::Text { text } => {
            let _ = writeln!(out, "{}\n", text.trim_end());
        }
        PartKind::Reasoning { text, .. } => {
            let _ = writeln!(
                out,
                "<details><summary>Reasoning</summary>\n\n{}\n\n</details>\n",
                text.trim_end()
            );
        }
        PartKind::ToolCall {
            tool_name, args, ..
        } => {
            let _ = writeln!(
                out,
                "Tool call `{tool_name}`:\n\n{}\n",
                fenced("json", args)
            );
        }
        PartKind::ToolResult {
            tool_name,
            result,
            is_error,
            ..
        } => {
            let label = if *is_error { "Error from" } else { "Result of" };
            let text = match result {
                serde_json::Value::String(text) => text.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            let _ = writeln!(out, "{label} `{tool_name}`:\n\n{}\n", fenced("", &text));
        }
        PartKind::Refusal { text } => {
            let _ = writeln!(out, "Refused: {}\n", text.trim_end());
        }
        PartKind::Source { url, title } => {
            let _ = writeln!(
                out,
                "Source: [{}](<{url}>)\n",
                one_line(title.as_deref().unwrap_or(url))
            );
        }
        PartKind::File {
            media_type,
            data,
            url,
        } => match (url, data) {
            (Some(url), _) => {
                let _ = writeln!(out, "File ({media_type}): <{url}>\n");
            }
            (None, Some(data)) => {
                let _ = writeln!(out, "File ({media_type}, {} bytes of base64)\n", data.len());
            }
            (None, None) => {
                let _ = writeln!(out, "File ({media_type})\n");
            }
        },
    }
}

/// `text` in a code fence longer than any run of backticks inside it, so it cannot close
/// the fence early.
fn fenced(language: &str, text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}{language}\n{}\n{fence}", text.trim_end())
}

/// `text` as a block quote.
fn quoted(text: &str) -> String {
    text.lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_outlasts_the_backticks_inside() {
        assert_eq!(fenced("json", "{}"), "```json\n{}\n```");
        assert_eq!(fenced("", "a ```` b"), "`````\na ```` b\n`````");
    }

    #[test]
    fn a_system_prompt_is_quoted_line_by_line() {
        assert_eq!(quoted("be brief\nbe kind"), "> be brief\n> be kind");
    }
}
