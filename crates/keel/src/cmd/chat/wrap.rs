//! Word-aware wrapping of what `keel chat` prints, as it streams.
//!
//! A terminal breaks a line that is too long wherever the edge falls, often inside a word.
//! This breaks it between words instead: it holds back the word being written (and the
//! spaces before it) until the next space or line end says where the word ends, then starts
//! a new line first when the word would cross the edge. A word longer than a whole line is
//! broken at the edge. ANSI escape sequences take no columns; a character takes the columns
//! `unicode-width` says. Spaces that fall at a break are dropped, as a terminal would hide
//! them at the edge.

use unicode_width::UnicodeWidthChar as _;

/// The streaming wrapper of one terminal's output.
#[derive(Debug, Default)]
pub struct Wrapper {
    /// The column the next visible character lands in.
    column: usize,
    /// Spaces seen after the last word, not yet written.
    spaces: usize,
    /// The word being written: its characters and escapes, and its width.
    word: String,
    word_width: usize,
    /// Inside an escape sequence (`ESC [ … letter`).
    escape: bool,
}

impl Wrapper {
    pub fn new() -> Self {
        Self::default()
    }

    /// The output for `text` on a terminal `width` columns wide (`None`: no wrapping, when
    /// the output is not a terminal or its width is unknown).
    pub fn push(&mut self, text: &str, width: Option<usize>) -> String {
        let Some(width) = width.filter(|w| *w > 1) else {
            let mut out = self.flush(None);
            out.push_str(text);
            self.column = match text.rfind(['\n', '\r']) {
                Some(at) => text[at + 1..].chars().count(),
                None => self.column + text.chars().count(),
            };
            return out;
        };
        let mut out = String::new();
        for c in text.chars() {
            if self.escape {
                self.word.push(c);
                if c.is_ascii_alphabetic() {
                    self.escape = false;
                }
                continue;
            }
            match c {
                '\x1b' => {
                    self.escape = true;
                    self.word.push(c);
                }
                '\n' | '\r' => {
                    out.push_str(&self.flush(Some(width)));
                    // What the spaces before a line end would show is nothing.
                    self.spaces = 0;
                    out.push(c);
                    self.column = 0;
                }
                ' ' => {
                    out.push_str(&self.flush(Some(width)));
                    self.spaces += 1;
                }
                _ => {
                    let columns = c.width().unwrap_or(0);
                    if self.word_width + columns > width {
                        // A word longer than a line: what fits goes out, at the edge.
                        out.push_str(&self.flush(Some(width)));
                    }
                    self.word.push(c);
                    self.word_width += columns;
                }
            }
        }
        out
    }

    /// Writes the word held back (a reply's end, or a break in the stream before something
    /// else is printed).
    pub fn finish(&mut self, width: Option<usize>) -> String {
        let out = self.flush(width.filter(|w| *w > 1));
        self.spaces = 0;
        out
    }

    /// The cursor went to the start of a line behind this wrapper's back (the line editor's
    /// prompt was answered with Enter).
    pub fn at_line_start(&mut self) {
        self.column = 0;
        self.spaces = 0;
    }

    fn flush(&mut self, width: Option<usize>) -> String {
        let mut out = String::new();
        if self.word.is_empty() {
            return out;
        }
        let fits = width.is_none_or(|w| self.column + self.spaces + self.word_width <= w);
        if fits || self.column == 0 {
            out.push_str(&" ".repeat(self.spaces));
            self.column += self.spaces;
        } else {
            out.push('\n');
            self.column = 0;
        }
        self.spaces = 0;
        out.push_str(&self.word);
        self.column += self.word_width;
        self.word.clear();
        self.word_width = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` streamed `step` characters at a time into a terminal `width` wide.
    fn wrapped(text: &str, width: usize, step: usize) -> String {
        let mut w = Wrapper::new();
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::new();
        for chunk in chars.chunks(step) {
            out.push_str(&w.push(&chunk.iter().collect::<String>(), Some(width)));
        }
        out + &w.finish(Some(width))
    }

    #[test]
    fn lines_break_between_words_however_the_text_streams() {
        let text = "the quick brown fox jumps over the lazy dog";
        for step in [1, 3, 7, 100] {
            assert_eq!(
                wrapped(text, 16, step),
                "the quick brown\nfox jumps over\nthe lazy dog",
                "{step}"
            );
        }
    }

    #[test]
    fn styles_take_no_columns_and_long_words_break_at_the_edge() {
        assert_eq!(
            wrapped("\x1b[1mbold\x1b[0m words here", 10, 2),
            "\x1b[1mbold\x1b[0m words\nhere"
        );
        assert_eq!(wrapped("abcdefghijkl mn", 5, 1), "abcde\nfghij\nkl mn");
        assert_eq!(wrapped("a\nbb cc\n", 4, 1), "a\nbb\ncc\n");
    }

    #[test]
    fn wide_characters_count_twice_and_no_width_means_no_wrapping() {
        assert_eq!(wrapped("漢字 漢字 漢字", 10, 1), "漢字 漢字\n漢字");
        let mut w = Wrapper::new();
        assert_eq!(w.push("a b c d e f", None), "a b c d e f");
    }
}
