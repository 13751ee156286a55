//! The one projection of a [`Reply`] onto a stream of parts, shared by every compatible
//! protocol: given the reply as Keel's events built it so far, the [`Op`]s that bring a
//! client from what it was sent to it. Each protocol only spells the ops its own way.
//!
//! Parts follow the reply's blocks by key, not by position:
//!
//! * text or reasoning that grows an open part is a [`Op::Delta`]; text that grows a block
//!   whose part was already closed opens a new part carrying only the new text;
//! * a `stream_reset` (or a compaction) voids the step's blocks: the blocks published after
//!   it are matched, in order and by kind, with the parts sent before it. A block that
//!   repeats or extends what its part shows continues that part (a republished prefix is
//!   not sent twice); one that says something else closes that part as voided and starts a
//!   new one, since no protocol can take text back. Voided parts still open are closed
//!   when the step is stored;
//! * a tool call is announced ([`Op::Call`]) once its arguments are complete or its step is
//!   stored, never while they stream: only a call cut mid-arguments is ever cancelled, so
//!   no client is shown a call that then disappears, and text that continues after such a
//!   call continues its open part;
//! * results are sent in call order within a step (a result waits for the earlier calls'),
//!   so the ops do not depend on which tool finished first;
//! * a call of a `held` tool (client-side tools of a stream that is replayed from the
//!   store) is announced only once its result is known or the reply ended, so a resumed
//!   stream says the call was answered instead of asking for it again.
//!
//! One part is open at a time: opening a part or announcing a call closes the open one.
//! The ops depend on the content only, not on how events were batched between updates,
//! except for where text deltas are split.

use crate::reply::{Block, Call, End, Outcome, Reply};

/// A text-like part's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    Text,
    Reasoning,
}

/// One change of what the client has. `part` numbers parts in the order they were opened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// The reply's stream starts (first update).
    Start,
    /// A step (one model call) starts.
    StartStep,
    /// A text or reasoning part opens (empty).
    Open { part: usize, kind: TextKind },
    /// Text appended to an open part.
    Delta {
        part: usize,
        kind: TextKind,
        text: String,
    },
    /// A text or reasoning part ends with `text` (all it carried); `voided`: a restart
    /// replaced it.
    Close {
        part: usize,
        kind: TextKind,
        text: String,
        voided: bool,
    },
    /// A tool call with its complete arguments; `answered`: a call of a `held` tool whose
    /// answer is already known (a [`Op::Output`] follows at once).
    Call {
        part: usize,
        call: Call,
        answered: bool,
    },
    /// The result of an announced call.
    Output {
        part: usize,
        call_id: String,
        outcome: Outcome,
    },
    /// The step was stored.
    FinishStep,
    /// The reply ended.
    End(End),
}

#[derive(Debug, Clone, PartialEq)]
enum Key {
    Block(u64),
    Call(String),
    /// Replaced by another part.
    Dead,
}

#[derive(Debug)]
struct Sent {
    key: Key,
    step: usize,
    /// `None` for a call.
    kind: Option<TextKind>,
    /// The block's text before this part (carried by earlier parts).
    base: String,
    /// The text this part carried.
    own: String,
    open: bool,
    /// Its block was voided and no block took it over (yet).
    voided: bool,
    output_sent: bool,
}

impl Sent {
    fn shown(&self) -> String {
        format!("{}{}", self.base, self.own)
    }
}

/// What a client was sent of one reply.
#[derive(Debug, Default)]
pub(crate) struct Projection {
    started: bool,
    parts: Vec<Sent>,
    /// The generation of each announced step.
    steps: Vec<u32>,
    finished_steps: usize,
    ended: bool,
    held: Vec<String>,
}

impl Projection {
    /// A projection announcing calls of `held` tools only with their result or at the end.
    pub(crate) fn new(held: Vec<String>) -> Self {
        Self {
            held,
            ..Self::default()
        }
    }

    /// True once the reply's end was projected.
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// The ops that bring the client from what it was sent to `reply`.
    pub(crate) fn update(&mut self, reply: &Reply) -> Vec<Op> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        if !self.started {
            self.started = true;
            out.push(Op::Start);
        }
        for (index, step) in reply.steps.iter().enumerate() {
            let visible: Vec<(u64, &Block)> = step
                .keyed()
                .filter(|(_, b)| match b {
                    Block::Text(t) | Block::Reasoning(t) => !t.is_empty(),
                    Block::Call(c) => c.complete || step.committed,
                })
                .collect();
            if index == self.steps.len() {
                // A step is announced once it has something to show.
                if visible.is_empty() && !step.committed {
                    break;
                }
                out.push(Op::StartStep);
                self.steps.push(step.generation);
            }
            if self.steps[index] != step.generation {
                self.steps[index] = step.generation;
                for sent in self.parts.iter_mut().filter(|p| p.step == index) {
                    sent.voided = true;
                }
            }
            let mut waiting = false;
            let mut complete = true;
            for (key, block) in visible {
                match block {
                    Block::Text(text) => self.text(index, key, TextKind::Text, text, &mut out),
                    Block::Reasoning(text) => {
                        self.text(index, key, TextKind::Reasoning, text, &mut out);
                    }
                    Block::Call(call) => {
                        let hold = self.held.contains(&call.name)
                            && call.result.is_none()
                            && reply.end.is_none();
                        if hold && !self.announced(&call.id) {
                            complete = false;
                            break;
                        }
                        self.call(index, call, &mut waiting, &mut out);
                    }
                }
            }
            if step.committed && complete && index == self.finished_steps {
                self.close_step(index, &mut out);
                self.finished_steps += 1;
                out.push(Op::FinishStep);
            }
        }
        if let Some(end) = &reply.end {
            for index in 0..self.parts.len() {
                self.close(index, &mut out);
            }
            self.ended = true;
            out.push(Op::End(end.clone()));
        }
        out
    }

    fn announced(&self, call_id: &str) -> bool {
        self.parts
            .iter()
            .any(|p| p.key == Key::Call(call_id.to_owned()))
    }

    fn text(&mut self, step: usize, key: u64, kind: TextKind, text: &str, out: &mut Vec<Op>) {
        let found = self
            .parts
            .iter()
            .rposition(|p| p.key == Key::Block(key))
            .or_else(|| self.take_over(step, key, kind, text, out));
        let Some(index) = found else {
            self.open(step, key, kind, String::new(), text, out);
            return;
        };
        let shown = self.parts[index].shown();
        if let Some(rest) = text.strip_prefix(shown.as_str()) {
            if rest.is_empty() {
                return;
            }
            if self.parts[index].open {
                self.parts[index].own.push_str(rest);
                out.push(Op::Delta {
                    part: index,
                    kind,
                    text: rest.to_owned(),
                });
            } else {
                // Text after the part was closed: a new part carries the rest.
                self.parts[index].key = Key::Dead;
                self.open(step, key, kind, shown, rest, out);
            }
        } else if !shown.starts_with(text) {
            // Something else than what the client has: the old part ends, a new one
            // carries the block from its start.
            self.parts[index].voided = true;
            self.close(index, out);
            self.parts[index].key = Key::Dead;
            self.open(step, key, kind, String::new(), text, out);
        }
        // Otherwise a republished prefix of what the client has: nothing new yet.
    }

    /// A voided part of this step that the block published after a reset takes over: the
    /// first one of its kind, when one is left. One that shows something else is closed.
    fn take_over(
        &mut self,
        step: usize,
        key: u64,
        kind: TextKind,
        text: &str,
        out: &mut Vec<Op>,
    ) -> Option<usize> {
        let index = self.parts.iter().position(|p| {
            p.step == step && p.voided && p.kind == Some(kind) && p.key != Key::Dead
        })?;
        let shown = self.parts[index].shown();
        if text.starts_with(shown.as_str()) || shown.starts_with(text) {
            let part = &mut self.parts[index];
            part.key = Key::Block(key);
            part.voided = false;
            Some(index)
        } else {
            self.close(index, out);
            self.parts[index].key = Key::Dead;
            None
        }
    }

    fn open(
        &mut self,
        step: usize,
        key: u64,
        kind: TextKind,
        base: String,
        text: &str,
        out: &mut Vec<Op>,
    ) {
        self.close_open(out);
        let part = self.parts.len();
        self.parts.push(Sent {
            key: Key::Block(key),
            step,
            kind: Some(kind),
            base,
            own: text.to_owned(),
            open: true,
            voided: false,
            output_sent: false,
        });
        out.push(Op::Open { part, kind });
        out.push(Op::Delta {
            part,
            kind,
            text: text.to_owned(),
        });
    }

    fn call(&mut self, step: usize, call: &Call, waiting: &mut bool, out: &mut Vec<Op>) {
        let key = Key::Call(call.id.clone());
        let index = match self.parts.iter().position(|p| p.key == key) {
            Some(index) => {
                self.parts[index].voided = false;
                index
            }
            None => {
                self.close_open(out);
                self.parts.push(Sent {
                    key,
                    step,
                    kind: None,
                    base: String::new(),
                    own: call.args.clone(),
                    open: false,
                    voided: false,
                    output_sent: false,
                });
                let part = self.parts.len() - 1;
                out.push(Op::Call {
                    part,
                    call: Call {
                        result: None,
                        ..call.clone()
                    },
                    answered: self.held.contains(&call.name) && call.result.is_some() && !*waiting,
                });
                part
            }
        };
        if self.parts[index].output_sent {
            return;
        }
        match &call.result {
            Some(outcome) if !*waiting => {
                self.parts[index].output_sent = true;
                out.push(Op::Output {
                    part: index,
                    call_id: call.id.clone(),
                    outcome: outcome.clone(),
                });
            }
            _ => *waiting = true,
        }
    }

    fn close_open(&mut self, out: &mut Vec<Op>) {
        for index in 0..self.parts.len() {
            self.close(index, out);
        }
    }

    fn close_step(&mut self, step: usize, out: &mut Vec<Op>) {
        for index in 0..self.parts.len() {
            if self.parts[index].step == step {
                self.close(index, out);
            }
        }
    }

    fn close(&mut self, index: usize, out: &mut Vec<Op>) {
        let part = &mut self.parts[index];
        if !part.open {
            return;
        }
        part.open = false;
        if let Some(kind) = part.kind {
            out.push(Op::Close {
                part: index,
                kind,
                text: part.own.clone(),
                voided: part.voided,
            });
        }
    }
}

#[cfg(test)]
mod tests;
