//! What a failed or interrupted stream left usable: a [`StreamSnapshot`] taken from a step's
//! accumulator, kept in checkpoints, and rebuilt into an accumulator when the step resumes.
//! [`crate::recovery`] decides what to do with it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use keel_core::{Clock, Part, PartKind};

use crate::accumulate::{Block, StepAccumulator, StreamedCall};

/// A tool call as captured in a snapshot or checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
}

/// A reasoning block as captured in a snapshot or checkpoint, with the provider metadata
/// (e.g. Anthropic's signature) needed to send it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedReasoning {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_metadata: Option<Value>,
}

/// A call the provider ran (a web search) with its result, as captured in a snapshot or
/// checkpoint: it goes back to the provider with the continued reply, never to a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedProviderCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
    pub result: Value,
    #[serde(default)]
    pub is_error: bool,
}

/// What a failed stream left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSnapshot {
    /// Reasoning blocks, in order; they come before the text.
    #[serde(default)]
    pub reasoning: Vec<CapturedReasoning>,
    pub partial_text: String,
    /// Calls whose arguments completed and parse as JSON.
    pub completed_calls: Vec<CapturedCall>,
    /// The call whose arguments were still streaming.
    pub in_flight: Option<CapturedCall>,
    pub bytes_received: usize,
    /// A refusal had begun streaming.
    #[serde(default)]
    pub refused: bool,
    /// Calls the provider ran and answered, in the order their results came; a call still
    /// unanswered is not kept (the provider runs it again if it needs it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_calls: Vec<CapturedProviderCall>,
}

impl StreamSnapshot {
    /// Captures the usable content of the step so far.
    pub fn of(acc: &StepAccumulator) -> Self {
        let mut snapshot = StreamSnapshot {
            partial_text: acc.text(),
            ..Self::default()
        };
        for block in &acc.blocks {
            match block {
                Block::Reasoning { text, metadata } => {
                    snapshot.reasoning.push(CapturedReasoning {
                        text: text.clone(),
                        provider_metadata: metadata.clone(),
                    });
                }
                Block::Refusal(_) => snapshot.refused = true,
                _ => {}
            }
        }
        for block in &acc.blocks {
            let Block::ProviderResult(part) = block else {
                continue;
            };
            let PartKind::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } = &part.kind
            else {
                continue;
            };
            let call = acc
                .tool_calls()
                .find(|c| c.provider_executed && c.complete && c.tool_call_id == *tool_call_id);
            if let Some(call) = call {
                snapshot.provider_calls.push(CapturedProviderCall {
                    tool_call_id: call.tool_call_id.clone(),
                    tool_name: call.tool_name.clone(),
                    args: call.args.clone(),
                    result: result.clone(),
                    is_error: *is_error,
                });
            }
        }
        for call in acc.tool_calls().filter(|c| !c.provider_executed) {
            let captured = CapturedCall {
                tool_call_id: call.tool_call_id.clone(),
                tool_name: call.tool_name.clone(),
                args: call.args.clone(),
            };
            snapshot.bytes_received += call.args.len();
            if call.complete && args_are_json(&call.args) {
                snapshot.completed_calls.push(captured);
            } else {
                snapshot.in_flight = Some(captured);
            }
        }
        snapshot.bytes_received += snapshot.partial_text.len();
        snapshot
    }

    /// Rebuilds step content from the snapshot (e.g. a checkpoint of a crashed process) without
    /// publishing it; [`StepAccumulator::republish`] does that once the recovery plan has trimmed it.
    pub fn restore(&self, clock: &Arc<dyn Clock>) -> StepAccumulator {
        let snapshot = self;
        let mut blocks = Vec::new();
        for reasoning in &snapshot.reasoning {
            blocks.push(Block::Reasoning {
                text: reasoning.text.clone(),
                metadata: reasoning.provider_metadata.clone(),
            });
        }
        // The provider's searches came before the text that cites them.
        for call in &snapshot.provider_calls {
            blocks.push(Block::ToolCall(StreamedCall {
                tool_call_id: call.tool_call_id.clone(),
                tool_name: call.tool_name.clone(),
                args: call.args.clone(),
                provider_executed: true,
                metadata: None,
                complete: true,
                emitted_at: clock.now(),
            }));
            let result = Part::tool_result(
                call.tool_call_id.clone(),
                call.tool_name.clone(),
                call.result.clone(),
                call.is_error,
                true,
            );
            blocks.push(Block::ProviderResult(result.at(clock.now())));
        }
        if !snapshot.partial_text.is_empty() {
            blocks.push(Block::Text(snapshot.partial_text.clone()));
        }
        for call in &snapshot.completed_calls {
            blocks.push(Block::ToolCall(StreamedCall {
                tool_call_id: call.tool_call_id.clone(),
                tool_name: call.tool_name.clone(),
                args: call.args.clone(),
                provider_executed: false,
                metadata: None,
                complete: true,
                emitted_at: clock.now(),
            }));
        }
        StepAccumulator::from_blocks(blocks)
    }

    /// Whether the snapshot holds reasoning that can be sent back as the provider gave it:
    /// at least one block, each with its provider metadata (signature).
    pub fn has_signed_reasoning(&self) -> bool {
        !self.reasoning.is_empty()
            && self
                .reasoning
                .iter()
                .all(|r| r.provider_metadata.as_ref().is_some_and(|m| !m.is_null()))
    }
}

/// Empty arguments count as an empty object: some providers send none for argument-less
/// tools.
pub fn args_are_json(args: &str) -> bool {
    args.trim().is_empty() || serde_json::from_str::<serde_json::Value>(args).is_ok()
}
