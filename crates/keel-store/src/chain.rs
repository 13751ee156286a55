//! Which stored response a chained prompt continues from (OpenAI Responses
//! `previous_response_id`), as a pure function of the stored messages.
//!
//! A step's response id is stored only when the step finished cleanly in one attempt (the
//! provider then holds exactly what the step kept). A prompt chains onto the last assistant
//! message of the prompt history when it carries such an id, and sends only what follows
//! it. Anything else — no assistant message since the latest summary, a last assistant
//! message that was interrupted, retried, continued or resumed, or nothing after it — sends
//! the full history: chaining onto an earlier response would drop what the provider never
//! saw, and chaining onto the last message itself would send it twice.

use keel_core::Role;

use crate::types::{MessageKind, StoredMessage};

/// The response id the next prompt continues from, if any.
pub fn chain_anchor(stored: &[StoredMessage]) -> Option<String> {
    // A summary replaces everything before it; the provider's chain still holds it all.
    let since = stored
        .iter()
        .rposition(|m| m.kind == MessageKind::Summary)
        .map_or(0, |i| i + 1);
    let normal: Vec<&StoredMessage> = stored[since..]
        .iter()
        .filter(|m| m.kind == MessageKind::Normal)
        .collect();
    let at = normal.iter().rposition(|m| m.role == Role::Assistant)?;
    let last = normal[at];
    // A prompt that ends with that very reply continues it as a partial reply the provider
    // never stored; chaining onto the reply would send it twice.
    if last.interrupted || at + 1 == normal.len() {
        return None;
    }
    last.provider_response_id
        .clone()
        .filter(|id| !id.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use keel_core::Part;
    use uuid::Uuid;

    use super::*;

    fn stored(id: i64, role: Role, response: Option<&str>, kind: MessageKind) -> StoredMessage {
        StoredMessage {
            id,
            chat_id: Uuid::nil(),
            role,
            parts: vec![Part::text("x")],
            content_version: 1,
            usage: None,
            context_limit: None,
            runtime_ms: None,
            interrupted: false,
            provider_response_id: response.map(str::to_owned),
            event_seq: id,
            created_at: Utc::now(),
            kind,
            finish_reason: None,
            parent_id: None,
            siblings: Vec::new(),
        }
    }

    const N: MessageKind = MessageKind::Normal;

    #[test]
    fn chains_onto_the_last_assistant_message_with_a_response_id() {
        let history = [
            stored(1, Role::User, None, N),
            stored(2, Role::Assistant, Some("resp_1"), N),
            stored(3, Role::User, None, N),
            stored(4, Role::Assistant, Some("resp_2"), N),
            stored(5, Role::User, None, N),
        ];
        assert_eq!(chain_anchor(&history).as_deref(), Some("resp_2"));
    }

    #[test]
    fn submitted_tool_results_chain_onto_the_step_that_called_the_tools() {
        let history = [
            stored(1, Role::User, None, N),
            stored(2, Role::Assistant, Some("resp_1"), N),
            stored(3, Role::Tool, None, N),
        ];
        assert_eq!(chain_anchor(&history).as_deref(), Some("resp_1"));
    }

    #[test]
    fn a_last_reply_without_a_clean_response_sends_the_full_history() {
        let history = [
            stored(1, Role::User, None, N),
            stored(2, Role::Assistant, Some("resp_1"), N),
            stored(3, Role::User, None, N),
            stored(4, Role::Assistant, None, N),
            stored(5, Role::User, None, N),
        ];
        assert_eq!(chain_anchor(&history), None, "never an older response");
        let mut interrupted = history;
        interrupted[3].provider_response_id = Some("resp_2".into());
        interrupted[3].interrupted = true;
        assert_eq!(chain_anchor(&interrupted), None);
    }

    #[test]
    fn a_summary_ends_the_chain_before_it() {
        let history = [
            stored(1, Role::User, None, N),
            stored(2, Role::Assistant, Some("resp_1"), N),
            stored(3, Role::Assistant, None, MessageKind::Summary),
            stored(4, Role::System, None, MessageKind::CompactionNotice),
            stored(5, Role::User, None, N),
        ];
        assert_eq!(chain_anchor(&history), None);
        let mut carried_on = history.to_vec();
        carried_on.push(stored(6, Role::Assistant, Some("resp_3"), N));
        carried_on.push(stored(7, Role::User, None, N));
        assert_eq!(chain_anchor(&carried_on).as_deref(), Some("resp_3"));
    }

    #[test]
    fn a_prompt_that_ends_with_the_reply_itself_does_not_chain() {
        let history = [
            stored(1, Role::User, None, N),
            stored(2, Role::Assistant, Some("resp_1"), N),
            stored(3, Role::System, None, MessageKind::CompactionNotice),
        ];
        assert_eq!(chain_anchor(&history), None);
    }

    #[test]
    fn a_new_chat_has_nothing_to_chain_onto() {
        assert_eq!(chain_anchor(&[stored(1, Role::User, None, N)]), None);
        assert_eq!(chain_anchor(&[]), None);
    }
}
