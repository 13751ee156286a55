//! Where a continued reply (R1) meets the text it continues, as pure functions.
//!
//! * [`stitch`]: a provider with native prefill sees the prefix without its trailing
//!   whitespace (Anthropic rejects a final assistant turn ending in whitespace), so its
//!   continuation brings that whitespace again. The part of it the prefix already ends with
//!   is dropped, so "Hello " + " world" reads "Hello world", not "Hello  world".
//! * [`restarts_reply`]: a model asked by instruction to continue may instead start a new
//!   reply. Such a continuation is never stitched on: it repeats the start of the prefix, or
//!   it opens a new capitalised sentence where the prefix stopped mid-sentence ("…adding to
//!   the" + "The forest…"). The loop then restarts the step (R4) instead.
//!
//! | prefix ends | continuation starts | verdict |
//! |---|---|---|
//! | anywhere | with the prefix's first words | restart |
//! | mid-sentence (no `.`, `!`, `?`, `:`, `;`, newline) | with a capital letter (not the word "I") | restart |
//! | at a sentence end | with anything else | continue |
//! | mid-sentence | lowercase, digits, punctuation | continue |

use keel_core::StreamEvent;

/// How many characters of a continuation [`restarts_reply`] needs to decide.
pub const DECIDE_AFTER_CHARS: usize = 24;

/// Holds back the start of a continuation by instruction until [`restarts_reply`] can
/// judge it: [`DECIDE_AFTER_CHARS`] characters of text, or a tool call starting after it.
#[derive(Debug)]
pub struct SeamCheck<'a> {
    prefix: &'a str,
    held: Vec<StreamEvent>,
    text: String,
}

/// What to do with the events held so far.
#[derive(Debug, PartialEq)]
pub enum SeamVerdict {
    /// Not enough text yet: keep holding.
    Hold,
    /// A real continuation: apply these events, in order, and stop checking.
    Continue(Vec<StreamEvent>),
    /// The reply started over: never stitch it on.
    Restart,
}

impl<'a> SeamCheck<'a> {
    pub fn new(prefix: &'a str) -> Self {
        Self {
            prefix,
            held: Vec::new(),
            text: String::new(),
        }
    }

    pub fn push(&mut self, event: StreamEvent) -> SeamVerdict {
        let ends_text = matches!(event, StreamEvent::ToolInputStart { .. });
        if let StreamEvent::TextDelta { delta, .. } = &event {
            self.text.push_str(delta);
        }
        self.held.push(event);
        if !ends_text && self.text.chars().count() < DECIDE_AFTER_CHARS {
            return SeamVerdict::Hold;
        }
        match self.decide() {
            Some(events) => SeamVerdict::Continue(events),
            None => SeamVerdict::Restart,
        }
    }

    /// Judges what arrived: the held events to apply, or `None` for a restart.
    pub fn decide(&mut self) -> Option<Vec<StreamEvent>> {
        (!restarts_reply(self.prefix, &self.text)).then(|| std::mem::take(&mut self.held))
    }
}

/// The continuation delta with the whitespace the prefix already ends with taken off its
/// start. `pending` is the prefix's trailing whitespace not yet matched; it is consumed as
/// the delta matches it and cleared at the first character that does not.
pub fn stitch(pending: &mut String, delta: &str) -> String {
    if pending.is_empty() {
        return delta.to_owned();
    }
    let matched: usize = pending
        .chars()
        .zip(delta.chars())
        .take_while(|(a, b)| a == b)
        .map(|(_, b)| b.len_utf8())
        .sum();
    let rest = &delta[matched..];
    if rest.is_empty() {
        pending.drain(..matched);
    } else {
        pending.clear();
    }
    rest.to_owned()
}

/// Whether `continuation` (its first [`DECIDE_AFTER_CHARS`] characters or all of it) starts
/// a new reply instead of continuing `prefix`.
pub fn restarts_reply(prefix: &str, continuation: &str) -> bool {
    let prefix_words = normalised_words(prefix);
    let continued = normalised_words(continuation);
    // Repeating the opening: the first words of the continuation are the prefix's first.
    let compared = continued.len().min(prefix_words.len()).min(4);
    if compared >= 2 && continued[..compared] == prefix_words[..compared] {
        return true;
    }
    let Some(last) = prefix.trim_end_matches([' ', '\t']).chars().last() else {
        return false;
    };
    let ends_sentence = matches!(last, '.' | '!' | '?' | ':' | ';' | '\n' | '"' | '\'' | ')');
    if ends_sentence {
        return false;
    }
    let start = continuation.trim_start();
    let first_word: String = start.chars().take_while(|c| c.is_alphanumeric()).collect();
    let capitalised = first_word.chars().next().is_some_and(char::is_uppercase);
    capitalised && first_word != "I"
}

/// Lowercase words without punctuation, for comparing openings.
fn normalised_words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stitched(prefix_ws: &str, deltas: &[&str]) -> String {
        let mut pending = prefix_ws.to_owned();
        deltas.iter().map(|d| stitch(&mut pending, d)).collect()
    }

    #[test]
    fn whitespace_the_prefix_ends_with_is_not_doubled() {
        assert_eq!(stitched(" ", &[" world"]), "world");
        assert_eq!(stitched("\n\n", &["\n\nNext"]), "Next");
        assert_eq!(stitched("\n\n", &["\n", "\nNext"]), "Next", "across deltas");
        assert_eq!(
            stitched("\n", &["\n\nNext"]),
            "\nNext",
            "more whitespace is kept"
        );
        assert_eq!(stitched(" ", &["world"]), "world");
        assert_eq!(stitched("", &[" world"]), " world");
    }

    #[test]
    fn only_the_start_of_the_continuation_is_stitched() {
        let mut pending = " ".to_owned();
        assert_eq!(stitch(&mut pending, "a"), "a");
        assert_eq!(stitch(&mut pending, " b"), " b");
    }

    #[test]
    fn a_new_capitalised_sentence_mid_sentence_is_a_restart() {
        assert!(restarts_reply(
            "The leaves fall, adding to the",
            "The forest transforms into"
        ));
        assert!(restarts_reply("It was a beautiful da", "Once upon a time"));
    }

    #[test]
    fn repeating_the_opening_is_a_restart() {
        assert!(restarts_reply(
            "Once upon a time, in a quiet village.",
            "Once upon a time, in"
        ));
        assert!(restarts_reply(
            "Hello there, friend. I",
            " hello, there friend"
        ));
    }

    fn delta(text: &str) -> StreamEvent {
        StreamEvent::TextDelta {
            id: "t".into(),
            delta: text.into(),
        }
    }

    #[test]
    fn the_check_holds_the_start_until_it_can_judge_it() {
        let mut check = SeamCheck::new("adding to the");
        assert_eq!(check.push(delta(" forest")), SeamVerdict::Hold);
        assert_eq!(
            check.push(delta(" floor, thick and golden")),
            SeamVerdict::Continue(vec![delta(" forest"), delta(" floor, thick and golden")])
        );
        let mut restart = SeamCheck::new("adding to the");
        assert_eq!(restart.push(delta("The")), SeamVerdict::Hold);
        assert_eq!(
            restart.push(delta(" forest transforms into")),
            SeamVerdict::Restart
        );
        let mut short = SeamCheck::new("adding to the");
        short.push(delta(" end."));
        assert_eq!(short.decide(), Some(vec![delta(" end.")]));
    }

    #[test]
    fn real_continuations_are_kept() {
        assert!(!restarts_reply("adding to the", " forest floor"));
        assert!(!restarts_reply("adding to the", "forest floor"));
        assert!(!restarts_reply("It ended.", " Then came winter"));
        assert!(!restarts_reply("and then", " I left"));
        assert!(!restarts_reply("a list:\n", "First item"));
        assert!(!restarts_reply("the year", " 1999 was"));
        assert!(!restarts_reply("", "Anything"));
    }
}
