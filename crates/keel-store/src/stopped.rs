//! Which reply a user may continue after stopping it, as one pure decision.
//!
//! `POST /chats/{id}/continue` asks the model to carry on a reply the user stopped; the
//! worker that then claims the chat finds the same message at the end of the history and
//! continues it. Both ask [`stopped_reply`]:
//!
//! | last visible message | continuable |
//! | --- | --- |
//! | assistant, interrupted, with text, no tool call, no refusal | yes: its text is the prefix |
//! | assistant, interrupted, with tool calls (their results follow it) | no |
//! | assistant, interrupted, with a refusal | no: a refusal is not text to carry on |
//! | assistant, interrupted, no text (reasoning only) | no: nothing to carry on from |
//! | assistant, not interrupted | no: the model ended it |
//! | user, tool or system message | no |

use keel_core::{Part, PartKind, Role};

/// The text of a stopped reply the model can be asked to continue, or `None`.
pub fn stopped_reply(role: Role, interrupted: bool, parts: &[Part]) -> Option<String> {
    if role != Role::Assistant || !interrupted {
        return None;
    }
    let mut text = String::new();
    for part in parts {
        match &part.kind {
            PartKind::Text { text: t } => text.push_str(t),
            PartKind::ToolCall { .. } | PartKind::ToolResult { .. } | PartKind::Refusal { .. } => {
                return None;
            }
            _ => {}
        }
    }
    (!text.trim().is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> Part {
        Part::new(PartKind::ToolCall {
            tool_call_id: "c1".into(),
            tool_name: "read_file".into(),
            args: "{\"pa".into(),
            provider_executed: false,
            provider_metadata: None,
        })
    }

    #[test]
    fn only_a_stopped_assistant_text_is_continued() {
        let text = [Part::reasoning("hmm", None), Part::text("Once upon a ")];
        assert_eq!(
            stopped_reply(Role::Assistant, true, &text).as_deref(),
            Some("Once upon a ")
        );
        assert_eq!(stopped_reply(Role::Assistant, false, &text), None);
        assert_eq!(stopped_reply(Role::User, true, &text), None);
        assert_eq!(stopped_reply(Role::Tool, true, &text), None);
        let with_call = [Part::text("Let me look"), call()];
        assert_eq!(stopped_reply(Role::Assistant, true, &with_call), None);
        let refused = [Part::new(PartKind::Refusal { text: "no".into() })];
        assert_eq!(stopped_reply(Role::Assistant, true, &refused), None);
        let thinking = [Part::reasoning("hmm", None), Part::text("  ")];
        assert_eq!(stopped_reply(Role::Assistant, true, &thinking), None);
    }
}
