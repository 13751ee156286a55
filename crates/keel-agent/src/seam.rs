//! Where a continued reply (R1) meets the text it continues, as pure functions.
//!
//! * [`stitch`]: a provider with native prefill sees the prefix without its trailing
//!   whitespace (Anthropic rejects a final assistant turn ending in whitespace), so its
//!   continuation brings that whitespace again. The part of it the prefix already ends with
//!   is dropped, so "Hello " + " world" reads "Hello world", not "Hello  world".
//! * [`restarts_reply`]: a model asked by instruction to continue may instead start a new
//!   reply. Such a continuation is never stitched on; the loop restarts the step (R4)
//!   instead. A restart is known by what it repeats, not by how its first word looks:
//!
//! | continuation starts | example (prefix + continuation) | verdict |
//! |---|---|---|
//! | with the reply's first words, give or take a few | "Sure! Here's a short poem about autumn:" + "Sure, here is a short poem about autumn:" | restart |
//! | with the reply's first letters (scripts without spaces, one-word replies) | "東京は日本の" + "東京は日本の首都" | restart |
//! | with a model's words for starting over, opening a sentence | "…violets are" + "I apologize for the interruption. Here is…" | restart |
//! | with anything else: names, code, nouns, a new sentence | "the capital is" + " Paris", "let s =" + " String::new()" | continue |

use keel_core::StreamEvent;

/// How many characters of a continuation [`restarts_reply`] needs to decide.
pub const DECIDE_AFTER_CHARS: usize = 40;

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
/// a new reply instead of continuing `prefix`: it repeats the reply's opening, word for word
/// or nearly (`repeats_opening_words`), character for character in a script written
/// without spaces (`repeats_opening_chars`), or opens with a model's own words for
/// starting over (`RESTART_MARKERS`). What the continuation's first word looks like decides
/// nothing: a name, a type, a keyword or a German noun goes on a sentence as well as any.
pub fn restarts_reply(prefix: &str, continuation: &str) -> bool {
    let mut continued = normalised_words(continuation);
    // The last word of a continuation still arriving may be cut ("po" of "poem").
    if continued.len() > 2 && continuation.ends_with(char::is_alphanumeric) {
        continued.pop();
    }
    repeats_opening_words(&normalised_words(prefix), &continued)
        || repeats_opening_chars(prefix, continuation)
        || opens_with_restart_marker(continuation, &continued)
}

/// How many words of a continuation are compared with the reply's opening.
const OPENING_WORDS: usize = 8;

/// The share of the compared words (of the shorter side) that must recur, in order, for a
/// continuation to repeat the opening: a restart with small changes ("Sure! Here's" for
/// "Sure, here is") reaches it; a sentence that merely reuses a few of the opening's
/// words ("here is the second part" after "Here is the first part.") does not.
const REPEATED_SHARE: (usize, usize) = (3, 4);

/// Whether the continuation's first words repeat the reply's first words: in order, with
/// the first repeated word among the first two of each side (a restart may swap its
/// interjection: "Certainly!" for "Sure!"), at least two words and three quarters of the
/// words compared.
fn repeats_opening_words(prefix: &[String], continued: &[String]) -> bool {
    let n = continued.len().min(OPENING_WORDS);
    let m = prefix.len().min(n + 2);
    let (c, p) = (&continued[..n], &prefix[..m]);
    let mut best = 0;
    for i in 0..n.min(2) {
        for j in 0..m.min(2) {
            if c[i] == p[j] {
                best = best.max(1 + common_subsequence(&c[i + 1..], &p[j + 1..]));
            }
        }
    }
    let compared = n.min(prefix.len());
    best >= 2 && best * REPEATED_SHARE.1 >= compared * REPEATED_SHARE.0
}

/// The length of the longest common subsequence of two short word lists.
fn common_subsequence(a: &[String], b: &[String]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// How many letters and digits of the opening a continuation repeating it must bring.
const OPENING_CHARS: usize = 16;

/// Whether the continuation's first letters and digits are the reply's first ones (at least
/// four, up to [`OPENING_CHARS`]): a restart in a script written without spaces
/// ("東京は日本の" + "東京は日本の首都です"), or of a reply of one word so far.
fn repeats_opening_chars(prefix: &str, continuation: &str) -> bool {
    let letters = |text: &str| -> Vec<char> {
        text.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .take(OPENING_CHARS)
            .collect()
    };
    let (p, c) = (letters(prefix), letters(continuation));
    let k = p.len().min(c.len());
    k >= 4 && p[..k] == c[..k]
}

/// How models open a reply they start over, or a note about the cut they would have Keel
/// stitch in: lowercase words, as [`normalised_words`] spells them. A sure, an okay or the
/// like may come first.
const RESTART_MARKERS: &[&str] = &[
    "i apologize for the interruption",
    "i apologize for the cut",
    "i apologize it seems",
    "i apologize my previous",
    "i apologise for the interruption",
    "apologies for the interruption",
    "apologies for the cut",
    "sorry for the interruption",
    "sorry about the interruption",
    "sorry for the cut",
    "sorry my previous",
    "sorry it seems",
    "it seems my previous",
    "it looks like my previous",
    "it seems i was cut off",
    "my previous response",
    "my previous message",
    "my last response",
    "let me start over",
    "let me start again",
    "let me restart",
    "let me try again",
    "ill start over",
    "starting over",
    "here is the complete",
    "heres the complete",
    "here is the full",
    "heres the full",
    "here is the entire",
    "heres the entire",
    "continuing from where i left off",
    "continuing where i left off",
    "picking up where i left off",
    "to continue where i left off",
];

/// Words a model may open with before a restart marker.
const INTERJECTIONS: &[&str] = &["sure", "certainly", "okay", "ok", "absolutely", "yes"];

/// Whether the continuation opens with a [`RESTART_MARKERS`] phrase. Such a phrase starts
/// a sentence, so a continuation that opens in lowercase ("tired of" + " starting over")
/// is prose.
fn opens_with_restart_marker(continuation: &str, continued: &[String]) -> bool {
    let opens_sentence = continuation
        .chars()
        .find(|c| c.is_alphanumeric())
        .is_some_and(char::is_uppercase);
    if !opens_sentence {
        return false;
    }
    let skip = continued
        .iter()
        .take_while(|w| INTERJECTIONS.contains(&w.as_str()))
        .count();
    let words = &continued[skip..];
    RESTART_MARKERS.iter().any(|marker| {
        let marker: Vec<&str> = marker.split(' ').collect();
        words.len() >= marker.len() && words.iter().zip(&marker).all(|(w, m)| w == m)
    })
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

    /// Continuations as models write them: (prefix, continuation, restarts).
    const CONTINUATIONS: &[(&str, &str, bool)] = &[
        (
            "Sure! Here's a short poem about autumn:",
            "Sure, here is a short poem about autumn:",
            true,
        ),
        // Proper nouns after a cut mid-sentence.
        (
            "The capital of France is",
            " Paris, a city of about two million people.",
            false,
        ),
        (
            "The capital of France is",
            "Paris, known for the Eiffel Tower and its museums.",
            false,
        ),
        (
            "My favourite author is",
            " George Orwell, whose novels still read as warnings.",
            false,
        ),
        (
            "In 1969,",
            " Neil Armstrong became the first person to walk on the Moon.",
            false,
        ),
        (
            "He handed the letter to",
            " Dr. Smith, who read it twice before answering.",
            false,
        ),
        (
            "The final was won by",
            " Germany, who beat Argentina one nil in extra time.",
            false,
        ),
        (
            "Call the",
            " API with the token in the Authorization header.",
            false,
        ),
        // Code.
        (
            "The function returns",
            " `None` when the key is missing from the map.",
            false,
        ),
        (
            "fn main() {\n    let s =",
            " String::new();\n    println!(\"{s}\");\n}",
            false,
        ),
        (
            "if value is",
            " None:\n        return default\n    return value",
            false,
        ),
        (
            "Use",
            " HashMap::new() to create an empty map, then insert.",
            false,
        ),
        (
            "SELECT name FROM users WHERE",
            " id = 42 ORDER BY name LIMIT 10;",
            false,
        ),
        (
            "Returns",
            " `Option<String>`: `Some` when the user exists.",
            false,
        ),
        (
            "the flag is",
            " True when the feature is on, else False.",
            false,
        ),
        (
            "let total = items.iter().map(|i| i.price).sum();\nlet count =",
            " items.len();\nlet average = total / count;",
            false,
        ),
        // Other languages: German nouns are capitalised mid-sentence.
        (
            "Gestern habe ich einen",
            " Hund im Park gesehen, der Ball spielte.",
            false,
        ),
        (
            "Die Hauptstadt von Deutschland ist",
            " Berlin, eine Stadt mit langer Geschichte.",
            false,
        ),
        (
            "Wir brauchen mehr",
            " Zeit und Geld für das Projekt im nächsten Jahr.",
            false,
        ),
        (
            "Ich kaufe heute einen neuen",
            " Computer für die Arbeit im Büro.",
            false,
        ),
        (
            "La capitale de la France est",
            " Paris, une ville connue pour ses musées.",
            false,
        ),
        (
            "東京は日本の",
            "首都であり、人口は約千四百万人です。",
            false,
        ),
        // Prose that only reuses words of the opening.
        (
            "The leaves fall, adding to the",
            " forest floor a carpet of gold and red.",
            false,
        ),
        ("and then", " I left the house quietly before dawn.", false),
        (
            "a list:\n",
            "First item, then the second and the third.",
            false,
        ),
        (
            "It ended.",
            " Then came the long winter of that year.",
            false,
        ),
        (
            "the year",
            " 1999 was a turning point for the company.",
            false,
        ),
        (
            "Here is the first part. And",
            " here is the second, which explains the rest of it.",
            false,
        ),
        (
            "The cat sat on the mat and the",
            " dog sat on the rug beside it all day.",
            false,
        ),
        (
            "I think that",
            " I should go home now and rest a little.",
            false,
        ),
        (
            "She looked up and said",
            " Sorry for the delay, everyone, let us begin.",
            false,
        ),
        ("I'm so", " sorry for your loss; he was a good man.", false),
        (
            "He was tired of",
            " starting over every spring with nothing.",
            false,
        ),
        (
            "",
            "Anything at all can start a reply that has no text yet.",
            false,
        ),
        // True restarts: the opening again, as it was or nearly.
        (
            "Once upon a time, in a quiet village, there lived",
            "Once upon a time, in a quiet village, there lived an old baker.",
            true,
        ),
        (
            "Sure! Here's a short poem about autumn:\n\nThe leaves",
            "Sure, here is a short poem about autumn:\n\nThe leaves fall",
            true,
        ),
        (
            "Certainly! The capital of France is",
            "Sure! The capital of France is Paris, on the Seine.",
            true,
        ),
        (
            "The leaves fall slowly, adding to the",
            "The leaves fall slowly, adding to the forest floor.",
            true,
        ),
        ("Hello there, friend. I", " hello, there friend", true),
        (
            "# Autumn\n\nThe leaves",
            "# Autumn\n\nThe leaves fall one by one.",
            true,
        ),
        (
            "Die Hauptstadt von Deutschland ist",
            "Die Hauptstadt von Deutschland ist Berlin.",
            true,
        ),
        ("東京は日本の", "東京は日本の首都です。", true),
        (
            "```python\ndef add(a, b):\n    return",
            "```python\ndef add(a, b):\n    return a + b\n```",
            true,
        ),
        (
            "Paris",
            "Paris is the capital and largest city of France.",
            true,
        ),
        // True restarts: the model's own words for starting over.
        (
            "Roses are red, violets are",
            "I apologize for the interruption. Here is the complete poem:",
            true,
        ),
        (
            "Roses are red, violets are",
            "Here is the complete poem:\n\nRoses are red",
            true,
        ),
        (
            "Roses are red, violets are",
            "Let me start over.\n\nRoses are red,",
            true,
        ),
        (
            "Roses are red, violets are",
            "Sure! Here's the full poem again, from the top:",
            true,
        ),
        (
            "Roses are red, violets are",
            "Continuing from where I left off: blue, sugar is sweet",
            true,
        ),
        (
            "Roses are red, violets are",
            "It seems my previous response was cut off. Roses are",
            true,
        ),
    ];

    #[test]
    fn restarts_are_told_from_continuations_by_what_they_repeat() {
        assert!(CONTINUATIONS.len() >= 30);
        let wrong: Vec<_> = CONTINUATIONS
            .iter()
            .filter(|(prefix, continuation, restarts)| {
                restarts_reply(prefix, continuation) != *restarts
            })
            .collect();
        assert!(wrong.is_empty(), "judged wrongly: {wrong:#?}");
    }

    #[test]
    fn a_continuation_is_judged_on_its_first_characters_as_it_arrives() {
        for (prefix, continuation, restarts) in CONTINUATIONS {
            let start: String = continuation.chars().take(DECIDE_AFTER_CHARS).collect();
            assert_eq!(
                restarts_reply(prefix, &start),
                *restarts,
                "{prefix:?} + {start:?}"
            );
        }
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
            check.push(delta(" floor, thick and golden as the year ends")),
            SeamVerdict::Continue(vec![
                delta(" forest"),
                delta(" floor, thick and golden as the year ends")
            ])
        );
        let mut restart = SeamCheck::new("The leaves fall, adding to the");
        assert_eq!(restart.push(delta("The")), SeamVerdict::Hold);
        assert_eq!(
            restart.push(delta(" leaves fall, adding to the forest floor")),
            SeamVerdict::Restart
        );
        let mut short = SeamCheck::new("adding to the");
        short.push(delta(" end."));
        assert_eq!(short.decide(), Some(vec![delta(" end.")]));
    }
}
