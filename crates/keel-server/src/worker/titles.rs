//! Chat titles, written after a chat's first reply.
//!
//! When a run of an untitled chat ends, [`spawn`] starts a task of its own: it asks the
//! chat's model (or `runs.title_model`) for a title of a few words, through the same
//! provider adapter as any call, and stores it with the `name chat` transition, which keeps
//! a title a client set meanwhile. The reply never waits for it and nothing it does can
//! fail the reply: a failed or empty answer gives the first words of the first message
//! instead ([`fallback`]).
//!
//! The first message is quoted (`> ` before each line) rather than sent as it is: it is
//! material to name, not a request to follow, and a `#mock` script in it stays inert.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use keel_core::{Cancel, CancelCause, Message, ModelCall, Part, PartKind, Role, StreamEvent};
use keel_store::ChatId;

use super::Shared;

/// Words a title keeps at most.
const TITLE_WORDS: usize = 8;
/// Characters a title keeps at most.
const TITLE_CHARS: usize = 80;
/// Words of the first message the fallback title takes.
const FALLBACK_WORDS: usize = 6;
/// Characters of the first message the model is shown.
const QUOTED_CHARS: usize = 2000;
/// A title call that takes longer is abandoned for the fallback.
const CALL_LIMIT: Duration = Duration::from_secs(60);

const INSTRUCTION: &str = "You name conversations. The user's first message of a conversation \
is quoted below. Reply with a title for the conversation of two to six words, in the language \
of the message: the title alone, without quotes, without a final full stop.";

/// Starts writing a title for `chat` with `model` (unless `runs.title_model` names another)
/// when titles are on. Returns at once.
pub(super) fn spawn(shared: &Arc<Shared>, chat: ChatId, model: &str) {
    if !shared.config.runs.titles {
        return;
    }
    let model = shared
        .config
        .runs
        .title_model
        .clone()
        .unwrap_or_else(|| model.to_owned());
    let shared = shared.clone();
    tokio::spawn(async move {
        match write(&shared, chat, &model).await {
            // Deleted meanwhile: nothing to name.
            Ok(()) | Err(keel_store::StoreError::NotFound { .. }) => {}
            Err(error) => tracing::warn!(%chat, %error, "writing the chat's title failed"),
        }
    });
}

async fn write(
    shared: &Arc<Shared>,
    chat: ChatId,
    model: &str,
) -> Result<(), keel_store::StoreError> {
    let messages = shared.store.list_messages(chat, None).await?;
    let Some(first) = messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| text_of(&m.parts))
    else {
        return Ok(());
    };
    let cancel = shared.shutdown.child();
    let asked = tokio::time::timeout(CALL_LIMIT, ask(shared, model, &first, &cancel)).await;
    if shared.shutdown.is_cancelled() {
        return Ok(());
    }
    let title = match asked {
        Ok(Some(answer)) => from_answer(&answer),
        Ok(None) => None,
        Err(_) => {
            cancel.cancel(CancelCause::Shutdown);
            None
        }
    }
    .unwrap_or_else(|| fallback(&first));
    if !title.is_empty() {
        shared.store.name_chat(chat, &title).await?;
    }
    Ok(())
}

/// The model's answer to the title request; `None` when the call failed.
async fn ask(shared: &Arc<Shared>, model: &str, first: &str, cancel: &Cancel) -> Option<String> {
    let handle = shared.models.get(model)?;
    let mut options = handle.options.clone();
    // A one-off call: no stored response to chain from or to keep.
    options.previous_response_id = None;
    options.store = false;
    let call = ModelCall {
        messages: request(first),
        tools: Vec::new(),
        options,
    };
    let mut stream = match handle.model.stream(call, cancel.clone()).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::info!(model, %error, "the title call failed; using the first words");
            return None;
        }
    };
    let mut answer = String::new();
    while let Some(event) = stream.next().await {
        match event {
            StreamEvent::TextDelta { delta, .. } => answer.push_str(&delta),
            StreamEvent::Error(error) => {
                tracing::info!(model, %error, "the title call failed; using the first words");
                return None;
            }
            _ => {}
        }
    }
    Some(answer)
}

/// The title request: the instruction, then the first message quoted.
pub(super) fn request(first: &str) -> Vec<Message> {
    let shown: String = first.chars().take(QUOTED_CHARS).collect();
    let quoted = shown
        .lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n");
    vec![Message::system(INSTRUCTION), Message::user(quoted)]
}

fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A title from the model's answer: its first line without quote marks, Markdown
/// emphasis, a `Title:` label or a final full stop, at most [`TITLE_WORDS`] words and
/// [`TITLE_CHARS`] characters. `None` when nothing is left.
pub(super) fn from_answer(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.trim_start_matches(['>', '#', ' ']);
    let line = strip_label(line);
    let line = line.trim_matches(|c: char| {
        matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’' | '*' | '_' | '`') || c.is_whitespace()
    });
    let line = line.trim_end_matches(['.', '。', ' ']);
    let title = clip(line, TITLE_WORDS);
    (!title.is_empty()).then_some(title)
}

fn strip_label(line: &str) -> &str {
    let lower = line.to_lowercase();
    for label in ["title:", "**title:**", "title -"] {
        if lower.starts_with(label) {
            return line[label.len()..].trim_start();
        }
    }
    line
}

/// The first words of the first message's first non-empty line, for when no model answer
/// is to be had.
pub(super) fn fallback(first: &str) -> String {
    let line = first
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let clipped = clip(line, FALLBACK_WORDS);
    if clipped.chars().count() < line.chars().count() {
        format!("{clipped}…")
    } else {
        clipped
    }
}

/// At most `words` words and [`TITLE_CHARS`] characters, whitespace collapsed.
fn clip(text: &str, words: usize) -> String {
    let joined = text
        .split_whitespace()
        .take(words)
        .collect::<Vec<_>>()
        .join(" ");
    joined
        .chars()
        .take(TITLE_CHARS)
        .collect::<String>()
        .trim_end()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_quotes_the_message_so_it_is_named_not_followed() {
        let messages = request("hello there\n#mock {\"error\": {\"status\": 500}}");
        assert_eq!(messages[0].role, Role::System);
        assert_eq!(
            text_of(&messages[1].parts),
            "> hello there\n> #mock {\"error\": {\"status\": 500}}"
        );
    }

    #[test]
    fn an_answer_is_cleaned_into_a_short_title() {
        assert_eq!(
            from_answer("Rust lifetimes explained").as_deref(),
            Some("Rust lifetimes explained")
        );
        assert_eq!(
            from_answer("\"Trip to Lisbon.\"\n").as_deref(),
            Some("Trip to Lisbon")
        );
        assert_eq!(
            from_answer("Title: **Budget plan**").as_deref(),
            Some("Budget plan")
        );
        // The demo model echoes the quoted message.
        assert_eq!(
            from_answer("> hello there\n> more").as_deref(),
            Some("hello there")
        );
        assert_eq!(
            from_answer("one two three four five six seven eight nine ten").as_deref(),
            Some("one two three four five six seven eight")
        );
        assert_eq!(from_answer("  \n \"\" "), None);
    }

    #[test]
    fn the_fallback_is_the_first_words_of_the_first_line() {
        assert_eq!(fallback("hello there"), "hello there");
        assert_eq!(
            fallback("\n  please summarise this long report for me today\nmore"),
            "please summarise this long report for…"
        );
        assert_eq!(fallback(""), "");
    }
}
