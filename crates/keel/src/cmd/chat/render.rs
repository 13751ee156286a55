//! Turns transcript pieces into terminal output: line breaks between streamed text and
//! lines of their own, reply text styled as Markdown (`markdown`), ANSI styles when the
//! output is a terminal and `NO_COLOR` is not set, and on a terminal lines broken between
//! words at its width (`wrap`).

use super::markdown::Markdown;
use super::transcript::{LineKind, Piece};
use super::wrap::Wrapper;

const RESET: &str = "\x1b[0m";
const DIM: &str = "\x1b[2m";

/// Frames of the spinner shown while waiting for the first token.
pub const SPINNER: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Text,
    Reasoning,
    Refusal,
}

const RED: &str = "\x1b[31m";

/// What starts a refusal, so it never reads as part of the reply.
pub const REFUSAL_MARK: &str = "⊘ declined: ";

/// Keeps track of where the cursor is so that pieces join cleanly.
#[derive(Debug)]
pub struct Renderer {
    color: bool,
    stream: Option<Stream>,
    markdown: Markdown,
    /// Where the terminal's width comes from; `None`: no wrapping.
    width: Option<fn() -> Option<usize>>,
    wrapper: Wrapper,
}

/// The width of the terminal standard output is, if it is one.
pub fn terminal_width() -> Option<usize> {
    rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .map(|size| usize::from(size.ws_col))
        .filter(|&columns| columns > 0)
}

/// Whether output may carry ANSI styles: a terminal, and `NO_COLOR` unset or empty
/// (<https://no-color.org>).
pub fn styles_wanted(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

fn line_style(kind: LineKind) -> &'static str {
    match kind {
        LineKind::User => "\x1b[1m",
        LineKind::ToolCall => "\x1b[36m",
        LineKind::ToolResult => "\x1b[32m",
        LineKind::ToolError | LineKind::Error => "\x1b[31m",
        LineKind::Retry | LineKind::Interrupted => "\x1b[33m",
        LineKind::Notice => DIM,
    }
}

impl Renderer {
    pub fn new(color: bool) -> Self {
        Self {
            color,
            stream: None,
            markdown: Markdown::new(color),
            width: None,
            wrapper: Wrapper::new(),
        }
    }

    /// The renderer of standard output: styled on a terminal unless `NO_COLOR` says not,
    /// and wrapped at a terminal's width.
    pub fn for_stdout(tty: bool) -> Self {
        let renderer = Self::new(styles_wanted(tty, std::env::var_os("NO_COLOR").as_deref()));
        if tty {
            renderer.wrapping(terminal_width)
        } else {
            renderer
        }
    }

    /// Breaks lines between words at the width `width` reports, asked at each write so a
    /// resized terminal is followed.
    pub fn wrapping(mut self, width: fn() -> Option<usize>) -> Self {
        self.width = Some(width);
        self
    }

    fn wrap(&mut self, text: &str) -> String {
        let width = self.width.and_then(|width| width());
        self.wrapper.push(text, width)
    }

    /// The cursor is at the start of a line (the line editor's Enter put it there).
    pub fn at_line_start(&mut self) {
        self.wrapper.at_line_start();
    }

    fn styled(&self, style: &str, text: &str) -> String {
        if self.color {
            format!("{style}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }

    /// The text to write for one piece.
    pub fn render(&mut self, piece: &Piece) -> String {
        let out = self.unwrapped(piece);
        self.wrap(&out)
    }

    fn unwrapped(&mut self, piece: &Piece) -> String {
        match piece {
            Piece::Text(text) => {
                let mut out = self.switch_to(Some(Stream::Text));
                out.push_str(&self.markdown.push(text));
                out
            }
            Piece::Reasoning(text) => {
                let mut out = self.switch_to(Some(Stream::Reasoning));
                out.push_str(&self.styled(DIM, text));
                out
            }
            Piece::Refusal(text) => {
                let starts = self.stream != Some(Stream::Refusal);
                let mut out = self.switch_to(Some(Stream::Refusal));
                if starts {
                    out.push_str(&self.styled(RED, REFUSAL_MARK));
                }
                out.push_str(&self.styled(RED, text));
                out
            }
            Piece::Line(kind, text) => {
                let mut out = self.switch_to(None);
                out.push_str(&self.styled(line_style(*kind), text));
                out.push('\n');
                out
            }
        }
    }

    /// Ends any streamed text, so that what follows starts on a fresh line.
    pub fn finish(&mut self) -> String {
        let out = self.switch_to(None);
        let mut out = self.wrap(&out);
        let width = self.width.and_then(|width| width());
        out.push_str(&self.wrapper.finish(width));
        out
    }

    /// A styled notice line.
    pub fn notice(&mut self, text: &str) -> String {
        self.render(&Piece::Line(LineKind::Notice, text.to_owned()))
    }

    /// An error line.
    pub fn error(&mut self, text: &str) -> String {
        self.render(&Piece::Line(LineKind::Error, text.to_owned()))
    }

    fn switch_to(&mut self, next: Option<Stream>) -> String {
        let previous = std::mem::replace(&mut self.stream, next);
        let mut out = String::new();
        if previous == Some(Stream::Text) && next != previous {
            out.push_str(&self.markdown.finish());
        }
        if previous.is_some_and(|previous| Some(previous) != next) {
            out.push('\n');
        }
        out
    }

    /// One spinner frame, drawn over the current line.
    pub fn spinner(&self, frame: usize) -> String {
        let glyph = SPINNER[frame % SPINNER.len()];
        format!(
            "\r{}",
            self.styled(DIM, &format!("{glyph} waiting for the model…"))
        )
    }

    /// Erases the spinner line.
    pub fn clear_spinner(&self) -> &'static str {
        "\r\x1b[K"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_start_on_a_fresh_line_after_streamed_text() {
        let mut r = Renderer::new(false);
        let out: String = [
            Piece::Reasoning("hmm".into()),
            Piece::Text("Hel".into()),
            Piece::Text("lo".into()),
            Piece::Line(LineKind::Interrupted, "[interrupted]".into()),
            Piece::Line(LineKind::Notice, "next".into()),
        ]
        .iter()
        .map(|p| r.render(p))
        .collect();
        assert_eq!(out, "hmm\nHello\n[interrupted]\nnext\n");
        assert_eq!(r.finish(), "");
    }

    #[test]
    fn a_refusal_starts_on_a_line_of_its_own_with_its_mark_once() {
        let mut r = Renderer::new(false);
        let out: String = [
            Piece::Text("Let me see.".into()),
            Piece::Refusal("I can't ".into()),
            Piece::Refusal("help.".into()),
        ]
        .iter()
        .map(|p| r.render(p))
        .collect();
        assert_eq!(out, format!("Let me see.\n{REFUSAL_MARK}I can't help."));
    }

    #[test]
    fn colours_only_when_asked() {
        let mut plain = Renderer::new(false);
        assert_eq!(plain.render(&Piece::Reasoning("x".into())), "x");
        let mut colour = Renderer::new(true);
        assert_eq!(
            colour.render(&Piece::Reasoning("x".into())),
            "\x1b[2mx\x1b[0m"
        );
        assert_eq!(colour.finish(), "\n");
    }

    #[test]
    fn reply_text_is_styled_as_markdown_only_with_colours() {
        let mut plain = Renderer::new(false);
        assert_eq!(plain.render(&Piece::Text("**x**".into())), "**x**");
        let mut colour = Renderer::new(true);
        let out = colour.render(&Piece::Text("**x**".into())) + &colour.finish();
        assert_eq!(out, "\x1b[0m\x1b[1mx\x1b[0m\x1b[0m\n");
    }

    #[test]
    fn streamed_text_and_lines_break_between_words_at_the_width() {
        let mut r = Renderer::new(false).wrapping(|| Some(12));
        let out: String = [
            Piece::Text("one two thr".into()),
            Piece::Text("ee four five".into()),
            Piece::Line(LineKind::Notice, "a notice that is long".into()),
        ]
        .iter()
        .map(|p| r.render(p))
        .collect();
        assert_eq!(out, "one two\nthree four\nfive\na notice\nthat is long\n");
    }

    #[test]
    fn no_color_turns_styles_off_even_on_a_terminal() {
        use std::ffi::OsStr;
        assert!(styles_wanted(true, None));
        assert!(styles_wanted(true, Some(OsStr::new(""))));
        assert!(!styles_wanted(true, Some(OsStr::new("1"))));
        assert!(!styles_wanted(false, None));
    }
}
