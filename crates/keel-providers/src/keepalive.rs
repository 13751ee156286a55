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
    ///
    /// Only line starts and line ends change the state, so the scan jumps from one line end
    /// to the next and the chunk is copied in spans (nearly every chunk holds no comment
    /// and is copied whole).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len());
        // `chunk[..copied]` is in `out` already.
        let mut copied = 0;
        let mut at = 0;
        while let Some(&byte) = chunk.get(at) {
            if self.after_cr && byte == b'\n' {
                // Completes a CRLF line end already counted at the CR.
                self.after_cr = false;
                at += 1;
                continue;
            }
            if self.line_start {
                match byte {
                    b'\n' | b'\r' => {
                        // A blank line ends the event being built.
                        self.between_events = true;
                        self.after_cr = byte == b'\r';
                        at += 1;
                        continue;
                    }
                    b':' => {
                        if self.between_events {
                            out.extend_from_slice(&chunk[copied..at]);
                            out.extend_from_slice(MARK);
                            copied = at;
                        }
                        self.comment_line = true;
                    }
                    _ => {}
                }
                self.line_start = false;
            }
            self.after_cr = false;
            let Some(end) = chunk[at..].iter().position(|&b| b == b'\n' || b == b'\r') else {
                // The line goes on in the next chunk.
                break;
            };
            let end = at + end;
            if !self.comment_line {
                self.between_events = false;
            }
            self.line_start = true;
            self.comment_line = false;
            self.after_cr = chunk[end] == b'\r';
            at = end + 1;
        }
        out.extend_from_slice(&chunk[copied..]);
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

    /// The marker's rules one byte at a time, the plainest statement of them: the oracle
    /// the line-skipping [`CommentMarker::feed`] is checked against.
    fn reference(state: &mut CommentMarker, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &byte in chunk {
            if state.after_cr && byte == b'\n' {
                state.after_cr = false;
                out.push(byte);
                continue;
            }
            state.after_cr = byte == b'\r';
            match byte {
                b'\n' | b'\r' => {
                    if state.line_start {
                        state.between_events = true;
                    } else if !state.comment_line {
                        state.between_events = false;
                    }
                    state.line_start = true;
                    state.comment_line = false;
                }
                b':' if state.line_start => {
                    if state.between_events {
                        out.extend_from_slice(MARK);
                    }
                    state.comment_line = true;
                    state.line_start = false;
                }
                _ => state.line_start = false,
            }
            out.push(byte);
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn skipping_to_line_ends_changes_nothing(
            chunks in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(b"\r\n:d a".to_vec()), 0..24),
                0..8),
        ) {
            let (mut fast, mut slow) = (CommentMarker::default(), CommentMarker::default());
            for chunk in &chunks {
                proptest::prop_assert_eq!(fast.feed(chunk), reference(&mut slow, chunk));
            }
        }
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
