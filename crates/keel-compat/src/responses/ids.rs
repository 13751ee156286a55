//! Response ids and where a response sits in its chat's message tree.
//!
//! A response is one run of one chat, started by one input message (a user message, or the
//! tool message holding a client's function outputs). Its id names the chat and that
//! message's id, which never changes: an edit or a branch switch renumbers the events of a
//! branch, not its messages, so the id of a response on a branch that is no longer current
//! still names it (and a `previous_response_id` of it forks from there).

use keel_core::{PartKind, Role};
use keel_store::{ChatId, StoredMessage};

/// What a response id names in its chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anchor {
    /// The id of the input message.
    Message(i64),
    /// The event position of the input (ids handed out before ids named messages; such a
    /// position holds only while the chat's current branch is the one it was on).
    Position(i64),
}

/// `resp_` + the chat id (32 hex digits) + `m` + the input message's id (16 hex digits).
pub(crate) fn response_id(chat: ChatId, message: i64) -> String {
    format!("resp_{}m{:016x}", chat.simple(), message)
}

/// The chat and input a response id names (`resp_` + 48 hex digits: a position).
pub(crate) fn parse_response_id(id: &str) -> Option<(ChatId, Anchor)> {
    let rest = id.strip_prefix("resp_")?;
    if !rest.is_ascii() || rest.len() < 32 {
        return None;
    }
    let (chat, tail) = rest.split_at(32);
    let hex = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let anchor = match tail.strip_prefix('m') {
        Some(message) if hex(message) => Anchor::Message(i64::from_str_radix(message, 16).ok()?),
        None if hex(tail) => Anchor::Position(i64::from_str_radix(tail, 16).ok()?),
        _ => return None,
    };
    if !chat.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((ChatId::parse_str(chat).ok()?, anchor))
}

/// The input that follows a response, among the messages after its own input on its
/// branch (in order): the next user message, or the next tool message answering one of the
/// client's function calls. `None` when the response is the newest of its branch.
pub(crate) fn next_input<'a>(
    after: &'a [StoredMessage],
    client_tools: &[String],
) -> Option<&'a StoredMessage> {
    after.iter().find(|m| match m.role {
        Role::User => true,
        Role::Tool => m.parts.iter().any(|p| {
            matches!(&p.kind, PartKind::ToolResult { tool_name, provider_executed: false, .. }
                if client_tools.contains(tool_name))
        }),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ai_sdk::messages::tests::stored;
    use keel_core::Part;
    use serde_json::json;

    #[test]
    fn response_ids_name_a_chat_and_a_message() {
        let chat = uuid::Uuid::new_v4();
        let id = response_id(chat, 42);
        assert!(id.starts_with("resp_"));
        assert_eq!(parse_response_id(&id), Some((chat, Anchor::Message(42))));
        let legacy = format!("resp_{}{:016x}", chat.simple(), 7);
        assert_eq!(
            parse_response_id(&legacy),
            Some((chat, Anchor::Position(7)))
        );
        for bad in [
            "resp_",
            "resp_xyz",
            "nope",
            &id[..id.len() - 1],
            &legacy[..legacy.len() - 1],
        ] {
            assert_eq!(parse_response_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_next_input_is_a_user_message_or_answers_to_client_calls() {
        let server = stored(
            3,
            Role::Tool,
            vec![Part::tool_result(
                "s",
                "read_file",
                json!("x"),
                false,
                false,
            )],
        );
        let client = stored(
            5,
            Role::Tool,
            vec![Part::tool_result("c", "pick", json!("B"), false, false)],
        );
        let after = vec![
            stored(
                2,
                Role::Assistant,
                vec![Part::tool_call("s", "read_file", "{}", false)],
            ),
            server,
            stored(
                4,
                Role::Assistant,
                vec![Part::tool_call("c", "pick", "{}", false)],
            ),
            client,
            stored(6, Role::Assistant, vec![Part::text("B it is")]),
            stored(7, Role::User, vec![Part::text("thanks")]),
        ];
        let tools = vec!["pick".to_owned()];
        assert_eq!(next_input(&after, &tools).map(|m| m.id), Some(5));
        assert_eq!(next_input(&after[4..], &tools).map(|m| m.id), Some(7));
        assert_eq!(next_input(&after[..3], &tools), None);
    }
}
