//! Decodes the Messages API event stream into [`StreamEvent`]s.
//!
//! Content arrives as indexed blocks (`content_block_start`/`_delta`/`_stop`): text,
//! `thinking`, `redacted_thinking`, `tool_use`, and provider-run tools (`server_tool_use`
//! and its `*_tool_result`). A thinking block's signature is staged while its deltas arrive
//! and attached only when the block stops, so a half-received signature is never emitted.
//! Only `message_stop` is success; a stream that closes before it is a retryable connection
//! error.

use std::collections::HashMap;

use keel_core::{FinishReason, StreamEvent, Usage};
use serde_json::{Value, json};

use super::request::METADATA_KEY;
use crate::convert::count;
use crate::convert::str_at;
use crate::http::ErrorContext;
use crate::typed_events::TypedEvents;

#[derive(Debug)]
enum Block {
    Text {
        id: String,
    },
    Thinking {
        id: String,
        signature: String,
    },
    Redacted {
        id: String,
        data: Value,
    },
    ToolUse {
        id: String,
        name: String,
        args: String,
        provider_executed: bool,
    },
    ToolResult {
        tool_use_id: String,
        name: String,
        content: Value,
        is_error: bool,
    },
    Other,
}

/// The Messages API state machine.
#[derive(Debug)]
pub struct AnthropicDecoder {
    ctx: ErrorContext,
    blocks: HashMap<u64, Block>,
    /// Names of provider-run tool calls, for their results.
    server_tools: HashMap<String, String>,
    usage: Usage,
    stop_reason: Option<FinishReason>,
    finished: bool,
}

impl AnthropicDecoder {
    pub fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            blocks: HashMap::new(),
            server_tools: HashMap::new(),
            usage: Usage::default(),
            stop_reason: None,
            finished: false,
        }
    }

    fn block_start(&mut self, index: u64, block: &Value, out: &mut Vec<StreamEvent>) {
        let state = match str_at(block, "type") {
            "text" => {
                let id = format!("text-{index}");
                out.push(StreamEvent::TextStart { id: id.clone() });
                let initial = str_at(block, "text");
                if !initial.is_empty() {
                    out.push(StreamEvent::TextDelta {
                        id: id.clone(),
                        delta: initial.to_owned(),
                    });
                }
                Block::Text { id }
            }
            "thinking" => {
                let id = format!("reasoning-{index}");
                out.push(StreamEvent::ReasoningStart {
                    id: id.clone(),
                    metadata: None,
                });
                let initial = str_at(block, "thinking");
                if !initial.is_empty() {
                    out.push(StreamEvent::ReasoningDelta {
                        id: id.clone(),
                        delta: initial.to_owned(),
                        metadata: None,
                    });
                }
                Block::Thinking {
                    id,
                    signature: str_at(block, "signature").to_owned(),
                }
            }
            "redacted_thinking" => {
                let id = format!("reasoning-{index}");
                let data = block.get("data").cloned().unwrap_or(Value::Null);
                out.push(StreamEvent::ReasoningStart {
                    id: id.clone(),
                    metadata: Some(redacted_metadata(&data)),
                });
                Block::Redacted { id, data }
            }
            ty @ ("tool_use" | "server_tool_use") => {
                let id = str_at(block, "id").to_owned();
                let name = str_at(block, "name").to_owned();
                let provider_executed = ty == "server_tool_use";
                if provider_executed {
                    self.server_tools.insert(id.clone(), name.clone());
                }
                out.push(StreamEvent::ToolInputStart {
                    id: id.clone(),
                    tool_name: name.clone(),
                    provider_executed,
                });
                Block::ToolUse {
                    id,
                    name,
                    args: String::new(),
                    provider_executed,
                }
            }
            ty if ty.ends_with("_tool_result") && block.get("tool_use_id").is_some() => {
                let tool_use_id = str_at(block, "tool_use_id").to_owned();
                let name = self
                    .server_tools
                    .get(&tool_use_id)
                    .cloned()
                    .unwrap_or_else(|| ty.trim_end_matches("_tool_result").to_owned());
                let content = block.get("content").cloned().unwrap_or(Value::Null);
                let is_error = str_at(&content, "type").ends_with("_error");
                Block::ToolResult {
                    tool_use_id,
                    name,
                    content,
                    is_error,
                }
            }
            _ => Block::Other,
        };
        self.blocks.insert(index, state);
    }

    fn block_delta(&mut self, index: u64, delta: &Value, out: &mut Vec<StreamEvent>) {
        let Some(block) = self.blocks.get_mut(&index) else {
            return;
        };
        match (str_at(delta, "type"), block) {
            ("text_delta", Block::Text { id }) => {
                let text = str_at(delta, "text");
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta {
                        id: id.clone(),
                        delta: text.to_owned(),
                    });
                }
            }
            ("citations_delta", _) => {
                let citation = delta.get("citation").unwrap_or(&Value::Null);
                if let Some(url) = citation.get("url").and_then(Value::as_str) {
                    out.push(StreamEvent::Source {
                        url: url.to_owned(),
                        title: citation
                            .get("title")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    });
                }
            }
            ("thinking_delta", Block::Thinking { id, .. }) => {
                let text = str_at(delta, "thinking");
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta {
                        id: id.clone(),
                        delta: text.to_owned(),
                        metadata: None,
                    });
                }
            }
            ("signature_delta", Block::Thinking { signature, .. }) => {
                signature.push_str(str_at(delta, "signature"));
            }
            ("input_json_delta", Block::ToolUse { id, args, .. }) => {
                let part = str_at(delta, "partial_json");
                if !part.is_empty() {
                    args.push_str(part);
                    out.push(StreamEvent::ToolInputDelta {
                        id: id.clone(),
                        delta: part.to_owned(),
                    });
                }
            }
            _ => {}
        }
    }

    fn block_stop(&mut self, index: u64, out: &mut Vec<StreamEvent>) {
        let Some(block) = self.blocks.remove(&index) else {
            return;
        };
        match block {
            Block::Text { id } => out.push(StreamEvent::TextEnd { id }),
            Block::Thinking { id, signature } => {
                let metadata = (!signature.is_empty())
                    .then(|| json!({ METADATA_KEY: { "signature": signature } }));
                out.push(StreamEvent::ReasoningEnd { id, metadata });
            }
            Block::Redacted { id, data } => out.push(StreamEvent::ReasoningEnd {
                id,
                metadata: Some(redacted_metadata(&data)),
            }),
            Block::ToolUse {
                id,
                name,
                args,
                provider_executed,
            } => {
                out.push(StreamEvent::ToolInputEnd { id: id.clone() });
                // A tool without parameters streams no input at all.
                let args = if args.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    args
                };
                out.push(StreamEvent::ToolCall {
                    id,
                    tool_name: name,
                    args,
                    provider_executed,
                });
            }
            Block::ToolResult {
                tool_use_id,
                name,
                content,
                is_error,
            } => out.push(StreamEvent::ToolResult {
                id: tool_use_id,
                tool_name: name,
                result: content,
                is_error,
            }),
            Block::Other => {}
        }
    }

    fn handle_event(&mut self, ty: &str, event: &Value, data: &str, out: &mut Vec<StreamEvent>) {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match ty {
            "message_start" => {
                if let Some(usage) = event.pointer("/message/usage") {
                    self.usage.merge_max(&usage_of(usage));
                }
            }
            "content_block_start" => {
                if let Some(block) = event.get("content_block") {
                    self.block_start(index, block, out);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = event.get("delta") {
                    self.block_delta(index, delta, out);
                }
            }
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(stop_reason(reason));
                    if reason == "refusal" {
                        out.push(refusal(event));
                    }
                }
                if let Some(usage) = event.get("usage") {
                    self.usage.merge_max(&usage_of(usage));
                }
            }
            "ping" => out.push(StreamEvent::KeepAlive),
            "message_stop" => {
                out.push(StreamEvent::Finish {
                    reason: self.stop_reason.unwrap_or_default(),
                    usage: self.usage,
                    provider_metadata: None,
                });
                self.finished = true;
            }
            "error" => {
                let error = self.ctx.body(None, data);
                self.fail(error, out);
            }
            _ => {}
        }
    }
}

crate::typed_events::typed_events!(AnthropicDecoder, "message_stop");

fn redacted_metadata(data: &Value) -> Value {
    json!({ METADATA_KEY: { "redacted_data": data } })
}

/// The notice a refusal carries when the provider explains nothing.
pub(super) const REFUSAL_NOTICE: &str = "The model declined to continue this reply.";

/// A reply stopped with `stop_reason: "refusal"` becomes a refusal part: the explanation in
/// `stop_details` when there is one (it rides on the same `message_delta`), else a fixed
/// notice, since the API adds no refusal text of its own
/// (https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals).
fn refusal(event: &Value) -> StreamEvent {
    let explanation = [
        "/delta/stop_details/explanation",
        "/stop_details/explanation",
    ]
    .iter()
    .filter_map(|at| event.pointer(at).and_then(Value::as_str))
    .find(|text| !text.trim().is_empty());
    StreamEvent::RefusalDelta {
        id: "refusal".to_owned(),
        delta: explanation.unwrap_or(REFUSAL_NOTICE).to_owned(),
    }
}

pub(crate) fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "pause_turn" => FinishReason::PauseTurn,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Unknown,
    }
}

/// Usage as Anthropic reports it: `input_tokens` already excludes cache reads and writes.
pub(crate) fn usage_of(usage: &Value) -> Usage {
    Usage {
        input_tokens: count(usage.get("input_tokens")),
        output_tokens: count(usage.get("output_tokens")),
        cache_read_tokens: count(usage.get("cache_read_input_tokens")),
        cache_write_tokens: count(usage.get("cache_creation_input_tokens")),
        reasoning_tokens: 0,
    }
}
