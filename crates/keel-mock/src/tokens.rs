//! Splitting text into the units the mock streams, one unit per "token".

/// Filler words for replies that ask for more tokens than their text has.
const FILLER: &[&str] = &[
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
];

/// Characters per chunk of tool-call arguments; small, so a cut can land mid-arguments.
const ARG_CHUNK_CHARS: usize = 8;

/// Splits text into words, each carrying the whitespace before it, so the pieces
/// concatenate back to the original text exactly.
pub(crate) fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    for c in text.chars() {
        if c.is_whitespace() {
            if in_word {
                out.push(std::mem::take(&mut current));
                in_word = false;
            }
        } else {
            in_word = true;
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Exactly `count` tokens: the words of `text` repeated, or filler words when it has none.
pub(crate) fn cycled(text: &str, count: usize) -> Vec<String> {
    let base = words(text);
    let base: Vec<String> = if base.iter().all(|w| w.trim().is_empty()) {
        FILLER.iter().map(|w| format!(" {w}")).collect()
    } else {
        base
    };
    let mut out: Vec<String> = base.iter().cycle().take(count).cloned().collect();
    // A cycled reply reads better when every word after the first is space-separated.
    for token in out.iter_mut().skip(1) {
        if !token.starts_with(char::is_whitespace) {
            token.insert(0, ' ');
        }
    }
    if let Some(first) = out.first_mut() {
        *first = first.trim_start().to_owned();
    }
    out
}

/// Splits tool-call argument text into small chunks on character boundaries.
pub(crate) fn chunks(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(ARG_CHUNK_CHARS)
        .map(|c| c.iter().collect())
        .collect()
}

/// A rough token estimate for usage figures: about four characters per token.
pub(crate) fn estimate(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let text = "  Hello there,\nworld ";
        let parts = words(text);
        assert_eq!(parts.concat(), text);
        assert_eq!(parts, vec!["  Hello", " there,", "\nworld", " "]);
    }

    #[test]
    fn cycling_pads_and_fills() {
        assert_eq!(cycled("a b", 5).concat(), "a b a b a");
        assert_eq!(cycled("", 3).concat(), "lorem ipsum dolor");
        assert!(cycled("x", 0).is_empty());
    }

    #[test]
    fn chunks_respect_characters() {
        let parts = chunks(r#"{"path":"é/ü.txt"}"#);
        assert_eq!(parts.concat(), r#"{"path":"é/ü.txt"}"#);
        assert!(parts.len() > 1);
    }
}
