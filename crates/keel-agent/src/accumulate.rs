//! Turns a model's stream events into the content of one step.
//!
//! The accumulator keeps content in the order blocks *started*, and writes deltas straight
//! into their block, so at any moment — including the instant an interrupt lands — its
//! content is exactly what the user has seen. Nothing needs "flushing" on interrupt; in-flight
//! blocks are simply already there.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use keel_core::{FinishReason, Part, PartKind, StreamEvent, Usage};
use serde_json::Value;

use crate::sink::{EventSink, LiveEvent};
use keel_core::Clock;

/// A tool call as streamed.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamedCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
    pub provider_executed: bool,
    /// Opaque provider data that goes back with the call (a Gemini thought signature).
    pub metadata: Option<Value>,
    /// The complete call arrived (not only argument deltas).
    pub complete: bool,
    pub emitted_at: DateTime<Utc>,
}

/// One block of step content, in start order.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    /// The model declined to answer.
    Refusal(String),
    Reasoning {
        text: String,
        metadata: Option<Value>,
    },
    ToolCall(StreamedCall),
    /// A result of a provider-executed tool.
    ProviderResult(Part),
    File {
        media_type: String,
        data: String,
    },
}

/// The accumulated state of the step in progress.
#[derive(Debug, Default, Clone)]
pub struct StepAccumulator {
    pub blocks: Vec<Block>,
    pub sources: Vec<(String, Option<String>)>,
    pub usage: Usage,
    pub finish_reason: Option<FinishReason>,
    pub provider_metadata: Option<Value>,
    pub response_id: Option<String>,
    /// Number of content events seen (deltas, calls, results), for checkpoint cadence.
    pub content_events: u64,
    /// Number of times reasoning got provider metadata (a signature, encrypted content):
    /// state a resumed step needs that its live events do not carry.
    pub metadata_events: u64,
    open_text: HashMap<String, usize>,
    open_refusal: HashMap<String, usize>,
    open_reasoning: HashMap<String, usize>,
    open_calls: HashMap<String, usize>,
    /// The text block the next new text block continues (mid-stream recovery).
    continuation_target: Option<usize>,
    /// Trailing whitespace of the continued text the continuation may bring again
    /// ([`crate::seam::stitch`]).
    seam_whitespace: String,
}

impl StepAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one event, publishing what the user should see. Errors are not handled here.
    pub fn apply(&mut self, event: StreamEvent, sink: &dyn EventSink, clock: &Arc<dyn Clock>) {
        match event {
            StreamEvent::TextStart { id } => {
                self.open_text_block(id);
            }
            StreamEvent::TextDelta { id, delta } => {
                if delta.is_empty() {
                    return;
                }
                let index = self.open_text_block(id);
                // Only a continuation's start is stitched; every other delta moves on as it is.
                let delta = if self.seam_whitespace.is_empty() {
                    delta
                } else {
                    crate::seam::stitch(&mut self.seam_whitespace, &delta)
                };
                if delta.is_empty() {
                    return;
                }
                if let Some(Block::Text(text)) = self.blocks.get_mut(index) {
                    text.push_str(&delta);
                }
                self.content_events += 1;
                sink.publish(LiveEvent::TextDelta { delta });
            }
            StreamEvent::TextEnd { id } => {
                self.open_text.remove(&id);
            }
            StreamEvent::RefusalDelta { id, delta } => {
                if delta.is_empty() {
                    return;
                }
                let index = match self.open_refusal.get(&id) {
                    Some(&index) => index,
                    None => {
                        self.blocks.push(Block::Refusal(String::new()));
                        let index = self.blocks.len() - 1;
                        self.open_refusal.insert(id, index);
                        index
                    }
                };
                if let Some(Block::Refusal(text)) = self.blocks.get_mut(index) {
                    text.push_str(&delta);
                }
                self.content_events += 1;
                sink.publish(LiveEvent::RefusalDelta { delta });
            }
            StreamEvent::ReasoningStart { id, metadata } => {
                let index = self.open_reasoning_block(id);
                self.set_reasoning_metadata(index, metadata);
            }
            StreamEvent::ReasoningDelta {
                id,
                delta,
                metadata,
            } => {
                let index = self.open_reasoning_block(id);
                if let Some(Block::Reasoning { text, .. }) = self.blocks.get_mut(index) {
                    text.push_str(&delta);
                }
                self.set_reasoning_metadata(index, metadata);
                if !delta.is_empty() {
                    self.content_events += 1;
                    sink.publish(LiveEvent::ReasoningDelta { delta });
                }
            }
            StreamEvent::ReasoningEnd { id, metadata } => {
                if let Some(index) = self.open_reasoning.remove(&id) {
                    self.set_reasoning_metadata(index, metadata);
                }
            }
            StreamEvent::ToolInputStart {
                id,
                tool_name,
                provider_executed,
            } => {
                self.open_call(id, tool_name, provider_executed, clock);
            }
            StreamEvent::ToolInputDelta { id, delta } => {
                let Some(&index) = self.open_calls.get(&id) else {
                    // Arguments for a call that never started: nothing to attach them to.
                    return;
                };
                if let Some(Block::ToolCall(call)) = self.blocks.get_mut(index) {
                    call.args.push_str(&delta);
                    self.content_events += 1;
                    sink.publish(LiveEvent::ToolCallDelta {
                        tool_call_id: call.tool_call_id.clone(),
                        tool_name: call.tool_name.clone(),
                        args_delta: delta,
                    });
                }
            }
            StreamEvent::ToolInputEnd { id } => {
                // The arguments are complete even if the provider sends no separate call event.
                if let Some(&index) = self.open_calls.get(&id)
                    && let Some(Block::ToolCall(call)) = self.blocks.get_mut(index)
                {
                    call.complete = true;
                }
            }
            StreamEvent::ToolCall {
                id,
                tool_name,
                args,
                provider_executed,
            } => {
                let index = self.open_call(id, tool_name, provider_executed, clock);
                if let Some(Block::ToolCall(call)) = self.blocks.get_mut(index) {
                    call.args = args;
                    call.complete = true;
                    call.emitted_at = clock.now();
                    self.content_events += 1;
                    sink.publish(LiveEvent::ToolCall {
                        tool_call_id: call.tool_call_id.clone(),
                        tool_name: call.tool_name.clone(),
                        args: call.args.clone(),
                        provider_executed: call.provider_executed,
                    });
                }
            }
            StreamEvent::ToolCallMetadata { id, metadata } => {
                if let Some(&index) = self.open_calls.get(&id)
                    && let Some(Block::ToolCall(call)) = self.blocks.get_mut(index)
                {
                    call.metadata = Some(metadata);
                }
            }
            StreamEvent::ToolResult {
                id,
                tool_name,
                result,
                is_error,
            } => {
                let part = Part::tool_result(id, tool_name, result, is_error, true).at(clock.now());
                self.content_events += 1;
                sink.publish(LiveEvent::ToolResult { part: part.clone() });
                self.blocks.push(Block::ProviderResult(part));
            }
            StreamEvent::Source { url, title } => {
                sink.publish(LiveEvent::Source {
                    url: url.clone(),
                    title: title.clone(),
                });
                self.sources.push((url, title));
            }
            StreamEvent::File { media_type, data } => {
                self.blocks.push(Block::File { media_type, data });
            }
            StreamEvent::Finish {
                reason,
                usage,
                provider_metadata,
            } => {
                self.finish_reason = Some(reason);
                self.usage.merge_max(&usage);
                if provider_metadata.is_some() {
                    self.provider_metadata = provider_metadata;
                }
            }
            StreamEvent::ResponseId { id } => self.response_id = Some(id),
            StreamEvent::KeepAlive | StreamEvent::Error(_) => {}
        }
    }

    /// Every tool call of the step, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &StreamedCall> {
        self.blocks.iter().filter_map(|b| match b {
            Block::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// The step's text so far.
    pub fn text(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Whether nothing user-visible has accumulated.
    pub fn is_empty(&self) -> bool {
        self.blocks.iter().all(|b| match b {
            Block::Text(t) | Block::Refusal(t) => t.is_empty(),
            Block::Reasoning { text, .. } => text.is_empty(),
            _ => false,
        })
    }

    /// Makes the next text block of a later attempt continue the last text block, so a
    /// continued reply is stored as one text, not as prefix and continuation side by side.
    pub fn continue_text(&mut self) {
        self.open_text.clear();
        self.open_refusal.clear();
        self.open_reasoning.clear();
        self.continuation_target = self
            .blocks
            .iter()
            .rposition(|b| matches!(b, Block::Text(_)));
        self.seam_whitespace = match self.continuation_target.and_then(|i| self.blocks.get(i)) {
            Some(Block::Text(text)) => text[text.trim_end().len()..].to_owned(),
            _ => String::new(),
        };
    }

    /// Makes this (empty) step the continuation of a reply stored before it, `prefix`: its
    /// text is stitched on where the prefix ends ([`crate::seam::stitch`]).
    pub fn follow(&mut self, prefix: &str) {
        self.continuation_target = None;
        self.seam_whitespace = prefix[prefix.trim_end().len()..].to_owned();
    }

    /// Tells clients that the step now holds exactly this content: a `stream_reset`, then
    /// the text and complete tool calls. A resumed step starts with it, because what clients
    /// saw of the step before (from a process that died, or a snapshot that lags or leads
    /// what they were sent) need not match what the step continues from.
    pub fn republish(&self, sink: &dyn EventSink) {
        sink.publish(LiveEvent::StreamReset);
        for block in &self.blocks {
            match block {
                Block::Text(text) if !text.is_empty() => sink.publish(LiveEvent::TextDelta {
                    delta: text.clone(),
                }),
                Block::Refusal(text) if !text.is_empty() => {
                    sink.publish(LiveEvent::RefusalDelta {
                        delta: text.clone(),
                    });
                }
                Block::ToolCall(call) if call.complete => sink.publish(LiveEvent::ToolCall {
                    tool_call_id: call.tool_call_id.clone(),
                    tool_name: call.tool_name.clone(),
                    args: call.args.clone(),
                    provider_executed: call.provider_executed,
                }),
                Block::ProviderResult(part) => {
                    sink.publish(LiveEvent::ToolResult { part: part.clone() });
                }
                _ => {}
            }
        }
    }

    /// An accumulator holding `blocks`, as a restored step starts.
    pub(crate) fn from_blocks(blocks: Vec<Block>) -> Self {
        let mut acc = Self {
            blocks,
            ..Self::default()
        };
        acc.reindex();
        acc
    }

    /// Removes a tool call (e.g. a truncated one that will not run).
    pub fn remove_call(&mut self, tool_call_id: &str) {
        self.blocks
            .retain(|b| !matches!(b, Block::ToolCall(c) if c.tool_call_id == tool_call_id));
        self.reindex();
    }

    /// Whether a provider-executed result for `tool_call_id` is present.
    pub fn has_provider_result(&self, tool_call_id: &str) -> bool {
        self.blocks.iter().any(
            |b| matches!(b, Block::ProviderResult(p) if p.tool_call_id() == Some(tool_call_id)),
        )
    }

    fn reindex(&mut self) {
        self.open_text.clear();
        self.open_refusal.clear();
        self.open_reasoning.clear();
        self.open_calls.clear();
        for (index, block) in self.blocks.iter().enumerate() {
            if let Block::ToolCall(call) = block {
                self.open_calls.insert(call.tool_call_id.clone(), index);
            }
        }
    }

    fn open_text_block(&mut self, id: String) -> usize {
        if let Some(&index) = self.open_text.get(&id) {
            return index;
        }
        if let Some(index) = self.continuation_target.take() {
            self.open_text.insert(id, index);
            return index;
        }
        self.blocks.push(Block::Text(String::new()));
        let index = self.blocks.len() - 1;
        self.open_text.insert(id, index);
        index
    }

    fn open_reasoning_block(&mut self, id: String) -> usize {
        if let Some(&index) = self.open_reasoning.get(&id) {
            return index;
        }
        self.blocks.push(Block::Reasoning {
            text: String::new(),
            metadata: None,
        });
        let index = self.blocks.len() - 1;
        self.open_reasoning.insert(id, index);
        index
    }

    /// The latest metadata wins; `None` never erases what was seen.
    fn set_reasoning_metadata(&mut self, index: usize, metadata: Option<Value>) {
        if let (Some(new), Some(Block::Reasoning { metadata, .. })) =
            (metadata, self.blocks.get_mut(index))
        {
            *metadata = Some(new);
            self.metadata_events += 1;
        }
    }

    fn open_call(
        &mut self,
        id: String,
        tool_name: String,
        provider_executed: bool,
        clock: &Arc<dyn Clock>,
    ) -> usize {
        if let Some(&index) = self.open_calls.get(&id) {
            return index;
        }
        self.blocks.push(Block::ToolCall(StreamedCall {
            tool_call_id: id.clone(),
            tool_name,
            args: String::new(),
            provider_executed,
            metadata: None,
            complete: false,
            emitted_at: clock.now(),
        }));
        let index = self.blocks.len() - 1;
        self.open_calls.insert(id, index);
        index
    }
}

/// Converts a block into the part it is stored as (provider results are handled by the
/// response builder, which places them right after their call).
pub(crate) fn block_part(block: &Block, now: DateTime<Utc>) -> Option<Part> {
    let part = match block {
        Block::Text(text) if text.trim().is_empty() => return None,
        Block::Text(text) => Part::text(text.clone()),
        Block::Refusal(text) => Part::refusal(text.clone()),
        Block::Reasoning { text, metadata } => {
            if text.trim().is_empty() && metadata.is_none() {
                return None;
            }
            Part::reasoning(text.clone(), metadata.clone())
        }
        Block::ToolCall(call) => {
            return Some(
                Part::tool_call(
                    call.tool_call_id.clone(),
                    call.tool_name.clone(),
                    call.args.clone(),
                    call.provider_executed,
                )
                .with_call_metadata(call.metadata.clone())
                .at(call.emitted_at),
            );
        }
        Block::ProviderResult(part) => return Some(part.clone()),
        Block::File { media_type, data } => Part::new(PartKind::File {
            media_type: media_type.clone(),
            data: Some(data.clone()),
            url: None,
        }),
    };
    Some(part.at(now))
}
