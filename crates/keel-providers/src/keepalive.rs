//! SSE comments as keep-alive events.
//!
//! Servers keep a quiet stream open with comment lines (`: keep-alive`, `:ping`), which an
//! event-stream parser drops without a trace. They are still life: a reasoning model that
//! thinks silently for minutes while its server comments every 15 s is not stalled. This
//! filter rewrites a comment line that stands between events into an event named
//! [`KEEPALIVE_EVENT`] (with the comment line kept after it), so the driver sees it. A
//! comment inside an event is left alone: inserting there would split the event.

/// The name of the synthetic event a comment between events becomes.
pub const KEEPALIVE_EVENT: &str = "keel.keepalive";

const MARK: &[u8] = b"event: keel.keepalive\ndata:\n\n";

/// Rewrites comment lines between events in a byte stream, chunk by chunk.
#[derive(Debug, Clone)]
pub struct CommentMarker {
    /// At the start of a line.
    line_start: bool,
    /// No event is being built: at the start, or after a blank line.
    between_events: bool,
    /// The previous byte was `\r`, so a `\n` now only completes that line end.
    after_cr: bool,
    /// The current line is a comment (comment lines change no event state).
    comment_line: bool,
}

impl Default for CommentMarker {
    fn default() -> Self {
        Self {
            line_start: true,
            between_events: true,
            after_cr: false,
            comment_line: false,
        }
    }
}

impl CommentMarker {
    /// The chunk with a keep-alive event before every comment line between events.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len());
        for &byte in chunk {
            if self.after_cr && byte == b'\n' {
                self.after_cr = false;
                out.push(byte);
                continue;
            }
            self.after_cr = byte == b'\r';
            match byte {
                b'\n' | b'\r' => {
                    if self.line_start {
                        // A blank line ends the event being built.
                        self.between_events = true;
                    } else if !self.comment_line {
                        self.between_events = false;
                    }
                    self.line_start = true;
                    self.comment_line = false;
                }
                b':' if self.line_start => {
                    if self.between_events {
                        out.extend_from_slice(MARK);
                    }
                    self.comment_line = true;
                    self.line_start = false;
                }
                _ => self.line_start = false,
            }
            out.push(byte);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(chunks: &[&str]) -> String {
        let mut marker = CommentMarker::default();
        let out: Vec<u8> = chunks
            .iter()
            .flat_map(|c| marker.feed(c.as_bytes()))
            .collect();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_comment_between_events_becomes_a_keepalive_event() {
        let out = feed_all(&["data: 1\n\n: keep-alive\n\ndata: 2\n\n"]);
        assert_eq!(
            out,
            "data: 1\n\nevent: keel.keepalive\ndata:\n\n: keep-alive\n\ndata: 2\n\n"
        );
        assert_eq!(
            feed_all(&[":ping\n", "data: 1\n\n"]),
            "event: keel.keepalive\ndata:\n\n:ping\ndata: 1\n\n"
        );
    }

    #[test]
    fn a_comment_inside_an_event_is_left_alone() {
        let input = "data: 1\n: note\ndata: 2\n\n";
        assert_eq!(feed_all(&[input]), input);
        let crlf = "data: 1\r\n: note\r\n\r\n";
        assert_eq!(feed_all(&[crlf]), crlf);
    }

    #[test]
    fn chunk_boundaries_do_not_matter() {
        let input = "data: 1\r\n\r\n: a\r\n\r\ndata: {\"x\":\":\"}\n\n:b\n\n";
        let whole = feed_all(&[input]);
        for cut in 0..input.len() {
            assert_eq!(
                feed_all(&[&input[..cut], &input[cut..]]),
                whole,
                "cut at {cut}"
            );
        }
        assert_eq!(whole.matches(KEEPALIVE_EVENT).count(), 2);
    }
}
