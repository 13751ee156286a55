//! The transcript: a pure state machine that turns the daemon's live events into what the
//! terminal prints.
//!
//! It keeps what was shown of the step in progress so that a committed `message` (which
//! replaces the live parts) prints only what was not already on screen, and it remembers
//! the last durable event id so that a replay after a reconnect prints nothing twice. After
//! a change of branch it prints only what differs from what is on screen.
//!
//! Longer than most files: one state machine, with a handler for each kind of live event.

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
mod tests;
