//! Builds a step's messages from what was streamed and what the tools returned.
//!
//! One assistant message (text and reasoning skipped when blank, tool calls, files, and each
//! provider-executed result placed right after its call) and one tool message holding the
//! local results in call order. Pure functions: no I/O, no clock of their own.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use keel_core::{INTERRUPTED_RESULT, Message, Part, PartKind, Role};
use serde_json::Value;

use crate::accumulate::{Block, StepAccumulator, block_part};
use crate::execute::FinishedCall;

/// The assistant message of a step, or `None` when it has no content.
/// `with_sources` keeps sources (for storage and display); prompts never carry them.
pub fn assistant_message(
    acc: &StepAccumulator,
    with_sources: bool,
    now: DateTime<Utc>,
) -> Option<Message> {
    let mut provider_results: HashMap<&str, &Part> = HashMap::new();
    for block in &acc.blocks {
        if let Block::ProviderResult(part) = block
            && let Some(id) = part.tool_call_id()
        {
            provider_results.insert(id, part);
        }
    }
    let mut parts = Vec::new();
    let mut placed = Vec::new();
    for block in &acc.blocks {
        match block {
            Block::ProviderResult(_) => {}
            Block::ToolCall(call) => {
                parts.extend(block_part(block, now));
                if let Some(result) = provider_results.get(call.tool_call_id.as_str()) {
                    parts.push((*result).clone());
                    placed.push(call.tool_call_id.as_str());
                }
            }
            other => parts.extend(block_part(other, now)),
        }
    }
    // A provider result whose call never streamed still belongs to the reply.
    for block in &acc.blocks {
        if let Block::ProviderResult(part) = block
            && !part.tool_call_id().is_some_and(|id| placed.contains(&id))
        {
            parts.push(part.clone());
        }
    }
    if with_sources {
        for (url, title) in &acc.sources {
            parts.push(
                Part::new(PartKind::Source {
                    url: url.clone(),
                    title: title.clone(),
                })
                .at(now),
            );
        }
    }
    (!parts.is_empty()).then(|| Message::new(Role::Assistant, parts))
}

/// The tool message of a step: finished local results in call order, then — when
/// `interrupted_ids` is given — a synthetic error result for each of those calls.
pub fn tool_message(
    finished: &[FinishedCall],
    interrupted: &[(String, String)],
    now: DateTime<Utc>,
) -> Option<Message> {
    let mut parts: Vec<Part> = finished
        .iter()
        .map(|call| {
            let (result, is_error) = call.output.clone().into_result();
            Part::tool_result(
                call.request.tool_call_id.clone(),
                call.request.tool_name.clone(),
                result,
                is_error,
                false,
            )
            .at(call.finished_at)
        })
        .collect();
    parts.extend(interrupted.iter().map(|(id, name)| {
        Part::tool_result(
            id.clone(),
            name.clone(),
            Value::String(INTERRUPTED_RESULT.to_owned()),
            true,
            false,
        )
        .at(now)
    }));
    (!parts.is_empty()).then(|| Message::new(Role::Tool, parts))
}

/// Drops parts a prompt must not carry (sources).
pub fn for_prompt(message: &Message) -> Message {
    let parts = message
        .parts
        .iter()
        .filter(|p| !matches!(p.kind, PartKind::Source { .. }))
        .cloned()
        .collect();
    Message::new(message.role, parts)
}
