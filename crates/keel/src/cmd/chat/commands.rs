//! The prompt's slash commands: parsing a typed line, `/help`, the lines of `/chats` and
//! which chat `/switch` means. Pure functions.

use chrono::{DateTime, TimeZone};
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
    /// Continue another chat: its number in `/chats`, or the start of its id.
    Switch(String),
    /// Clear the screen.
    Clear,
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

/// What is printed when the prompt starts.
pub const GREETING: &str = "type a message and press Enter; /help lists the commands";

/// The commands and what each does, as `/help` prints them.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/new", "start a new chat with the next message"),
    (
        "/chats",
        "list your recent chats, numbered, the newest first",
    ),
    (
        "/switch N|ID",
        "continue chat number N of /chats, or the chat whose id starts with ID",
    ),
    (
        "/edit TEXT",
        "replace your last message with TEXT; the model replies again",
    ),
    (
        "/queue TEXT",
        "send TEXT while a reply runs, answered after it",
    ),
    ("/continue", "have the model carry on the reply you stopped"),
    ("/retry", "run a failed turn again"),
    ("/history", "print the current branch, one line a message"),
    (
        "/branches [#ID]",
        "list the versions of a message (of the last one with versions)",
    ),
    (
        "/branch N",
        "make version N of what /branches listed current",
    ),
    (
        "/regenerate",
        "have the model write another version of the last reply",
    ),
    ("/clear", "clear the screen (nothing is sent)"),
    ("/help", "this list"),
    (
        "/quit",
        "leave (so does Ctrl-D, or Ctrl-C at an empty prompt)",
    ),
    ("//TEXT", "send a message that starts with /"),
];

/// `/help`: one line a command with what it does, then the keys.
pub fn help() -> Vec<String> {
    let width = COMMANDS.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    let mut lines = vec!["commands:".to_owned()];
    lines.extend(
        COMMANDS
            .iter()
            .map(|(command, what)| format!("  {command:width$}  {what}")),
    );
    lines.push(
        "keys: Ctrl-C interrupts a reply, clears a half-typed line, or at an empty prompt \
         exits; Up and Ctrl-R recall earlier lines; any other /WORD is sent to the model"
            .to_owned(),
    );
    lines
}

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
        "switch" => needs(
            Input::Switch,
            "a number from /chats or the start of a chat id",
        ),
        "clear" => Input::Clear,
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
        _ => Input::Invalid(format!("unknown command /{name}; /help lists the commands")),
    }
}

fn is_word(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// How much of a chat's id `/chats` shows: enough to tell chats apart, and what `/switch`
/// takes.
pub const SHORT_ID: usize = 8;

/// One line of `/chats`: its number for `/switch N`, the title first (what a person looks
/// for), when it last changed in local time, its state and the start of its id. `current`
/// marks the chat being followed.
pub fn chat_line<Tz: TimeZone>(
    n: usize,
    chat: &ChatSummary,
    current: Option<&str>,
    now: &DateTime<Tz>,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
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
    let when = DateTime::parse_from_rfc3339(&chat.updated_at)
        .map(|at| local_time(&at.with_timezone(&now.timezone()), now))
        .unwrap_or_else(|_| chat.updated_at.clone());
    let mut state = vec![chat.status.as_str(), chat.model.as_str()];
    if chat.archived {
        state.insert(0, "archived");
    }
    let short: String = chat.id.chars().take(SHORT_ID).collect();
    format!(
        "{marker}{n:>3}. {title}  ({when}, {})  {short}",
        state.join(", ")
    )
}

/// A time as a person reads it here: "14:05" today, "yesterday 09:12", the date and time
/// this year or before.
pub fn local_time<Tz: TimeZone>(at: &DateTime<Tz>, now: &DateTime<Tz>) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let day = at.date_naive();
    let today = now.date_naive();
    if day == today {
        at.format("today %H:%M").to_string()
    } else if today.pred_opt() == Some(day) {
        at.format("yesterday %H:%M").to_string()
    } else {
        at.format("%Y-%m-%d %H:%M").to_string()
    }
}

/// The chat `/switch ARG` means: its number in the last `/chats` listing (`listed`), else
/// the one chat of `known` whose id starts with ARG. The error says what is wrong.
pub fn resolve_switch(
    argument: &str,
    listed: &[ChatSummary],
    known: &[ChatSummary],
) -> Result<String, String> {
    let argument = argument.trim();
    if let Ok(n) = argument.parse::<usize>()
        && argument.len() < SHORT_ID
    {
        return match n.checked_sub(1).and_then(|i| listed.get(i)) {
            Some(chat) => Ok(chat.id.clone()),
            None if listed.is_empty() => Err("no chats to switch to yet".to_owned()),
            None => Err(format!(
                "/chats lists {} chats: /switch takes 1 to {}",
                listed.len(),
                listed.len()
            )),
        };
    }
    let wanted = argument.to_ascii_lowercase();
    let matching: Vec<&ChatSummary> = known
        .iter()
        .filter(|chat| chat.id.to_ascii_lowercase().starts_with(&wanted))
        .collect();
    match matching.as_slice() {
        [chat] => Ok(chat.id.clone()),
        [] => Err(format!(
            "no chat's id starts with {argument} (/chats lists them)"
        )),
        several => Err(format!(
            "{} chats' ids start with {argument}: {}; type more of the id",
            several.len(),
            several
                .iter()
                .map(|c| c.id.chars().take(SHORT_ID + 4).collect::<String>())
                .collect::<Vec<_>>()
                .join(", ")
        )),
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

    fn summary(id: &str, title: Option<&str>, archived: bool) -> ChatSummary {
        ChatSummary {
            id: id.into(),
            title: title.map(str::to_owned),
            model: "demo".into(),
            status: "waiting".into(),
            archived,
            updated_at: "2026-11-26T09:02:03.123Z".into(),
            usage: None,
        }
    }

    #[test]
    fn the_chat_list_numbers_chats_shows_local_times_and_marks_archived_ones() {
        let india = chrono::FixedOffset::east_opt(5 * 3600 + 1800).unwrap();
        let now = india.with_ymd_and_hms(2026, 11, 26, 20, 0, 0).unwrap();
        assert_eq!(
            chat_line(
                1,
                &summary("0123456789ab", Some("Rust lifetimes"), false),
                Some("0123456789ab"),
                &now
            ),
            "*  1. Rust lifetimes  (today 14:32, waiting, demo)  01234567"
        );
        let line = chat_line(12, &summary("c1", None, true), None, &now);
        assert_eq!(
            line,
            "  12. (untitled)  (today 14:32, archived, waiting, demo)  c1"
        );
        let later = india.with_ymd_and_hms(2026, 11, 27, 8, 0, 0).unwrap();
        let at = india.with_ymd_and_hms(2026, 11, 26, 14, 32, 0).unwrap();
        assert_eq!(local_time(&at, &later), "yesterday 14:32");
        let much_later = india.with_ymd_and_hms(2027, 1, 2, 8, 0, 0).unwrap();
        assert_eq!(local_time(&at, &much_later), "2026-11-26 14:32");
    }

    #[test]
    fn switch_takes_a_number_from_the_list_or_the_start_of_an_id() {
        let chats = [
            summary("ab12cd34-0000", Some("one"), false),
            summary("ab99ffff-0000", Some("two"), false),
            summary("7f00aa11-0000", Some("three"), true),
        ];
        assert_eq!(
            resolve_switch("2", &chats, &chats).unwrap(),
            "ab99ffff-0000"
        );
        assert!(
            resolve_switch("4", &chats, &chats)
                .unwrap_err()
                .contains("1 to 3")
        );
        assert!(resolve_switch("1", &[], &chats).is_err());
        assert_eq!(
            resolve_switch("7f", &chats, &chats).unwrap(),
            "7f00aa11-0000"
        );
        assert_eq!(
            resolve_switch("AB12", &chats, &chats).unwrap(),
            "ab12cd34-0000"
        );
        assert!(
            resolve_switch("ab", &chats, &chats)
                .unwrap_err()
                .contains("2 chats")
        );
        assert!(
            resolve_switch("ee", &chats, &chats)
                .unwrap_err()
                .contains("no chat")
        );
        // A number as long as an id's start is taken as one.
        let numeric = [summary("12345678-aaaa", None, false)];
        assert_eq!(
            resolve_switch("12345678", &[], &numeric).unwrap(),
            "12345678-aaaa"
        );
    }

    #[test]
    fn help_describes_every_command_and_clear_is_never_sent() {
        let help = help().join("\n");
        for (command, _) in COMMANDS {
            assert!(help.contains(command), "{command}");
        }
        assert!(help.contains("/clear  ") && help.contains("clear the screen"));
        assert_eq!(parse("/clear"), Input::Clear);
        assert!(matches!(parse("/nonsense!"), Input::Invalid(_)));
    }
}
