//! Markdown for the terminal, as the reply streams.
//!
//! A reply arrives a few characters at a time and must be printed at once, so this is a
//! character state machine rather than a parser of whole documents: it holds back only
//! what it cannot yet decide (the start of a line that may be a heading, list item, quote
//! or code fence, a `*` that may open `**`) and styles the rest as it passes.
//!
//! | source | shown |
//! | --- | --- |
//! | `# Title` … `###### Title` | the title in bold, underlined; the `#`s dropped |
//! | `- item`, `* item`, `+ item` | `• item` (indentation kept) |
//! | `> quote` | `│ quote`, dimmed |
//! | a ```` ``` ```` fence and the lines up to the next | the code in cyan, fence lines dimmed |
//! | `**bold**` | bold |
//! | `*italic*`, `_italic_` | italic (an `_` inside a word, as in `snake_case`, stays) |
//! | `` `code` `` | cyan |
//! | a table (`\| a \| b \|` rows, a `\|---\|` line under the first) | boxed, columns aligned, the header bold; shown once its last row is in |
//! | anything else (links) | as written: it reads well as it is |
//!
//! Inline styles end with their line, so an unpaired marker never styles the rest of the
//! reply. Without styles (`NO_COLOR`, or output that is not a terminal) the text passes
//! through unchanged.

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const ITALIC: &str = "\x1b[3m";
const HEADING: &str = "\x1b[1;4m";
const DIM: &str = "\x1b[2m";
const CODE: &str = "\x1b[36m";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// At the start of a line, deciding what kind it is from `held`.
    Start,
    /// Ordinary text with inline styles.
    Inline,
    /// A heading's text.
    Heading,
    /// A fence line (opening or closing), shown dimmed.
    Fence,
    /// A line inside a fenced code block.
    Code,
    /// A table row, held whole until its line ends.
    Table,
}

/// The streaming styler of one run of reply text.
#[derive(Debug)]
pub struct Markdown {
    styles: bool,
    line: Line,
    in_fence: bool,
    held: String,
    bold: bool,
    /// The marker that opened italics (`*` or `_`), while they last.
    italic: Option<char>,
    /// The last character of the line styled so far, which a marker after it looks back at.
    before: Option<char>,
    code: bool,
    /// The rows of a table being read.
    table: Vec<String>,
}

/// What a line's opening characters say about it.
enum Opening {
    /// More characters are needed to tell.
    Undecided,
    Fence,
    /// A heading; the byte length of its marker (`## `).
    Heading(usize),
    /// A list item: its indentation and the marker's byte length (`- `).
    Item(usize, usize),
    /// A quote: the marker's byte length (`> `).
    Quote(usize),
    /// A table row (`| a | b |`).
    TableRow,
    Plain,
}

fn opening(held: &str, in_fence: bool) -> Opening {
    let body = held.trim_start_matches(' ');
    let indent = held.len() - body.len();
    if indent > 3 && !in_fence {
        return Opening::Plain;
    }
    if body.starts_with("```") {
        return Opening::Fence;
    }
    if body.is_empty() || "``".starts_with(body) {
        return Opening::Undecided;
    }
    if in_fence {
        return Opening::Plain;
    }
    if body.starts_with('|') {
        return Opening::TableRow;
    }
    let hashes = body.len() - body.trim_start_matches('#').len();
    if hashes > 0 && hashes <= 6 {
        return match body[hashes..].chars().next() {
            None => Opening::Undecided,
            Some(' ') => Opening::Heading(indent + hashes + 1),
            Some(_) => Opening::Plain,
        };
    }
    let mut chars = body.chars();
    match (chars.next(), chars.next()) {
        (Some('-' | '*' | '+'), None) | (Some('>'), None) => Opening::Undecided,
        (Some('-' | '*' | '+'), Some(' ')) => Opening::Item(indent, 2),
        (Some('>'), Some(' ')) => Opening::Quote(indent + 2),
        _ => Opening::Plain,
    }
}

impl Markdown {
    pub fn new(styles: bool) -> Self {
        Self {
            styles,
            line: Line::Start,
            in_fence: false,
            held: String::new(),
            bold: false,
            italic: None,
            before: None,
            code: false,
            table: Vec::new(),
        }
    }

    /// The terminal text for the next piece of the reply.
    pub fn push(&mut self, text: &str) -> String {
        if !self.styles {
            return text.to_owned();
        }
        let mut out = String::new();
        for c in text.chars() {
            self.char(c, &mut out);
        }
        out
    }

    /// Ends the reply: prints what was held back and closes every style.
    pub fn finish(&mut self) -> String {
        if !self.styles {
            return String::new();
        }
        let mut out = String::new();
        let held = std::mem::take(&mut self.held);
        match self.line {
            Line::Table => self.table.push(held),
            Line::Start => {
                self.flush_table(&mut out);
                out.push_str(&held);
            }
            _ => self.inline_text(&held, &mut out),
        }
        self.flush_table(&mut out);
        self.end_line(&mut out);
        self.in_fence = false;
        out
    }

    fn char(&mut self, c: char, out: &mut String) {
        if c == '\n' && self.line == Line::Table {
            self.table.push(std::mem::take(&mut self.held));
            self.line = Line::Start;
            return;
        }
        if c == '\n' {
            let held = std::mem::take(&mut self.held);
            if self.line == Line::Start
                && !matches!(opening(&held, self.in_fence), Opening::TableRow)
            {
                self.flush_table(out);
            }
            match self.line {
                Line::Start => match opening(&held, self.in_fence) {
                    Opening::TableRow => {
                        self.table.push(held);
                        self.line = Line::Start;
                        return;
                    }
                    Opening::Fence => {
                        self.in_fence = !self.in_fence;
                        out.push_str(&format!("{DIM}{held}{RESET}"));
                    }
                    _ if self.in_fence => out.push_str(&format!("{CODE}{held}{RESET}")),
                    _ => self.inline_text(&held, out),
                },
                _ => self.inline_text(&held, out),
            }
            if self.line == Line::Fence {
                self.in_fence = !self.in_fence;
            }
            self.end_line(out);
            out.push('\n');
            self.line = Line::Start;
            return;
        }
        match self.line {
            Line::Start => {
                self.held.push(c);
                self.decide_opening(out);
            }
            Line::Fence | Line::Code => out.push(c),
            Line::Table => self.held.push(c),
            Line::Inline | Line::Heading => {
                self.held.push(c);
                let held = std::mem::take(&mut self.held);
                // A marker's meaning hangs on the character after it (`*` may be half of
                // `**`, `_` may sit inside a word): it waits for that character.
                match held.chars().last() {
                    Some(last @ ('*' | '_')) if !held.ends_with("**") => {
                        let cut = held.len() - last.len_utf8();
                        self.inline_text(&held[..cut], out);
                        self.held.push(last);
                    }
                    _ => self.inline_text(&held, out),
                }
            }
        }
    }

    fn decide_opening(&mut self, out: &mut String) {
        let held = std::mem::take(&mut self.held);
        let decided = opening(&held, self.in_fence);
        if !matches!(decided, Opening::Undecided | Opening::TableRow) {
            self.flush_table(out);
        }
        match decided {
            Opening::Undecided => self.held = held,
            Opening::TableRow => {
                self.line = Line::Table;
                self.held = held;
            }
            Opening::Fence => {
                self.line = Line::Fence;
                out.push_str(DIM);
                out.push_str(&held);
            }
            Opening::Plain if self.in_fence => {
                self.line = Line::Code;
                out.push_str(CODE);
                out.push_str(&held);
            }
            Opening::Heading(marker) => {
                self.line = Line::Heading;
                out.push_str(HEADING);
                self.inline_text(&held[marker..], out);
            }
            Opening::Item(indent, marker) => {
                self.line = Line::Inline;
                out.push_str(&held[..indent]);
                out.push_str("• ");
                self.inline_text(&held[indent + marker..], out);
            }
            Opening::Quote(marker) => {
                self.line = Line::Inline;
                out.push_str(&format!("{DIM}│{RESET} "));
                self.inline_text(&held[marker..], out);
            }
            Opening::Plain => {
                self.line = Line::Inline;
                self.inline_text(&held, out);
            }
        }
    }

    /// Text of an ordinary line or heading, with `**`, `*`, `_` and `` ` `` turned into
    /// styles.
    fn inline_text(&mut self, text: &str, out: &mut String) {
        let mut rest = text;
        let mut before = self.before;
        while let Some(c) = rest.chars().next() {
            let after = rest[c.len_utf8()..].chars().next();
            if !self.code && rest.starts_with("**") {
                self.bold = !self.bold;
                self.restyle(out);
                rest = &rest[2..];
                before = Some('*');
                continue;
            }
            if c == '`' {
                self.code = !self.code;
                self.restyle(out);
            } else if !self.code && (c == '*' || c == '_') && self.italic_marker(c, before, after) {
                self.italic = if self.italic.is_some() { None } else { Some(c) };
                self.restyle(out);
            } else {
                out.push(c);
            }
            before = Some(c);
            rest = &rest[c.len_utf8()..];
        }
        self.before = before;
    }

    /// Whether `marker` (`*` or `_`) between `before` and `after` opens or closes italics.
    /// It opens at a word's start, and closes the italics it opened after a word (`_` only
    /// at a word's end): inside a word (`snake_case`, `2*3`) it is the character it is.
    fn italic_marker(&self, marker: char, before: Option<char>, after: Option<char>) -> bool {
        let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        let blank = |c: Option<char>| c.is_none_or(char::is_whitespace);
        match self.italic {
            Some(open) => open == marker && !blank(before) && (marker == '*' || !word(after)),
            None => !blank(after) && !word(before),
        }
    }

    /// Prints the table read so far (`table`): its columns aligned, boxed, the header bold.
    fn flush_table(&mut self, out: &mut String) {
        let rows = std::mem::take(&mut self.table);
        if rows.is_empty() {
            return;
        }
        let boxed = super::table::boxed(&rows, |cell| {
            let mut text = String::new();
            self.inline_text(cell, &mut text);
            self.end_line(&mut text);
            text
        });
        match boxed {
            Some(table) => out.push_str(&table),
            // Rows with no `|---|` line under the first are no table: text as it came.
            None => {
                for row in &rows {
                    self.inline_text(row, out);
                    self.end_line(out);
                    out.push('\n');
                }
            }
        }
    }

    /// Emits the styles now in force, from a clean slate.
    fn restyle(&self, out: &mut String) {
        out.push_str(RESET);
        if self.line == Line::Heading {
            out.push_str(HEADING);
        }
        if self.bold {
            out.push_str(BOLD);
        }
        if self.italic.is_some() {
            out.push_str(ITALIC);
        }
        if self.code {
            out.push_str(CODE);
        }
    }

    fn end_line(&mut self, out: &mut String) {
        if self.line != Line::Start || self.bold || self.code || self.italic.is_some() {
            out.push_str(RESET);
        }
        self.bold = false;
        self.italic = None;
        self.before = None;
        self.code = false;
        self.line = Line::Start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Styles `text` fed one character at a time, as the slowest stream would bring it.
    fn whole(text: &str) -> String {
        let mut md = Markdown::new(true);
        let mut out = md.push(text);
        out.push_str(&md.finish());
        out
    }

    fn visible(styled: &str) -> String {
        let mut out = String::new();
        let mut chars = styled.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn without_styles_the_text_passes_through_unchanged() {
        let mut md = Markdown::new(false);
        assert_eq!(md.push("# **x**\n- `y`"), "# **x**\n- `y`");
        assert_eq!(md.finish(), "");
    }

    #[test]
    fn markers_become_styles_and_the_words_stay() {
        let text = "## Plan\nUse **care** with `rm`.\n- first\n> note\n";
        assert_eq!(
            visible(&whole(text)),
            "Plan\nUse care with rm.\n• first\n│ note\n"
        );
        let styled = whole(text);
        assert!(styled.contains(&format!("{HEADING}Plan")), "{styled:?}");
        assert!(styled.contains(&format!("{BOLD}care")), "{styled:?}");
        assert!(styled.contains(&format!("{CODE}rm")), "{styled:?}");
    }

    #[test]
    fn code_blocks_keep_their_markup_and_are_not_restyled() {
        let text = "```\n# not a heading\n**x** `y`\n```\nafter **b**\n";
        let styled = whole(text);
        assert_eq!(
            visible(&styled),
            "```\n# not a heading\n**x** `y`\n```\nafter b\n"
        );
        assert!(
            styled.contains(&format!("{CODE}# not a heading")),
            "{styled:?}"
        );
        assert!(styled.contains(&format!("{BOLD}b")), "{styled:?}");
    }

    #[test]
    fn an_unpaired_marker_styles_no_further_than_its_line() {
        let styled = whole("a **b\nc\n");
        let second = styled.split('\n').nth(1).unwrap();
        assert_eq!(visible(second), "c");
        assert!(!second.contains(BOLD), "{styled:?}");
    }

    #[test]
    fn words_stream_out_at_once_except_an_undecided_opening() {
        let mut md = Markdown::new(true);
        assert_eq!(visible(&md.push("word1 word2")), "word1 word2");
        assert_eq!(visible(&md.push("\n-")), "\n");
        assert_eq!(visible(&md.push(" x")), "• x");
        assert_eq!(visible(&md.push(" a*")), " a");
        assert_eq!(visible(&md.push("b")), "*b");
    }

    #[test]
    fn single_stars_and_underscores_make_italics_but_not_inside_words() {
        let styled = whole("a *soft* word, _also_ this, not snake_case_name or 2 * 3\n");
        assert_eq!(
            visible(&styled),
            "a soft word, also this, not snake_case_name or 2 * 3\n"
        );
        assert!(styled.contains(&format!("{ITALIC}soft")), "{styled:?}");
        assert!(styled.contains(&format!("{ITALIC}also")), "{styled:?}");
        // Fed whole, the same.
        let mut md = Markdown::new(true);
        let at_once = md.push("a *soft* word\n") + &md.finish();
        assert!(at_once.contains(&format!("{ITALIC}soft")), "{at_once:?}");
        // Bold still wins over two stars.
        assert!(whole("**b** *i*\n").contains(&format!("{BOLD}b")));
    }

    #[test]
    fn a_table_is_boxed_with_aligned_columns_once_its_rows_are_in() {
        let text = "Before.\n| run | time |\n| --- | ---: |\n| cold | 12 ms |\n| **warm** | 3 ms |\nAfter.\n";
        let shown = visible(&whole(text));
        assert_eq!(
            shown,
            "Before.\n\
             ┌──────┬───────┐\n\
             │ run  │  time │\n\
             ├──────┼───────┤\n\
             │ cold │ 12 ms │\n\
             │ warm │  3 ms │\n\
             └──────┴───────┘\n\
             After.\n"
        );
        // A table at the very end of a reply is printed by `finish`.
        let mut md = Markdown::new(true);
        let mut out = md.push("| a | b |\n|---|---|\n| 1 | 2 |");
        assert_eq!(visible(&out), "", "held until its last row is in");
        out.push_str(&md.finish());
        assert!(visible(&out).contains("│ 1 │ 2 │"), "{out:?}");
        // Rows with no rule under the first are text.
        assert_eq!(
            visible(&whole("| not | a table\nnext\n")),
            "| not | a table\nnext\n"
        );
    }

    #[test]
    fn the_end_of_a_reply_prints_what_was_held_and_resets() {
        let mut md = Markdown::new(true);
        assert_eq!(md.push("##"), "");
        assert_eq!(visible(&md.finish()), "##");
        assert_eq!(md.push("x"), "x");
    }
}
