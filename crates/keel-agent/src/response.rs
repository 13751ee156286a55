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

/// The partial reply a continuation carries on: its text, with the calls the provider ran
/// and their results where they came, since the provider must see the search it already
/// made (Anthropic takes the blocks back as they came, Responses the items). A call the
/// provider had not answered when the stream broke is left out, as in stored history. The
/// text alone when the step ran nothing at the provider, or when its text is not `prefix`.
pub fn continued_reply(acc: &StepAccumulator, prefix: &str, now: DateTime<Utc>) -> Message {
    let plain = || Message::assistant(prefix);
    let Some(message) = assistant_message(acc, false, now) else {
        return plain();
    };
    let answered: Vec<String> = message
        .parts
        .iter()
        .filter(|p| {
            matches!(
                p.kind,
                PartKind::ToolResult {
                    provider_executed: true,
                    ..
                }
            )
        })
        .filter_map(|p| p.tool_call_id().map(str::to_owned))
        .collect();
    if answered.is_empty() {
        return plain();
    }
    let parts: Vec<Part> = message
        .parts
        .into_iter()
        .filter(|p| match &p.kind {
            PartKind::Text { .. } => true,
            PartKind::ToolCall {
                provider_executed: true,
                tool_call_id,
                ..
            } => answered.contains(tool_call_id),
            PartKind::ToolResult {
                provider_executed, ..
            } => *provider_executed,
            _ => false,
        })
        .collect();
    let continued = Message::new(Role::Assistant, parts);
    if continued.text() == prefix {
        continued
    } else {
        plain()
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use keel_core::{Clock, StreamEvent, SystemClock};
    use serde_json::json;

    use super::*;
    use crate::sink::NullSink;

    fn step(events: Vec<StreamEvent>) -> StepAccumulator {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let mut acc = StepAccumulator::new();
        for event in events {
            acc.apply(event, &NullSink, &clock);
        }
        acc
    }

    fn search(id: &str) -> StreamEvent {
        StreamEvent::ToolCall {
            id: id.into(),
            tool_name: "web_search".into(),
            args: "{\"query\":\"q\"}".into(),
            provider_executed: true,
        }
    }

    fn text(delta: &str) -> StreamEvent {
        StreamEvent::TextDelta {
            id: "t".into(),
            delta: delta.into(),
        }
    }

    #[test]
    fn a_continuation_carries_the_answered_searches_before_the_text() {
        let acc = step(vec![
            search("s1"),
            StreamEvent::ToolResult {
                id: "s1".into(),
                tool_name: "web_search".into(),
                result: json!([]),
                is_error: false,
            },
            search("s2"),
            text("Keel is"),
        ]);
        let message = continued_reply(&acc, "Keel is", Utc::now());
        let kinds: Vec<(&str, Option<&str>)> = message
            .parts
            .iter()
            .map(|p| match &p.kind {
                PartKind::ToolCall { .. } => ("call", p.tool_call_id()),
                PartKind::ToolResult { .. } => ("result", p.tool_call_id()),
                _ => ("text", None),
            })
            .collect();
        assert_eq!(
            kinds,
            [("call", Some("s1")), ("result", Some("s1")), ("text", None)],
            "the unanswered search s2 stays out"
        );
        assert_eq!(message.text(), "Keel is");
    }

    #[test]
    fn a_step_restored_from_its_snapshot_keeps_its_answered_search() {
        let acc = step(vec![
            search("s1"),
            StreamEvent::ToolResult {
                id: "s1".into(),
                tool_name: "web_search".into(),
                result: json!([{"url": "https://a/"}]),
                is_error: false,
            },
            search("s2"),
            text("Keel is"),
        ]);
        let snapshot = crate::StreamSnapshot::of(&acc);
        assert_eq!(snapshot.provider_calls.len(), 1, "{snapshot:?}");
        assert!(snapshot.completed_calls.is_empty() && snapshot.in_flight.is_none());
        let back: crate::StreamSnapshot =
            serde_json::from_value(serde_json::to_value(&snapshot).unwrap()).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let restored = back.restore(&clock);
        let message = continued_reply(&restored, "Keel is", Utc::now());
        assert_eq!(message.parts.len(), 3, "{message:?}");
        assert!(matches!(
            &message.parts[1].kind,
            PartKind::ToolResult { result, provider_executed: true, .. }
                if result == &json!([{"url": "https://a/"}])
        ));
    }

    #[test]
    fn without_a_provider_result_or_with_other_text_the_continuation_is_the_text() {
        let plain = step(vec![text("Keel is")]);
        assert_eq!(
            continued_reply(&plain, "Keel is", Utc::now()),
            Message::assistant("Keel is")
        );
        let elsewhere = step(vec![search("s1"), text("Keel")]);
        assert_eq!(
            continued_reply(&elsewhere, "Other", Utc::now()),
            Message::assistant("Other")
        );
    }
}
