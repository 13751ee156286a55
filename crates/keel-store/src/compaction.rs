//! The prompt history of a compacted chat, as a pure function of its stored messages.
//!
//! A summary message is a boundary: the model starts from the summary (as a user message
//! with [`keel_core::SUMMARY_PREFIX`]) and sees only what was committed after it. User
//! messages that were still unanswered when the summary was written are carried over
//! verbatim, so a compaction never swallows the task the model has yet to start; so is a
//! step waiting for client-side results, so that the results answer a call the model was
//! sent. Notices
//! that a compaction happened are for people and never reach the model.

use keel_core::{Message, Part, Role};

use crate::orphans::open_calls_at_end;
use crate::types::{MessageKind, StoredMessage};

/// The messages a prompt is built from, in order, before orphan repair.
pub fn prompt_messages(stored: &[StoredMessage]) -> Vec<Message> {
    let normal = |m: &&StoredMessage| m.kind == MessageKind::Normal;
    let Some(boundary) = stored.iter().rposition(|m| m.kind == MessageKind::Summary) else {
        return stored
            .iter()
            .filter(normal)
            .map(StoredMessage::to_message)
            .collect();
    };
    let before = &stored[..boundary];
    let carried_from = waiting_step(before).unwrap_or_else(|| {
        before
            .iter()
            .rposition(|m| m.kind == MessageKind::Normal && m.role != Role::User)
            .map_or(0, |i| i + 1)
    });
    let mut prompt = vec![Message::summary(&stored[boundary].to_message().text())];
    prompt.extend(
        before[carried_from..]
            .iter()
            .filter(normal)
            .map(StoredMessage::to_message),
    );
    prompt.extend(
        stored[boundary + 1..]
            .iter()
            .filter(normal)
            .map(StoredMessage::to_message),
    );
    prompt
}

/// Where the step that ends `before` starts, when it waits for client-side results: the
/// results come after the boundary, and a provider (and the orphan repair) drops a result
/// whose call it was not sent, so the calling message stays in the prompt.
fn waiting_step(before: &[StoredMessage]) -> Option<usize> {
    let normal: Vec<(usize, &StoredMessage)> = before
        .iter()
        .enumerate()
        .filter(|(_, m)| m.kind == MessageKind::Normal)
        .collect();
    let tail = &normal[normal.len().saturating_sub(2)..];
    let recent: Vec<(Role, &[Part])> = tail.iter().map(|(_, m)| (m.role, &m.parts[..])).collect();
    if open_calls_at_end(&recent).is_empty() {
        return None;
    }
    tail.iter()
        .rev()
        .find(|(_, m)| m.role == Role::Assistant)
        .map(|(i, _)| *i)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use keel_core::SUMMARY_PREFIX;
    use uuid::Uuid;

    use super::*;

    fn stored(id: i64, role: Role, text: &str, kind: MessageKind) -> StoredMessage {
        StoredMessage {
            id,
            chat_id: Uuid::nil(),
            role,
            parts: vec![Part::text(text)],
            content_version: 1,
            usage: None,
            context_limit: None,
            runtime_ms: None,
            interrupted: false,
            provider_response_id: None,
            event_seq: id,
            created_at: Utc::now(),
            kind,
            finish_reason: None,
            parent_id: None,
            siblings: Vec::new(),
        }
    }

    fn texts(messages: &[Message]) -> Vec<String> {
        messages.iter().map(Message::text).collect()
    }

    #[test]
    fn without_a_summary_every_normal_message_is_sent() {
        let history = [
            stored(1, Role::User, "hi", MessageKind::Normal),
            stored(2, Role::Assistant, "hello", MessageKind::Normal),
        ];
        assert_eq!(texts(&prompt_messages(&history)), ["hi", "hello"]);
    }

    #[test]
    fn the_latest_summary_replaces_everything_before_it() {
        let history = [
            stored(1, Role::User, "old task", MessageKind::Normal),
            stored(2, Role::Assistant, "S1", MessageKind::Summary),
            stored(3, Role::System, "notice", MessageKind::CompactionNotice),
            stored(4, Role::Assistant, "more work", MessageKind::Normal),
            stored(5, Role::Assistant, "S2", MessageKind::Summary),
            stored(6, Role::System, "notice", MessageKind::CompactionNotice),
            stored(7, Role::User, "next", MessageKind::Normal),
        ];
        let prompt = prompt_messages(&history);
        assert_eq!(
            texts(&prompt),
            [format!("{SUMMARY_PREFIX}\n\nS2"), "next".to_owned()]
        );
        assert_eq!(prompt[0].role, Role::User);
    }

    #[test]
    fn unanswered_user_messages_are_carried_over() {
        let history = [
            stored(1, Role::User, "first", MessageKind::Normal),
            stored(2, Role::Assistant, "done", MessageKind::Normal),
            stored(3, Role::User, "then this", MessageKind::Normal),
            stored(4, Role::User, "and this", MessageKind::Normal),
            stored(5, Role::Assistant, "S", MessageKind::Summary),
        ];
        assert_eq!(
            texts(&prompt_messages(&history)),
            [
                format!("{SUMMARY_PREFIX}\n\nS"),
                "then this".into(),
                "and this".into()
            ]
        );
    }

    #[test]
    fn a_step_waiting_for_client_results_is_carried_over_with_its_call() {
        let mut calling = stored(2, Role::Assistant, "asking", MessageKind::Normal);
        calling
            .parts
            .push(Part::tool_call("c1", "get_weather", "{}", false));
        let mut results = stored(5, Role::Tool, "", MessageKind::Normal);
        results.parts = vec![Part::tool_result(
            "c1",
            "get_weather",
            serde_json::json!("sunny"),
            false,
            false,
        )];
        let history = [
            stored(1, Role::User, "weather?", MessageKind::Normal),
            calling,
            stored(3, Role::Assistant, "S", MessageKind::Summary),
            stored(4, Role::System, "notice", MessageKind::CompactionNotice),
            results,
        ];
        let prompt = crate::repair_orphans(prompt_messages(&history));
        let roles: Vec<Role> = prompt.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool]);
        assert!(prompt[2].parts.iter().any(|p| matches!(
            &p.kind,
            keel_core::PartKind::ToolResult { tool_call_id, .. } if tool_call_id == "c1"
        )));
    }
}
