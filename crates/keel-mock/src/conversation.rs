//! A protocol-neutral view of a request: who said what, in order.
//!
//! Each protocol module reduces its request body to a [`Conversation`]; the planner only
//! needs the last user text, the assistant turns after it and the trailing tool results.

/// One entry of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// A user message with text (tool results sent with a user role are [`Item::ToolResult`]).
    User(String),
    /// One assistant turn, however many items (reasoning, text, tool calls) it was made of.
    Assistant,
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
    pub fn user(&mut self, text: String) {
        self.chars += text.len();
        self.items.push(Item::User(text));
    }

    /// Records an assistant turn; consecutive assistant items form one turn.
    pub fn assistant(&mut self, chars: usize) {
        self.chars += chars;
        if self.items.last() != Some(&Item::Assistant) {
            self.items.push(Item::Assistant);
        }
    }

    pub fn tool_result(&mut self, name: Option<String>, content: String) {
        self.chars += content.len();
        self.items.push(Item::ToolResult { name, content });
    }

    /// Text that is not part of the conversation proper (system prompts, tool schemas) but
    /// still counts towards input tokens.
    pub fn context(&mut self, chars: usize) {
        self.chars += chars;
    }

    /// The text of the last user message, if any.
    pub fn last_user_text(&self) -> Option<&str> {
        self.items.iter().rev().find_map(|item| match item {
            Item::User(text) => Some(text.as_str()),
            _ => None,
        })
    }

    /// Assistant turns after the last user text: the index of the step to answer with.
    pub fn turns_since_user(&self) -> usize {
        self.items
            .iter()
            .rev()
            .take_while(|item| !matches!(item, Item::User(_)))
            .filter(|item| matches!(item, Item::Assistant))
            .count()
    }

    /// The tool results at the end of the conversation, in order.
    pub fn trailing_tool_results(&self) -> Vec<(Option<&str>, &str)> {
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
        c.assistant(0);
        c.user("second".into());
        assert_eq!(c.turns_since_user(), 0);
        c.assistant(0);
        c.assistant(0);
        c.tool_result(Some("t".into()), "r1".into());
        c.tool_result(None, "r2".into());
        assert_eq!(c.turns_since_user(), 1);
        c.assistant(0);
        c.tool_result(None, "r3".into());
        assert_eq!(c.turns_since_user(), 2);
        assert_eq!(c.last_user_text(), Some("second"));
        assert_eq!(c.trailing_tool_results(), vec![(None, "r3")]);
    }
}
