//! A protocol-neutral view of a request: who said what, in order.
//!
//! Each protocol module reduces its request body to a [`Conversation`]; the planner only
//! needs the last user text, the assistant turns after it and the trailing tool results.

/// One entry of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// A user message with text (tool results sent with a user role are [`Item::ToolResult`]).
    User(String),
    /// One assistant turn, however many items (reasoning, text, tool calls) it was made of,
    /// with the text it said.
    Assistant(String),
    ToolResult {
        name: Option<String>,
        content: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Conversation {
    pub items: Vec<Item>,
    /// Names of the tools the request offers.
    pub tools: Vec<String>,
    /// Characters of all text seen, for the input token estimate.
    pub chars: usize,
}

impl Conversation {
    pub(crate) fn user(&mut self, text: String) {
        self.chars += text.len();
        self.items.push(Item::User(text));
    }

    /// Records an assistant turn; consecutive assistant items form one turn.
    pub(crate) fn assistant(&mut self, chars: usize, text: &str) {
        self.chars += chars;
        match self.items.last_mut() {
            Some(Item::Assistant(said)) => said.push_str(text),
            _ => self.items.push(Item::Assistant(text.to_owned())),
        }
    }

    pub(crate) fn tool_result(&mut self, name: Option<String>, content: String) {
        self.chars += content.len();
        self.items.push(Item::ToolResult { name, content });
    }

    /// Text that is not part of the conversation proper (system prompts, tool schemas) but
    /// still counts towards input tokens.
    pub(crate) fn context(&mut self, chars: usize) {
        self.chars += chars;
    }

    /// The text of the last user message, if any.
    pub(crate) fn last_user_text(&self) -> Option<&str> {
        self.items.iter().rev().find_map(|item| match item {
            Item::User(text) => Some(text.as_str()),
            _ => None,
        })
    }

    /// Assistant turns after the last user text: the index of the step to answer with.
    pub(crate) fn turns_since_user(&self) -> usize {
        self.items
            .iter()
            .rev()
            .take_while(|item| !matches!(item, Item::User(_)))
            .filter(|item| matches!(item, Item::Assistant(_)))
            .count()
    }

    /// A request to continue a partial reply: the conversation ends in an assistant turn
    /// with text (native prefill), or in such a turn followed by an instruction to continue.
    pub(crate) fn continuation(&self) -> Option<Continuation<'_>> {
        let (prefix_at, prefix, by_instruction) = match self.items.as_slice() {
            [.., Item::Assistant(prefix)] if !prefix.is_empty() => {
                (self.items.len() - 1, prefix, false)
            }
            [.., Item::Assistant(prefix), Item::User(instruction)]
                if !prefix.is_empty() && is_continue_instruction(instruction) =>
            {
                (self.items.len() - 2, prefix, true)
            }
            _ => return None,
        };
        let before = &self.items[..prefix_at];
        let user_at = before
            .iter()
            .rposition(|item| matches!(item, Item::User(_)))?;
        let Item::User(user_text) = &before[user_at] else {
            return None;
        };
        let turns = before[user_at..]
            .iter()
            .filter(|item| matches!(item, Item::Assistant(_)))
            .count();
        Some(Continuation {
            user_text,
            step: turns,
            prefix,
            by_instruction,
        })
    }

    /// The tool results at the end of the conversation, in order.
    pub(crate) fn trailing_tool_results(&self) -> Vec<(Option<&str>, &str)> {
        let mut out: Vec<(Option<&str>, &str)> = self
            .items
            .iter()
            .rev()
            .map_while(|item| match item {
                Item::ToolResult { name, content } => Some((name.as_deref(), content.as_str())),
                _ => None,
            })
            .collect();
        out.reverse();
        out
    }
}

/// A partial reply to continue.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Continuation<'a> {
    /// The user text the reply answers (and its directive).
    pub user_text: &'a str,
    /// The step the partial reply belongs to.
    pub step: usize,
    /// What was already said.
    pub prefix: &'a str,
    /// Asked by an instruction after the partial reply, not by native prefill.
    pub by_instruction: bool,
}

/// Whether a user message is a client's request to continue a reply that was cut off.
fn is_continue_instruction(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("continue") && text.contains("where") && text.contains("stopped")
}

/// The text of a message `content` that is a string or a list of parts with `text` fields
/// (every protocol here uses one of the two shapes). Parts are joined by newlines so a
/// directive sent as a part of its own stays on a line of its own.
pub(crate) fn content_text(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(serde_json::Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_turns_since_the_last_user_text() {
        let mut c = Conversation::default();
        c.user("first".into());
        c.assistant(0, "");
        c.user("second".into());
        assert_eq!(c.turns_since_user(), 0);
        c.assistant(0, "");
        c.assistant(0, "");
        c.tool_result(Some("t".into()), "r1".into());
        c.tool_result(None, "r2".into());
        assert_eq!(c.turns_since_user(), 1);
        c.assistant(0, "");
        c.tool_result(None, "r3".into());
        assert_eq!(c.turns_since_user(), 2);
        assert_eq!(c.last_user_text(), Some("second"));
        assert_eq!(c.trailing_tool_results(), vec![(None, "r3")]);
    }

    #[test]
    fn recognises_a_request_to_continue() {
        let mut c = Conversation::default();
        c.user("#mock {}".into());
        c.assistant(5, "Hello");
        let cont = c.continuation().unwrap();
        assert_eq!(
            (cont.user_text, cont.step, cont.prefix),
            ("#mock {}", 0, "Hello")
        );
        c.user("Continue exactly where you stopped, without repeating anything.".into());
        assert_eq!(c.continuation().unwrap().prefix, "Hello");
        let mut plain = Conversation::default();
        plain.user("hi".into());
        plain.assistant(2, "hi");
        plain.user("how are you".into());
        assert!(plain.continuation().is_none());
    }
}
