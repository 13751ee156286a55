//! The prompt's slash commands.

use keel_client::ChatSummary;

/// What a line typed at the prompt asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Nothing typed.
    Empty,
    /// A message for the model.
    Message(String),
    /// Start a new chat with the next message.
    New,
    /// List chats.
    Chats,
    /// Continue another chat.
    Switch(String),
    /// Replace the last user message and reply again.
    Edit(String),
    /// Send while a run is active, to be answered after it.
    Queue(String),
    /// Carry on the reply the user stopped.
    Continue,
    /// Run a failed turn again.
    Retry,
    /// Print the current branch of the chat.
    History,
    /// List the versions of a message (the last fork of the branch when none is named).
    Branches(Option<i64>),
    /// Switch to the N-th version (from 1) of the message `/branches` lists.
    Branch(usize),
    /// Have the model write another version of the last reply.
    Regenerate,
    Help,
    Quit,
    /// A slash command that is not known or lacks its argument.
    Invalid(String),
}

pub const HELP: &str = "commands: /new  /chats  /switch ID  /edit TEXT  /queue TEXT  /continue  /retry  \
/history  /branches [#ID]  /branch N  /regenerate  /help  /quit  \
(any other /WORD … is sent to the model; Ctrl-C interrupts a reply; twice, or at the prompt, exits)";

/// Parses one line typed at the prompt.
pub fn parse(line: &str) -> Input {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.trim().is_empty() {
        return Input::Empty;
    }
    // A leading double slash sends a message that starts with a slash.
    if let Some(rest) = line.strip_prefix("//") {
        return Input::Message(format!("/{rest}"));
    }
    let Some(command) = line.strip_prefix('/') else {
        return Input::Message(line.to_owned());
    };
    let (name, argument) = match command.split_once(char::is_whitespace) {
        Some((name, rest)) => (name, rest.trim()),
        None => (command, ""),
    };
    let needs = |make: fn(String) -> Input, what: &str| {
        if argument.is_empty() {
            Input::Invalid(format!("/{name} needs {what}"))
        } else {
            make(argument.to_owned())
        }
    };
    match name {
        "new" => Input::New,
        "chats" => Input::Chats,
        "switch" => needs(Input::Switch, "a chat id"),
        "edit" => needs(Input::Edit, "the new text"),
        "queue" => needs(Input::Queue, "the text to queue"),
        "continue" => Input::Continue,
        "retry" => Input::Retry,
        "history" => Input::History,
        "regenerate" => Input::Regenerate,
        "branches" if argument.is_empty() => Input::Branches(None),
        "branches" => match argument.trim_start_matches('#').parse() {
            Ok(id) => Input::Branches(Some(id)),
            Err(_) => Input::Invalid(format!(
                "/branches takes a message id as /history shows it (#12), not {argument}"
            )),
        },
        "branch" => match argument.parse() {
            Ok(n) => Input::Branch(n),
            Err(_) => Input::Invalid(
                "/branch needs the number of a version as /branches lists it".to_owned(),
            ),
        },
        "help" | "?" => Input::Help,
        "quit" | "exit" => Input::Quit,
        // Not ours: `/list_dir {"path":"."}` is how the demo model is asked for a tool, and
        // a model may give other `/WORD` meanings of its own.
        _ if is_word(name) => Input::Message(line.to_owned()),
        _ => Input::Invalid(format!("unknown command /{name}; {HELP}")),
    }
}

fn is_word(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// One line of `/chats`: the title first (what a person looks for), then what identifies
/// the chat. `current` marks the chat being followed.
pub fn chat_line(chat: &ChatSummary, current: Option<&str>) -> String {
    let marker = if current == Some(chat.id.as_str()) {
        "*"
    } else {
        " "
    };
    let title = chat
        .title
        .as_deref()
        .filter(|t| !t.trim().is_empty())
        .unwrap_or("(untitled)");
    format!(
        "{marker} {title}  [{}  {}  {}  {}]",
        chat.id,
        chat.status,
        chat.model,
        chat.updated_at.get(..16).unwrap_or(&chat.updated_at)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands_and_messages() {
        assert_eq!(parse("  "), Input::Empty);
        assert_eq!(parse("hello\n"), Input::Message("hello".into()));
        assert_eq!(parse("/new"), Input::New);
        assert_eq!(parse("/chats"), Input::Chats);
        assert_eq!(parse("/switch abc "), Input::Switch("abc".into()));
        assert_eq!(
            parse("/edit better words"),
            Input::Edit("better words".into())
        );
        assert_eq!(parse("/queue later"), Input::Queue("later".into()));
        assert_eq!(parse("//etc/passwd"), Input::Message("/etc/passwd".into()));
        assert!(matches!(parse("/switch"), Input::Invalid(_)));
        assert!(matches!(parse("/"), Input::Invalid(_)));
        assert!(matches!(parse("/a.b"), Input::Invalid(_)));
        assert_eq!(parse("/quit"), Input::Quit);
        assert_eq!(parse("/continue"), Input::Continue);
        assert_eq!(parse("/retry"), Input::Retry);
        assert_eq!(parse("/history"), Input::History);
        assert_eq!(parse("/regenerate"), Input::Regenerate);
        assert_eq!(parse("/branches"), Input::Branches(None));
        assert_eq!(parse("/branches #12"), Input::Branches(Some(12)));
        assert_eq!(parse("/branches 12"), Input::Branches(Some(12)));
        assert_eq!(parse("/branch 2"), Input::Branch(2));
        assert!(matches!(parse("/branch"), Input::Invalid(_)));
        assert!(matches!(parse("/branch two"), Input::Invalid(_)));
        assert!(matches!(parse("/branches x"), Input::Invalid(_)));
    }

    #[test]
    fn a_slash_word_that_is_no_command_goes_to_the_model_as_written() {
        assert_eq!(
            parse(r#"/list_dir {"path":"."}"#),
            Input::Message(r#"/list_dir {"path":"."}"#.into())
        );
        assert_eq!(parse("/read_file"), Input::Message("/read_file".into()));
    }

    #[test]
    fn a_pasted_block_is_one_message_with_its_lines() {
        assert_eq!(
            parse("one\ntwo\nthree"),
            Input::Message("one\ntwo\nthree".into())
        );
    }

    #[test]
    fn the_chat_list_shows_titles_first() {
        let chat = |title: Option<&str>| ChatSummary {
            id: "c1".into(),
            title: title.map(str::to_owned),
            model: "demo".into(),
            status: "waiting".into(),
            updated_at: "2026-11-26T09:02:03.123Z".into(),
            usage: None,
        };
        assert_eq!(
            chat_line(&chat(Some("Rust lifetimes")), Some("c1")),
            "* Rust lifetimes  [c1  waiting  demo  2026-11-26T09:02]"
        );
        assert!(chat_line(&chat(None), None).starts_with("  (untitled)  [c1"));
    }
}
