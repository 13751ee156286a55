//! One reply as Keel's own events describe it: the steps the model took, their text,
//! reasoning and tool calls with results, and how the reply ended.
//!
//! Both compatible protocols are built from this view rather than from the raw events, so
//! they see the same thing a Keel client sees: live parts grow the step in progress, a
//! committed message replaces it with what was stored, `stream_reset` voids it (a restart or
//! a recovery that republishes what it continues from), `tool_call_cancel` drops a call, and
//! `status` ends the reply. The emitters then send only what is new compared with what they
//! already sent, so a republished prefix is never sent twice.
//!
//! | Keel event | effect on the reply |
//! | --- | --- |
//! | `part` text / reasoning | appended to the last block of that kind in the step in progress, or a new block |
//! | `part` tool_call | arguments appended to the call with that id (a new call block if none); `complete` fixes them |
//! | `part` tool_result | the result of the call with that id |
//! | `message` assistant | the step in progress becomes exactly the stored parts and is committed |
//! | `message` tool | results of the calls with those ids |
//! | `message` user (after the reply began) | the reply is over (`Done`) |
//! | `message` tool answering a client-side call, with [`Reply::ending_at_answers_to`] | the reply is over (`ToolCalls`): the answers start the next turn |
//! | `stream_reset` | the step in progress loses its blocks (what follows republishes them) and starts a new generation |
//! | `tool_call_cancel` | the call leaves the step in progress |
//! | `part` of role system (a compaction summary streaming) | nothing: the summary is not the reply |
//! | `message` system (a compaction's notice, after the reply began) | the step in progress loses its blocks, like `stream_reset` (a daemon of an older release streamed its summary as the assistant's) |
//! | `status` waiting / requires_action / error | the reply ends: `Done` or `Interrupted`, `ToolCalls`, `Failed` |
//! | `branch` | the reply ends (`Interrupted`): the current branch changed under it, and the messages after the event are the new branch's |
//!
//! Every block has a key that follows it for as long as the reply knows it: text appended
//! after a tool call was cancelled lands in the same block (same key), a stored message
//! keeps the keys of the live blocks it replaces (calls by id, text and reasoning by their
//! order among blocks of their kind), and blocks republished after a `stream_reset` get new
//! keys in a new generation of the step. `project` follows the keys.

use keel_core::{Part, PartKind};
use serde_json::Value;

/// How a reply ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// The model finished.
    Done,
    /// The user stopped it; what was said is kept.
    Interrupted,
    /// The model called client-side tools and waits for their results.
    ToolCalls,
    /// The run failed with this message.
    Failed(String),
}

/// A tool call's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    pub value: Value,
    pub is_error: bool,
}

/// A tool call as far as it was streamed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    /// JSON text of the arguments (partial until `complete`).
    pub args: String,
    pub complete: bool,
    pub result: Option<Outcome>,
    /// The provider ran it (web search): no client runs it, its result comes with it.
    pub provider_executed: bool,
}

/// One block of a step, in the order blocks started.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Block {
    Text(String),
    Reasoning(String),
    Call(Call),
}

/// One model call and its tool results.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Step {
    pub blocks: Vec<Block>,
    /// The key of each block (same order as `blocks`).
    keys: Vec<u64>,
    /// Stored: nothing in it changes any more (results of its calls may still arrive).
    pub committed: bool,
    /// How many times the step's blocks were voided (`stream_reset`, a compaction).
    pub generation: u32,
}

impl Step {
    /// The blocks with their keys.
    pub(crate) fn keyed(&self) -> impl Iterator<Item = (u64, &Block)> {
        self.keys.iter().copied().zip(&self.blocks)
    }

    fn push(&mut self, key: u64, block: Block) {
        self.keys.push(key);
        self.blocks.push(block);
    }

    fn void(&mut self) {
        self.blocks.clear();
        self.keys.clear();
        self.generation += 1;
    }
}

/// A reply built from Keel events.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reply {
    pub steps: Vec<Step>,
    pub end: Option<End>,
    /// A committed message of this reply was cut short by an interrupt.
    interrupted: bool,
    /// Client-side tools whose stored answers end the reply (see
    /// [`Reply::ending_at_answers_to`]).
    client_tools: Vec<String>,
    /// The key the next new block takes.
    next_key: u64,
}

impl Reply {
    /// A reply rebuilt from stored messages (what followed one user message).
    pub(crate) fn from_messages<'a>(
        messages: impl IntoIterator<Item = (&'a str, &'a [Part])>,
    ) -> Self {
        let mut reply = Self::default();
        for (role, parts) in messages {
            match role {
                "assistant" => reply.commit(parts),
                "tool" => reply.results(parts),
                _ => {}
            }
        }
        reply
    }

    /// A reply that ends where the answers to these client-side tools were stored: for a
    /// protocol where those answers start the next turn (OpenAI Responses).
    pub(crate) fn ending_at_answers_to(client_tools: Vec<String>) -> Self {
        Self {
            client_tools,
            ..Self::default()
        }
    }

    /// Ends a reply on a branch nothing runs on, as it was left: one that stored nothing was
    /// superseded (an edit or a regenerate moved the branch while it started), so it ended
    /// interrupted, as its stream said; otherwise as its stored messages say.
    pub(crate) fn left(&mut self) {
        if self.end.is_some() {
            return;
        }
        if self.begun() {
            self.status(&serde_json::json!({"status": "waiting"}));
        } else {
            self.end = Some(End::Interrupted);
        }
    }

    /// Applies one Keel live event (its name and JSON data). Events after the end change
    /// nothing.
    pub(crate) fn apply(&mut self, event: &str, data: &Value) {
        if self.end.is_some() {
            return;
        }
        match event {
            "message" => self.message(data),
            "part" => self.part(data),
            "stream_reset" => self.void_step_in_progress(),
            "tool_call_cancel" => {
                let id = str_field(data, "tool_call_id");
                if let Some(step) = self.steps.last_mut().filter(|s| !s.committed) {
                    let keep: Vec<bool> = step
                        .blocks
                        .iter()
                        .map(|b| !matches!(b, Block::Call(c) if c.id == id))
                        .collect();
                    let mut flags = keep.iter();
                    step.blocks
                        .retain(|_| flags.next().copied().unwrap_or(true));
                    let mut flags = keep.iter();
                    step.keys.retain(|_| flags.next().copied().unwrap_or(true));
                }
            }
            "status" => self.status(data),
            // The current branch changed under the reply (an edit elsewhere): the messages
            // that follow are the new branch's, not this reply's. The run that was replying
            // is superseded and never stores its step in progress, so the reply keeps only
            // its stored steps, as a later retrieval shows it.
            "branch" => {
                self.void_step_in_progress();
                self.end = Some(End::Interrupted);
            }
            _ => {}
        }
    }

    fn begun(&self) -> bool {
        !self.steps.is_empty()
    }

    fn void_step_in_progress(&mut self) {
        if let Some(step) = self.steps.last_mut().filter(|s| !s.committed) {
            step.void();
        }
    }

    fn fresh_key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn message(&mut self, data: &Value) {
        let parts: Vec<Part> = data
            .get("parts")
            .cloned()
            .and_then(|p| serde_json::from_value(p).ok())
            .unwrap_or_default();
        match data.get("role").and_then(Value::as_str) {
            Some("assistant") => {
                if data.get("interrupted").and_then(Value::as_bool) == Some(true) {
                    self.interrupted = true;
                }
                self.commit(&parts);
            }
            Some("tool") if self.begun() && self.answers_client(&parts) => {
                self.end = Some(End::ToolCalls);
            }
            Some("tool") => self.results(&parts),
            Some("user") if self.begun() => self.end = Some(End::Done),
            // A compaction's notice: the parts streamed since the last commit were its
            // summary, never part of the reply.
            Some("system") if self.begun() => self.void_step_in_progress(),
            _ => {}
        }
    }

    /// The step in progress becomes exactly these stored parts.
    fn commit(&mut self, parts: &[Part]) {
        if self.steps.last().is_none_or(|s| s.committed) {
            self.steps.push(Step::default());
        }
        let mut blocks = Vec::new();
        let mut provider_results = Vec::new();
        for part in parts {
            match &part.kind {
                // Neither compatible protocol has a refusal part in its stream, so a refusal
                // reads as the reply's text there.
                PartKind::Text { text } | PartKind::Refusal { text } => {
                    blocks.push(Block::Text(text.clone()));
                }
                PartKind::Reasoning { text, .. } => blocks.push(Block::Reasoning(text.clone())),
                PartKind::ToolCall {
                    tool_call_id,
                    tool_name,
                    args,
                    provider_executed,
                    ..
                } => blocks.push(Block::Call(Call {
                    id: tool_call_id.clone(),
                    name: tool_name.clone(),
                    args: args.clone(),
                    complete: true,
                    result: None,
                    provider_executed: *provider_executed,
                })),
                PartKind::ToolResult { .. } => provider_results.push(part.clone()),
                _ => {}
            }
        }
        let keys: Vec<Option<u64>> = match self.steps.last() {
            Some(step) => {
                let mut ordinal = [0usize; 2];
                let mut keys = Vec::with_capacity(blocks.len());
                for block in &blocks {
                    keys.push(live_key(step, block, &mut ordinal));
                }
                keys
            }
            None => Vec::new(),
        };
        let keys: Vec<u64> = keys
            .into_iter()
            .map(|k| k.unwrap_or_else(|| self.fresh_key()))
            .collect();
        if let Some(step) = self.steps.last_mut() {
            // Results that arrived live stay with their calls.
            for block in &mut blocks {
                if let Block::Call(call) = block {
                    call.result = step.blocks.iter().find_map(|b| match b {
                        Block::Call(c) if c.id == call.id => c.result.clone(),
                        _ => None,
                    });
                }
            }
            step.blocks = blocks;
            step.keys = keys;
            step.committed = true;
        }
        self.results(&provider_results);
    }

    fn answers_client(&self, parts: &[Part]) -> bool {
        parts.iter().any(|p| {
            matches!(&p.kind, PartKind::ToolResult { tool_name, .. } if self.client_tools.contains(tool_name))
        })
    }

    fn results(&mut self, parts: &[Part]) {
        for part in parts {
            if let PartKind::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } = &part.kind
            {
                self.set_result(tool_call_id, result.clone(), *is_error);
            }
        }
    }

    fn set_result(&mut self, id: &str, value: Value, is_error: bool) {
        let call = self
            .steps
            .iter_mut()
            .rev()
            .flat_map(|s| s.blocks.iter_mut())
            .find_map(|b| match b {
                Block::Call(c) if c.id == id => Some(c),
                _ => None,
            });
        if let Some(call) = call {
            call.result = Some(Outcome { value, is_error });
        }
    }

    fn live_step(&mut self) -> &mut Step {
        if self.steps.last().is_none_or(|s| s.committed) {
            self.steps.push(Step::default());
        }
        let last = self.steps.len() - 1;
        &mut self.steps[last]
    }

    /// Appends text to the step's last block of that kind if it is the last block, or to
    /// a new block.
    fn append_text(&mut self, text: &str, reasoning: bool) {
        let key = self.fresh_key();
        let step = self.live_step();
        match (step.blocks.last_mut(), reasoning) {
            (Some(Block::Text(t)), false) | (Some(Block::Reasoning(t)), true) => t.push_str(text),
            (_, false) => step.push(key, Block::Text(text.to_owned())),
            (_, true) => step.push(key, Block::Reasoning(text.to_owned())),
        }
    }

    fn part(&mut self, data: &Value) {
        let Some(part) = data.get("part") else {
            return;
        };
        // A compaction summary streaming: never part of the reply.
        if data.get("role").and_then(Value::as_str) == Some("system") {
            return;
        }
        match part.get("type").and_then(Value::as_str) {
            Some("text" | "refusal") => self.append_text(str_field(part, "text"), false),
            Some("reasoning") => self.append_text(str_field(part, "text"), true),
            Some("tool_call") => self.call_delta(part),
            Some("tool_result") => {
                let id = str_field(part, "tool_call_id").to_owned();
                let value = part.get("result").cloned().unwrap_or(Value::Null);
                let is_error = part.get("is_error").and_then(Value::as_bool) == Some(true);
                self.set_result(&id, value, is_error);
            }
            _ => {}
        }
    }

    fn call_delta(&mut self, part: &Value) {
        let id = str_field(part, "tool_call_id").to_owned();
        let name = str_field(part, "tool_name").to_owned();
        let delta = str_field(part, "args_delta");
        let complete = part.get("complete").and_then(Value::as_bool) == Some(true);
        let key = self.fresh_key();
        let step = self.live_step();
        let index = step
            .blocks
            .iter()
            .position(|b| matches!(b, Block::Call(c) if c.id == id));
        let index = index.unwrap_or_else(|| {
            step.push(
                key,
                Block::Call(Call {
                    id,
                    name,
                    args: String::new(),
                    complete: false,
                    result: None,
                    provider_executed: false,
                }),
            );
            step.blocks.len() - 1
        });
        if let Block::Call(call) = &mut step.blocks[index] {
            call.args.push_str(delta);
            if complete {
                if let Some(args) = part.get("args").and_then(Value::as_str) {
                    call.args = args.to_owned();
                }
                call.complete = true;
                call.provider_executed =
                    part.get("provider_executed").and_then(Value::as_bool) == Some(true);
            }
        }
    }

    fn status(&mut self, data: &Value) {
        match data.get("status").and_then(Value::as_str) {
            Some("waiting") => {
                self.end = Some(if self.interrupted {
                    End::Interrupted
                } else {
                    End::Done
                });
            }
            Some("requires_action") => self.end = Some(End::ToolCalls),
            Some("error") => {
                let message = data
                    .pointer("/last_error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the run failed");
                self.end = Some(End::Failed(message.to_owned()));
            }
            _ => {}
        }
    }
}

/// The key of the live block a stored block replaces: the call with its id, or the live
/// block of its kind at the same place among blocks of that kind (`ordinal` counts text and
/// reasoning blocks seen so far).
fn live_key(step: &Step, block: &Block, ordinal: &mut [usize; 2]) -> Option<u64> {
    if step.committed {
        return None;
    }
    let kind = match block {
        Block::Call(call) => {
            return step
                .keyed()
                .find(|(_, b)| matches!(b, Block::Call(c) if c.id == call.id))
                .map(|(k, _)| k);
        }
        Block::Text(_) => 0,
        Block::Reasoning(_) => 1,
    };
    let nth = ordinal[kind];
    ordinal[kind] += 1;
    step.keyed()
        .filter(|(_, b)| match b {
            Block::Text(_) => kind == 0,
            Block::Reasoning(_) => kind == 1,
            Block::Call(_) => false,
        })
        .nth(nth)
        .map(|(k, _)| k)
}

fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

#[cfg(test)]
mod tests;
