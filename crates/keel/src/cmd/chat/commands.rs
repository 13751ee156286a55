//! The prompt's slash commands.

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
    Help,
    Quit,
    /// A slash command that is not known or lacks its argument.
    Invalid(String),
}

pub const HELP: &str = "commands: /new  /chats  /switch ID  /edit TEXT  /queue TEXT  /help  /quit  \
(Ctrl-C interrupts a reply; twice, or at the prompt, exits)";

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
        "help" | "?" => Input::Help,
        "quit" | "exit" => Input::Quit,
        _ => Input::Invalid(format!("unknown command /{name}; {HELP}")),
    }
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
        assert!(matches!(parse("/bogus"), Input::Invalid(_)));
        assert_eq!(parse("/quit"), Input::Quit);
    }
}
