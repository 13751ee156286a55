//! The transcript: a pure state machine that turns the daemon's live events into what the
//! terminal prints.
//!
//! It keeps what was shown of the step in progress so that a committed `message` (which
//! replaces the live parts) prints only what was not already on screen, and it remembers
//! the last durable event id so that a replay after a reconnect prints nothing twice. After
//! a change of branch it prints only what differs from what is on screen.
//!
//! Longer than most files: its tests, one for each way events can arrive, are most of it.

use std::collections::VecDeque;

use serde_json::Value;

pub use keel_client::{Message, SseEvent};

/// Something to print.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Streamed reply text, printed as it comes.
    Text(String),
    /// Streamed reasoning, printed dimmed.
    Reasoning(String),
    /// The model's refusal, streamed apart from the reply.
    Refusal(String),
    /// A line of its own.
    Line(LineKind, String),
}

/// How a line is styled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    User,
    ToolCall,
    ToolResult,
    ToolError,
    Retry,
    Notice,
    Error,
    Interrupted,
}

#[derive(Debug, Clone, PartialEq)]
enum BlockKind {
    Text,
    Reasoning,
    Refusal,
    ToolCall { id: String, shown: bool },
    ToolResult { id: String },
    Other,
}

/// What the terminal shows of one live part of the step in progress.
#[derive(Debug, Clone)]
struct Block {
    role: String,
    kind: BlockKind,
    text: String,
}

impl Block {
    /// The block printed again after a reset; tool lines were printed when they arrived and
    /// are not repeated.
    fn pieces(&self) -> Vec<Piece> {
        if self.text.is_empty() {
            return Vec::new();
        }
        streamed(&self.kind, self.text.clone())
            .into_iter()
            .collect()
    }
}

/// The kind of block a streamed part type fills.
fn streamed_kind(part_type: &str) -> Option<BlockKind> {
    match part_type {
        "text" => Some(BlockKind::Text),
        "reasoning" => Some(BlockKind::Reasoning),
        "refusal" => Some(BlockKind::Refusal),
        _ => None,
    }
}

/// Streamed text of a block of `kind` as the piece it prints as.
fn streamed(kind: &BlockKind, text: String) -> Option<Piece> {
    match kind {
        BlockKind::Text => Some(Piece::Text(text)),
        BlockKind::Reasoning => Some(Piece::Reasoning(text)),
        BlockKind::Refusal => Some(Piece::Refusal(text)),
        _ => None,
    }
}

/// Statuses in which no run is active.
pub fn is_idle(status: &str) -> bool {
    matches!(status, "waiting" | "error" | "requires_action")
}

/// The state of one chat's transcript.
#[derive(Debug, Default)]
pub struct Transcript {
    position: i64,
    live: Vec<Block>,
    status: Option<String>,
    queued: Option<usize>,
    expected_user: VecDeque<String>,
    awaiting_reply: bool,
    last_user_id: i64,
    last_assistant: Option<Message>,
    last_error: Option<String>,
    /// What was on screen of the step when a `stream_reset` voided it. A resumed step
    /// starts with a reset and then repeats what it continues from; while the new parts
    /// only repeat what is on screen, nothing is printed, so a recovery is invisible.
    echo: Option<Vec<Block>>,
    /// The committed messages on screen, in order: the current branch as printed.
    shown: Vec<i64>,
    /// After a change of branch: the messages that were on screen, and how many of them the
    /// new branch has repeated so far. They are not printed again; what differs is.
    rebranch: Option<(Vec<i64>, usize)>,
}

/// How the parts after a reset relate to what was on screen before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overlap {
    /// They repeat (a prefix of) what is on screen.
    Covered,
    /// They repeat all of it and go on.
    Extends,
    /// They differ.
    Diverged,
}

fn same_kind(a: &BlockKind, b: &BlockKind) -> bool {
    match (a, b) {
        (BlockKind::ToolCall { id: x, .. }, BlockKind::ToolCall { id: y, .. })
        | (BlockKind::ToolResult { id: x }, BlockKind::ToolResult { id: y }) => x == y,
        _ => a == b,
    }
}

fn overlap(screen: &[Block], live: &[Block]) -> Overlap {
    for (index, block) in live.iter().enumerate() {
        let Some(shown) = screen.get(index) else {
            return Overlap::Extends;
        };
        if shown.role != block.role || !same_kind(&shown.kind, &block.kind) {
            return Overlap::Diverged;
        }
        let last = index + 1 == live.len();
        if shown.text.starts_with(&block.text) && (last || shown.text == block.text) {
            continue;
        }
        if last && index + 1 == screen.len() && block.text.starts_with(&shown.text) {
            return Overlap::Extends;
        }
        return Overlap::Diverged;
    }
    Overlap::Covered
}

/// Events that take a place in the chat's event order and are never sent twice.
fn is_durable(event: &str) -> bool {
    matches!(
        event,
        "part" | "message" | "stream_reset" | "tool_call_cancel" | "branch"
    )
}

const MAX_ARGS_SHOWN: usize = 160;
const MAX_RESULT_SHOWN: usize = 200;

fn shorten(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    format!("{cut}…")
}

fn tool_call_line(name: &str, args: &str) -> Piece {
    Piece::Line(
        LineKind::ToolCall,
        format!("⚙ {name} {}", shorten(args, MAX_ARGS_SHOWN)),
    )
}

fn tool_result_line(part: &Value) -> Piece {
    let name = part["tool_name"].as_str().unwrap_or("tool");
    let result = match &part["result"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if part["is_error"].as_bool().unwrap_or(false) {
        Piece::Line(
            LineKind::ToolError,
            format!("✗ {name}: {}", shorten(&result, MAX_RESULT_SHOWN)),
        )
    } else {
        Piece::Line(
            LineKind::ToolResult,
            format!("↳ {name}: {}", shorten(&result, MAX_RESULT_SHOWN)),
        )
    }
}

/// The full rendering of one committed part.
fn part_pieces(part: &Value) -> Vec<Piece> {
    let text = || part["text"].as_str().unwrap_or_default().to_owned();
    match part["type"].as_str() {
        Some("text") => vec![Piece::Text(text())],
        Some("reasoning") => vec![Piece::Reasoning(text())],
        Some("refusal") => vec![Piece::Refusal(text())],
        Some("tool_call") => vec![tool_call_line(
            part["tool_name"].as_str().unwrap_or("tool"),
            part["args"].as_str().unwrap_or_default(),
        )],
        Some("tool_result") => vec![tool_result_line(part)],
        Some("source") => vec![Piece::Line(
            LineKind::Notice,
            format!("source: {}", part["url"].as_str().unwrap_or_default()),
        )],
        Some("file") => vec![Piece::Line(
            LineKind::Notice,
            format!(
                "[file {}]",
                part["media_type"].as_str().unwrap_or("unknown type")
            ),
        )],
        _ => Vec::new(),
    }
}

impl Transcript {
    pub fn new() -> Self {
        Self::default()
    }

    /// The chat's status as last announced (or assumed after starting a run).
    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    /// True while a run is active.
    pub fn is_busy(&self) -> bool {
        self.status.as_deref().is_some_and(|s| !is_idle(s))
    }

    /// True between sending a message and the first part of the reply.
    pub fn awaiting_reply(&self) -> bool {
        self.awaiting_reply && self.is_busy()
    }

    /// The id of the last committed user message.
    pub fn last_user_id(&self) -> i64 {
        self.last_user_id
    }

    /// The last committed assistant message.
    pub fn last_assistant(&self) -> Option<&Message> {
        self.last_assistant.as_ref()
    }

    /// The last error announced with an `error` status.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// Records that this client sent `text`: its echo is not printed again.
    pub fn expect_user(&mut self, text: &str) {
        self.expected_user.push_back(text.to_owned());
    }

    /// A transcript of the same chat that follows on from what `screen` printed: the
    /// messages it showed are not printed again, only what differs from them.
    pub fn continuing(screen: &Transcript) -> Self {
        Self {
            rebranch: Some((screen.shown.clone(), 0)),
            ..Self::default()
        }
    }

    /// Records that a run was started by this client.
    pub fn started_run(&mut self) {
        self.status = Some("running".to_owned());
        self.awaiting_reply = true;
    }

    /// Applies one event and returns what to print.
    pub fn apply(&mut self, event: &SseEvent) -> Vec<Piece> {
        if is_durable(&event.event)
            && let Some(id) = event.id
        {
            if id <= self.position {
                return Vec::new();
            }
            self.position = id;
        }
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            return Vec::new();
        };
        match event.event.as_str() {
            "part" => self.part(&data),
            "message" => match serde_json::from_value::<Message>(data) {
                Ok(message) => self.message(message),
                Err(_) => Vec::new(),
            },
            "stream_reset" => {
                let shown = std::mem::take(&mut self.live);
                if !shown.is_empty() {
                    self.echo = Some(shown);
                }
                Vec::new()
            }
            // Another version of the conversation became current (an edit, a regenerate, a
            // switch from another client): the whole branch follows, of which only what
            // differs from the screen is printed.
            "branch" => {
                self.live.clear();
                self.echo = None;
                // While a change of branch is still being matched, the screen still shows
                // what it did before it.
                let screen = match self.rebranch.take() {
                    Some((screen, _)) => screen,
                    None => std::mem::take(&mut self.shown),
                };
                self.shown.clear();
                self.rebranch = Some((screen, 0));
                Vec::new()
            }
            "tool_call_cancel" => self.tool_call_cancel(&data),
            "status" => self.status_event(&data),
            "retry" => vec![Piece::Line(LineKind::Retry, retry_text(&data))],
            "queue" => {
                let count = data["queued"].as_array().map_or(0, Vec::len);
                let before = self.queued.replace(count);
                if before == Some(count) || (before.is_none() && count == 0) {
                    Vec::new()
                } else {
                    vec![Piece::Line(
                        LineKind::Notice,
                        format!("queued messages: {count}"),
                    )]
                }
            }
            _ => Vec::new(),
        }
    }

    /// The end of a change of branch: something differs from the screen from here on.
    /// Says so unless the new branch only adds to what is on screen.
    fn diverged(&mut self) -> Vec<Piece> {
        match self.rebranch.take() {
            Some((old, matched)) if matched < old.len() => vec![Piece::Line(
                LineKind::Notice,
                "another version from here on:".to_owned(),
            )],
            _ => Vec::new(),
        }
    }

    fn part(&mut self, data: &Value) -> Vec<Piece> {
        let mut out = self.diverged();
        out.extend(self.part_after_branch(data));
        out
    }

    fn part_after_branch(&mut self, data: &Value) -> Vec<Piece> {
        let pieces = self.apply_part(data);
        let Some(screen) = &self.echo else {
            return pieces;
        };
        match overlap(screen, &self.live) {
            Overlap::Covered => Vec::new(),
            Overlap::Extends => {
                let screen = self.echo.take().unwrap_or_default();
                match (screen.last(), self.live.get(screen.len().saturating_sub(1))) {
                    // The block on screen grew: print only what it did not show.
                    (Some(shown), Some(block))
                        if self.live.len() == screen.len()
                            && matches!(
                                block.kind,
                                BlockKind::Text | BlockKind::Reasoning | BlockKind::Refusal
                            ) =>
                    {
                        let rest = block.text[shown.text.len()..].to_owned();
                        streamed(&block.kind, rest).into_iter().collect()
                    }
                    _ => pieces,
                }
            }
            Overlap::Diverged => {
                self.echo = None;
                let mut out = vec![Piece::Line(
                    LineKind::Notice,
                    "↻ the reply restarted from the beginning".to_owned(),
                )];
                out.extend(self.live.iter().flat_map(Block::pieces));
                out
            }
        }
    }

    fn apply_part(&mut self, data: &Value) -> Vec<Piece> {
        let role = data["role"].as_str().unwrap_or("assistant").to_owned();
        let part = &data["part"];
        self.awaiting_reply = false;
        match part["type"].as_str() {
            Some(kind) if streamed_kind(kind).is_some() => {
                let delta = part["text"].as_str().unwrap_or_default();
                let kind = streamed_kind(kind).unwrap_or(BlockKind::Text);
                match self.live.last_mut() {
                    Some(last) if last.kind == kind && last.role == role => {
                        last.text.push_str(delta);
                    }
                    _ => self.live.push(Block {
                        role,
                        kind: kind.clone(),
                        text: delta.to_owned(),
                    }),
                }
                streamed(&kind, delta.to_owned()).into_iter().collect()
            }
            Some("tool_call") => {
                let id = part["tool_call_id"].as_str().unwrap_or_default().to_owned();
                let name = part["tool_name"].as_str().unwrap_or("tool");
                let complete = part["complete"].as_bool().unwrap_or(false);
                let index = self.live.iter().position(|b| {
                    matches!(&b.kind, BlockKind::ToolCall { id: existing, .. } if *existing == id)
                });
                let index = match index {
                    Some(index) => index,
                    None => {
                        self.live.push(Block {
                            role,
                            kind: BlockKind::ToolCall {
                                id: id.clone(),
                                shown: false,
                            },
                            text: String::new(),
                        });
                        self.live.len() - 1
                    }
                };
                let block = &mut self.live[index];
                if complete {
                    block.text = part["args"].as_str().unwrap_or_default().to_owned();
                    block.kind = BlockKind::ToolCall { id, shown: true };
                    vec![tool_call_line(name, &block.text)]
                } else {
                    block
                        .text
                        .push_str(part["args_delta"].as_str().unwrap_or_default());
                    Vec::new()
                }
            }
            Some("tool_result") => {
                let id = part["tool_call_id"].as_str().unwrap_or_default().to_owned();
                self.live.push(Block {
                    role,
                    kind: BlockKind::ToolResult { id },
                    text: String::new(),
                });
                vec![tool_result_line(part)]
            }
            _ => {
                self.live.push(Block {
                    role,
                    kind: BlockKind::Other,
                    text: String::new(),
                });
                part_pieces(part)
            }
        }
    }

    fn tool_call_cancel(&mut self, data: &Value) -> Vec<Piece> {
        let id = data["tool_call_id"].as_str().unwrap_or_default();
        self.live.retain(
            |b| !matches!(&b.kind, BlockKind::ToolCall { id: existing, .. } if existing == id),
        );
        vec![Piece::Line(
            LineKind::ToolError,
            format!(
                "✗ {} cancelled: {}",
                data["tool_name"].as_str().unwrap_or("tool call"),
                data["reason"].as_str().unwrap_or("no reason given")
            ),
        )]
    }

    fn status_event(&mut self, data: &Value) -> Vec<Piece> {
        let Some(status) = data["status"].as_str() else {
            return Vec::new();
        };
        let changed = self.status.as_deref() != Some(status);
        self.status = Some(status.to_owned());
        if is_idle(status) {
            self.awaiting_reply = false;
        }
        if !changed {
            return Vec::new();
        }
        match status {
            "error" => {
                let message = failure_text(&data["last_error"]);
                self.last_error = Some(message.clone());
                vec![
                    Piece::Line(LineKind::Error, format!("the run failed: {message}")),
                    Piece::Line(
                        LineKind::Notice,
                        "/retry runs it again; a new message is answered as usual".to_owned(),
                    ),
                ]
            }
            "requires_action" => vec![Piece::Line(
                LineKind::Notice,
                "the model called a client-side tool: answer it through the API or the web page"
                    .to_owned(),
            )],
            _ => Vec::new(),
        }
    }

    fn message(&mut self, message: Message) -> Vec<Piece> {
        if message.role == "system" {
            return self.committed(message);
        }
        // After a change of branch, a message the screen shows already is not printed again.
        if let Some((old, matched)) = &mut self.rebranch
            && old.get(*matched) == Some(&message.id)
        {
            *matched += 1;
            self.shown.push(message.id);
            if message.role == "user" {
                self.last_user_id = self.last_user_id.max(message.id);
            } else if message.role == "assistant" {
                self.last_assistant = Some(message);
            }
            return Vec::new();
        }
        let mut out = self.diverged();
        self.shown.push(message.id);
        out.extend(self.committed(message));
        out
    }

    fn committed(&mut self, message: Message) -> Vec<Piece> {
        match message.role.as_str() {
            "user" => {
                self.last_user_id = self.last_user_id.max(message.id);
                self.live.clear();
                let text = message.text();
                if self.expected_user.front() == Some(&text) {
                    self.expected_user.pop_front();
                    return Vec::new();
                }
                let marker = super::branches::marker(&message)
                    .map(|m| format!("  {m}"))
                    .unwrap_or_default();
                vec![Piece::Line(LineKind::User, format!("you: {text}{marker}"))]
            }
            "assistant" | "tool" => {
                self.awaiting_reply = false;
                // A reset not followed by anything new: the screen still shows the step.
                if let Some(screen) = self.echo.take()
                    && overlap(&screen, &self.live) == Overlap::Covered
                {
                    self.live = screen;
                }
                let mut pieces = self.reconcile(&message);
                if message.interrupted {
                    pieces.push(Piece::Line(
                        LineKind::Interrupted,
                        "[interrupted]".to_owned(),
                    ));
                }
                // A reply with other versions says which one this is, as the web page's
                // "< 2/3 >" does; `/branches` lists them.
                if let Some(marker) = super::branches::marker(&message) {
                    pieces.push(Piece::Line(LineKind::Notice, marker));
                }
                if message.role == "assistant" {
                    self.last_assistant = Some(message);
                }
                pieces
            }
            // A compaction's notice: the summary streamed as system parts is stored now.
            "system" => {
                self.live.retain(|b| b.role != "system");
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// Prints what of a committed message was not already shown live, then forgets the
    /// live parts it replaces.
    fn reconcile(&mut self, message: &Message) -> Vec<Piece> {
        let shown: Vec<Block> = self
            .live
            .iter()
            .filter(|b| b.role == message.role)
            .cloned()
            .collect();
        self.live.retain(|b| b.role != message.role);
        let mut pieces = Vec::new();
        let mut diverged = false;
        for (index, part) in message.parts.iter().enumerate() {
            let block = if diverged { None } else { shown.get(index) };
            let kind = part["type"].as_str().unwrap_or_default();
            let text = part["text"].as_str().unwrap_or_default();
            match (kind, block.map(|b| &b.kind)) {
                (_, Some(shown_kind)) if streamed_kind(kind).as_ref() == Some(shown_kind) => {
                    let seen = block.map(|b| b.text.as_str()).unwrap_or_default();
                    match text.strip_prefix(seen) {
                        Some(rest) if !rest.is_empty() => {
                            pieces.extend(streamed(shown_kind, rest.to_owned()));
                        }
                        Some(_) => {}
                        None => {
                            diverged = true;
                            pieces.push(Piece::Line(
                                LineKind::Notice,
                                "(the reply as stored:)".to_owned(),
                            ));
                            pieces.extend(part_pieces(part));
                        }
                    }
                }
                ("tool_call", Some(BlockKind::ToolCall { shown: true, .. }))
                | ("tool_result", Some(BlockKind::ToolResult { .. }))
                | ("source" | "file", Some(BlockKind::Other)) => {}
                _ => {
                    if block.is_some() && !matches!(kind, "tool_call") {
                        diverged = true;
                    }
                    pieces.extend(part_pieces(part));
                }
            }
        }
        pieces
    }
}

/// A failed run's `last_error` as one line: the kind and message, then where it came from
/// (the provider's name and the address of the request) when a provider request failed.
fn failure_text(error: &Value) -> String {
    let mut text = format!(
        "{}: {}",
        error["kind"].as_str().unwrap_or("error"),
        error["message"].as_str().unwrap_or("the run failed")
    );
    if let Some(source) = source_text(error) {
        text.push_str(&format!(" ({source})"));
    }
    text
}

/// Where a provider's failure came from: "provider NAME, URL", or `None` when the error
/// names neither (a failure that did not come from a request).
fn source_text(error: &Value) -> Option<String> {
    let source: Vec<String> = [
        error["provider"].as_str().map(|p| format!("provider {p}")),
        error["url"].as_str().map(str::to_owned),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!source.is_empty()).then(|| source.join(", "))
}

/// A `retry` event as one line: the attempt, the kind and the wait, then the provider's
/// words and where the failed request went, as a failed run says them.
fn retry_text(data: &Value) -> String {
    let details: Vec<String> = [
        data["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(|m| shorten(m, MAX_RESULT_SHOWN)),
        source_text(data),
    ]
    .into_iter()
    .flatten()
    .collect();
    format!(
        "retrying: attempt {}, {}, waiting {:.1} s{}",
        data["attempt"],
        data["kind"].as_str().unwrap_or("unknown"),
        data["delay_ms"].as_f64().unwrap_or(0.0) / 1000.0,
        if details.is_empty() {
            String::new()
        } else {
            format!(" ({})", details.join("; "))
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(id: i64, name: &str, data: Value) -> SseEvent {
        SseEvent {
            id: Some(id),
            event: name.to_owned(),
            data: data.to_string(),
        }
    }

    fn text(id: i64, delta: &str) -> SseEvent {
        event(
            id,
            "part",
            json!({"role": "assistant", "part": {"type": "text", "text": delta}}),
        )
    }

    fn message(id: i64, seq: i64, role: &str, parts: Value, interrupted: bool) -> SseEvent {
        event(
            seq,
            "message",
            json!({"id": id, "role": role, "parts": parts, "created_at": "2026-01-01T00:00:00Z",
                   "usage": null, "interrupted": interrupted}),
        )
    }

    fn printed(pieces: &[Piece]) -> String {
        pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Reasoning(t) => format!("<{t}>"),
                Piece::Refusal(t) => format!("{{{t}}}"),
                Piece::Line(_, l) => format!("[{l}]"),
            })
            .collect()
    }

    fn feed(t: &mut Transcript, events: &[SseEvent]) -> String {
        events.iter().map(|e| printed(&t.apply(e))).collect()
    }

    #[test]
    fn streamed_text_is_printed_once_and_the_commit_adds_nothing() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                text(2, "Hello"),
                text(3, " world"),
                message(
                    2,
                    4,
                    "assistant",
                    json!([{"type": "text", "text": "Hello world"}]),
                    false,
                ),
            ],
        );
        assert_eq!(out, "Hello world");
        assert_eq!(
            t.last_assistant().map(Message::text).as_deref(),
            Some("Hello world")
        );
    }

    #[test]
    fn a_refusal_is_printed_apart_once_and_the_commit_adds_nothing() {
        let mut t = Transcript::new();
        let refusal = |id: i64, delta: &str| {
            event(
                id,
                "part",
                json!({"role": "assistant", "part": {"type": "refusal", "text": delta}}),
            )
        };
        let out = feed(
            &mut t,
            &[
                text(2, "Well,"),
                refusal(3, "I can't "),
                refusal(4, "help."),
                message(
                    2,
                    5,
                    "assistant",
                    json!([{"type": "text", "text": "Well,"},
                           {"type": "refusal", "text": "I can't help."}]),
                    false,
                ),
            ],
        );
        assert_eq!(out, "Well,{I can't }{help.}");
        // Shown only when committed (a client that joined late): printed whole.
        let mut late = Transcript::new();
        let out = feed(
            &mut late,
            &[message(
                2,
                5,
                "assistant",
                json!([{"type": "refusal", "text": "I can't help."}]),
                false,
            )],
        );
        assert_eq!(out, "{I can't help.}");
    }

    #[test]
    fn replayed_events_after_a_reconnect_are_skipped() {
        let mut t = Transcript::new();
        let first = feed(&mut t, &[text(2, "one"), text(3, " two")]);
        // The reconnect resumes from 3 but a server may repeat; ephemeral events repeat ids.
        let again = feed(
            &mut t,
            &[
                text(3, " two"),
                event(
                    3,
                    "status",
                    json!({"status": "running", "last_error": null}),
                ),
                text(4, " three"),
            ],
        );
        assert_eq!(first + &again, "one two three");
    }

    #[test]
    fn a_commit_prints_only_the_missing_tail() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                text(5, "par"),
                message(
                    7,
                    9,
                    "assistant",
                    json!([{"type": "text", "text": "partial"}]),
                    true,
                ),
            ],
        );
        assert_eq!(out, "partial[[interrupted]]");
        assert!(t.last_assistant().is_some_and(|m| m.interrupted));
    }

    #[test]
    fn a_commit_without_live_parts_prints_everything() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                message(1, 1, "user", json!([{"type": "text", "text": "hi"}]), false),
                message(
                    2,
                    2,
                    "assistant",
                    json!([{"type": "reasoning", "text": "think"}, {"type": "text", "text": "hi!"}]),
                    false,
                ),
            ],
        );
        assert_eq!(out, "[you: hi]<think>hi!");
    }

    #[test]
    fn own_user_messages_are_not_echoed() {
        let mut t = Transcript::new();
        t.expect_user("hi");
        let out = feed(
            &mut t,
            &[message(
                1,
                1,
                "user",
                json!([{"type": "text", "text": "hi"}]),
                false,
            )],
        );
        assert_eq!(out, "");
        assert_eq!(t.last_user_id(), 1);
    }

    #[test]
    fn stream_reset_voids_the_live_parts() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                text(2, "wrong"),
                event(3, "stream_reset", json!({})),
                text(4, "right"),
                message(
                    3,
                    5,
                    "assistant",
                    json!([{"type": "text", "text": "right answer"}]),
                    false,
                ),
            ],
        );
        assert_eq!(
            out,
            "wrong[↻ the reply restarted from the beginning]right answer"
        );
    }

    #[test]
    fn a_resumed_step_that_repeats_the_screen_prints_only_what_is_new() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                text(2, "one two"),
                text(3, " three"),
                // The new owner logged less than the screen shows, then continues.
                event(1_000_004, "stream_reset", json!({})),
                text(1_000_005, "one two"),
                text(1_000_006, " three"),
                text(1_000_007, " four"),
                message(
                    3,
                    1_000_008,
                    "assistant",
                    json!([{"type": "text", "text": "one two three four"}]),
                    false,
                ),
            ],
        );
        assert_eq!(out, "one two three four");
    }

    #[test]
    fn a_reset_then_the_commit_alone_prints_nothing_twice() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                text(2, "one two"),
                event(3, "stream_reset", json!({})),
                message(
                    3,
                    4,
                    "assistant",
                    json!([{"type": "text", "text": "one two three"}]),
                    false,
                ),
            ],
        );
        assert_eq!(out, "one two three");
    }

    #[test]
    fn a_commit_that_differs_from_what_was_shown_is_printed_as_stored() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                text(2, "abc"),
                message(
                    3,
                    3,
                    "assistant",
                    json!([{"type": "text", "text": "xyz"}]),
                    false,
                ),
            ],
        );
        assert_eq!(out, "abc[(the reply as stored:)]xyz");
    }

    #[test]
    fn tool_calls_print_when_complete_and_results_once() {
        let mut t = Transcript::new();
        let call = |seq, extra: Value| {
            let mut part =
                json!({"type": "tool_call", "tool_call_id": "c1", "tool_name": "read_file"});
            if let (Some(p), Some(e)) = (part.as_object_mut(), extra.as_object()) {
                p.extend(e.clone());
            }
            event(seq, "part", json!({"role": "assistant", "part": part}))
        };
        let result = json!({"type": "tool_result", "tool_call_id": "c1", "tool_name": "read_file",
                            "result": "hello", "is_error": false});
        let out = feed(
            &mut t,
            &[
                call(2, json!({"args_delta": "{\"path\":"})),
                call(3, json!({"args_delta": "\"a\"}"})),
                call(
                    4,
                    json!({"args_delta": "", "args": "{\"path\":\"a\"}", "complete": true}),
                ),
                event(5, "part", json!({"role": "tool", "part": result})),
                message(
                    2,
                    6,
                    "assistant",
                    json!([{"type": "tool_call", "tool_call_id": "c1", "tool_name": "read_file", "args": "{\"path\":\"a\"}"}]),
                    false,
                ),
                message(3, 7, "tool", json!([result]), false),
            ],
        );
        assert_eq!(out, "[⚙ read_file {\"path\":\"a\"}][↳ read_file: hello]");
    }

    #[test]
    fn cancelled_tool_calls_and_retries_are_announced() {
        let mut t = Transcript::new();
        let out = feed(
            &mut t,
            &[
                event(
                    2,
                    "retry",
                    json!({"attempt": 2, "delay_ms": 1500, "kind": "rate_limit", "message": "slow down"}),
                ),
                event(
                    3,
                    "tool_call_cancel",
                    json!({"tool_call_id": "c", "tool_name": "write_file", "reason": "stream cut"}),
                ),
            ],
        );
        assert_eq!(
            out,
            "[retrying: attempt 2, rate_limit, waiting 1.5 s (slow down)][✗ write_file cancelled: stream cut]"
        );
    }

    #[test]
    fn a_retried_failure_names_the_provider_and_the_address() {
        let retry = json!({
            "attempt": 2, "delay_ms": 1500, "kind": "server", "message": "HTTP status 500",
            "provider": "local", "url": "http://127.0.0.1:8080/v1/chat/completions"
        });
        assert_eq!(
            retry_text(&retry),
            "retrying: attempt 2, server, waiting 1.5 s (HTTP status 500; provider local, http://127.0.0.1:8080/v1/chat/completions)"
        );
        let bare = json!({"attempt": 3, "delay_ms": 1000, "kind": "connection", "message": "",
                          "provider": null, "url": null});
        assert_eq!(
            retry_text(&bare),
            "retrying: attempt 3, connection, waiting 1.0 s"
        );
    }

    #[test]
    fn a_provider_failure_names_the_provider_and_the_address() {
        let error = json!({
            "kind": "invalid_request", "message": "HTTP status 404",
            "provider": "local", "url": "http://127.0.0.1:8080/v1/chat/completions"
        });
        assert_eq!(
            failure_text(&error),
            "invalid_request: HTTP status 404 (provider local, http://127.0.0.1:8080/v1/chat/completions)"
        );
        assert_eq!(
            failure_text(
                &json!({"kind": "auth", "message": "bad key", "provider": "openai", "url": null})
            ),
            "auth: bad key (provider openai)"
        );
    }

    #[test]
    fn status_tracks_busy_and_reports_errors_once() {
        let mut t = Transcript::new();
        t.started_run();
        assert!(t.is_busy() && t.awaiting_reply());
        let running = event(
            0,
            "status",
            json!({"status": "running", "last_error": null}),
        );
        assert_eq!(feed(&mut t, &[running]), "");
        let failed = event(
            0,
            "status",
            json!({"status": "error", "last_error": {"kind": "auth", "message": "bad key"}}),
        );
        assert_eq!(
            feed(&mut t, &[failed.clone(), failed]),
            "[the run failed: auth: bad key][/retry runs it again; a new message is answered as usual]"
        );
        assert!(!t.is_busy());
        assert_eq!(t.last_error(), Some("auth: bad key"));
    }

    #[test]
    fn a_branch_change_prints_only_what_differs_from_the_screen() {
        let user = |id: i64, seq: i64, text: &str| {
            message(
                id,
                seq,
                "user",
                json!([{"type": "text", "text": text}]),
                false,
            )
        };
        let reply = |id: i64, seq: i64, text: &str| {
            message(
                id,
                seq,
                "assistant",
                json!([{"type": "text", "text": text}]),
                false,
            )
        };
        let mut t = Transcript::new();
        let before = feed(
            &mut t,
            &[
                user(1, 1, "hi"),
                reply(2, 3, "hello"),
                user(3, 4, "more"),
                reply(4, 6, "sure"),
            ],
        );
        assert_eq!(before, "[you: hi]hello[you: more]sure");

        // An edit of the second message: the first turn is not printed again.
        let branch = event(7, "branch", json!({"leaf_id": 5}));
        let edited = feed(
            &mut t,
            &[
                branch,
                user(1, 8, "hi"),
                reply(2, 9, "hello"),
                user(5, 10, "other"),
                reply(6, 11, "fresh"),
            ],
        );
        assert_eq!(edited, "[another version from here on:][you: other]fresh");
        // A regenerate of the last reply: the branch repeats the screen up to it, then the
        // new reply streams.
        let branch = event(12, "branch", json!({"leaf_id": 5}));
        let regenerated = feed(
            &mut t,
            &[
                branch,
                user(1, 13, "hi"),
                reply(2, 14, "hello"),
                user(5, 15, "other"),
                text(16, "new words"),
            ],
        );
        assert_eq!(regenerated, "[another version from here on:]new words");

        // A fresh follower of the same chat, continuing the screen: the same rule, the
        // `branch` event a replay may start with included.
        let mut next = Transcript::continuing(&t);
        let replayed = feed(
            &mut next,
            &[
                event(1, "branch", json!({"leaf_id": 4})),
                user(1, 2, "hi"),
                reply(2, 3, "hello"),
                user(3, 4, "more"),
                reply(4, 5, "sure"),
            ],
        );
        assert_eq!(replayed, "[another version from here on:][you: more]sure");
        // A branch that only adds to the screen says nothing of versions.
        let mut grown = Transcript::continuing(&next);
        let added = feed(
            &mut grown,
            &[
                user(1, 1, "hi"),
                reply(2, 2, "hello"),
                user(3, 3, "more"),
                reply(4, 4, "sure"),
                user(6, 5, "new"),
            ],
        );
        assert_eq!(added, "[you: new]");
    }

    #[test]
    fn messages_with_other_versions_are_marked() {
        let mut t = Transcript::new();
        let with_versions = |id: i64, seq: i64, role: &str, text: &str, siblings: Value| {
            event(
                seq,
                "message",
                json!({"id": id, "role": role, "parts": [{"type": "text", "text": text}],
                       "interrupted": false, "siblings": siblings}),
            )
        };
        let out = feed(
            &mut t,
            &[
                with_versions(3, 1, "user", "hi", json!([1, 3])),
                with_versions(4, 2, "assistant", "hello", json!([4])),
                with_versions(5, 3, "user", "more", json!([5])),
                with_versions(8, 4, "assistant", "again", json!([6, 8, 9])),
            ],
        );
        assert_eq!(out, "[you: hi  < 2/2 >]hello[you: more]again[< 2/3 >]");
    }

    #[test]
    fn queue_changes_are_announced() {
        let mut t = Transcript::new();
        let queue = |n: usize| event(1, "queue", json!({"queued": vec![json!({}); n]}));
        assert_eq!(
            feed(&mut t, &[queue(0), queue(1), queue(1), queue(0)]),
            "[queued messages: 1][queued messages: 0]"
        );
    }
}
