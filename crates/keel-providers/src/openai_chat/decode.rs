//! Decodes the Chat Completions chunk stream into [`StreamEvent`]s.
//!
//! Text and reasoning (`reasoning_content` from DeepSeek, `reasoning` from vLLM) arrive as
//! deltas of one choice, a refusal as `refusal` deltas; tool calls arrive as deltas keyed by `index`, the id and name on a
//! call's first chunk, argument text after, several calls possibly interleaved. Some servers
//! stream every call at index 0, so a new id at an index starts a new call. A call's
//! `extra_content` (Gemini's thought signature) is kept to go back with it. Calls are
//! complete only when the choice reports a finish reason. Usage comes in a final chunk
//! without choices, and `[DONE]` ends the stream.

use std::borrow::Cow;
use std::collections::HashMap;

use keel_core::{FinishReason, StreamEvent, Usage};
use serde::Deserialize;
use serde_json::{Value, json};

use super::request::{EXTRA_CONTENT, METADATA_KEY};
use crate::convert::count;
use crate::http::ErrorContext;
use crate::sse::{Decoder, SseEvent};

#[derive(Debug, Default)]
struct PendingCall {
    id: String,
    name: String,
    args: String,
    started: bool,
    /// The id came from the server (not [`synthesized_call_id`]).
    id_streamed: bool,
    extra_content: Option<Value>,
}

/// The Chat Completions state machine.
#[derive(Debug)]
pub struct ChatDecoder {
    ctx: ErrorContext,
    blocks: u32,
    text: Option<String>,
    reasoning: Option<String>,
    /// Calls in the order they started.
    calls: Vec<PendingCall>,
    /// The call each stream `index` currently adds to.
    call_at: HashMap<u64, usize>,
    had_calls: bool,
    finish: Option<FinishReason>,
    usage: Usage,
    finished: bool,
}

impl ChatDecoder {
    pub fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            blocks: 0,
            text: None,
            reasoning: None,
            calls: Vec::new(),
            call_at: HashMap::new(),
            had_calls: false,
            finish: None,
            usage: Usage::default(),
            finished: false,
        }
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.blocks += 1;
        format!("{prefix}-{}", self.blocks)
    }

    fn close_text(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(id) = self.text.take() {
            out.push(StreamEvent::TextEnd { id });
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(id) = self.reasoning.take() {
            out.push(StreamEvent::ReasoningEnd { id, metadata: None });
        }
    }

    fn reasoning_delta(&mut self, delta: &str, out: &mut Vec<StreamEvent>) {
        self.close_text(out);
        let id = match &self.reasoning {
            Some(id) => id.clone(),
            None => {
                let id = self.next_id("reasoning");
                out.push(StreamEvent::ReasoningStart {
                    id: id.clone(),
                    metadata: None,
                });
                self.reasoning = Some(id.clone());
                id
            }
        };
        out.push(StreamEvent::ReasoningDelta {
            id,
            delta: delta.to_owned(),
            metadata: None,
        });
    }

    fn text_delta(&mut self, delta: &str, out: &mut Vec<StreamEvent>) {
        self.close_reasoning(out);
        let id = match &self.text {
            Some(id) => id.clone(),
            None => {
                let id = self.next_id("text");
                out.push(StreamEvent::TextStart { id: id.clone() });
                self.text = Some(id.clone());
                id
            }
        };
        out.push(StreamEvent::TextDelta {
            id,
            delta: delta.to_owned(),
        });
    }

    /// The reasoning, text and refusal of one delta, in that order; empty ones say nothing.
    /// OpenAI streams a refusal under its own key, never as `content`
    /// (https://platform.openai.com/docs/api-reference/chat-streaming).
    fn texts(
        &mut self,
        reasoning: Option<&str>,
        content: Option<&str>,
        refusal: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        if let Some(text) = reasoning {
            self.reasoning_delta(text, out);
        }
        if let Some(text) = content
            && !text.is_empty()
        {
            self.text_delta(text, out);
        }
        if let Some(text) = refusal
            && !text.is_empty()
        {
            self.close_reasoning(out);
            self.close_text(out);
            out.push(StreamEvent::RefusalDelta {
                id: "refusal".to_owned(),
                delta: text.to_owned(),
            });
        }
    }

    fn tool_call_delta(&mut self, position: usize, call: &Value, out: &mut Vec<StreamEvent>) {
        self.close_reasoning(out);
        self.close_text(out);
        self.had_calls = true;
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let position = match self.call_at.get(&index) {
            Some(&at) if call_starts_anew(&self.calls[at], id) => None,
            Some(&at) => Some(at),
            None => None,
        };
        let position = position.unwrap_or_else(|| {
            self.calls.push(PendingCall::default());
            let at = self.calls.len() - 1;
            self.call_at.insert(index, at);
            at
        });
        // Proven in bounds: taken from `call_at`, which only holds indices of `calls`.
        let pending = &mut self.calls[position];
        if pending.id.is_empty()
            && let Some(id) = id
        {
            pending.id = id.to_owned();
            pending.id_streamed = true;
        }
        if let Some(extra) = call.get(EXTRA_CONTENT).filter(|e| !e.is_null()) {
            pending.extra_content = Some(extra.clone());
        }
        let function = call.get("function");
        if pending.name.is_empty()
            && let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
        {
            pending.name = name.to_owned();
        }
        let delta = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        pending.args.push_str(delta);
        if pending.started {
            if !delta.is_empty() {
                out.push(StreamEvent::ToolInputDelta {
                    id: pending.id.clone(),
                    delta: delta.to_owned(),
                });
            }
        } else if !pending.name.is_empty() {
            if pending.id.is_empty() {
                pending.id = synthesized_call_id();
            }
            pending.started = true;
            out.push(StreamEvent::ToolInputStart {
                id: pending.id.clone(),
                tool_name: pending.name.clone(),
                provider_executed: false,
            });
            // Arguments that arrived before the name (or with it) are sent as one delta.
            if !pending.args.is_empty() {
                out.push(StreamEvent::ToolInputDelta {
                    id: pending.id.clone(),
                    delta: pending.args.clone(),
                });
            }
        }
    }

    fn complete_calls(&mut self, out: &mut Vec<StreamEvent>) {
        self.call_at.clear();
        for call in std::mem::take(&mut self.calls) {
            let id = if call.id.is_empty() {
                synthesized_call_id()
            } else {
                call.id
            };
            if call.started {
                out.push(StreamEvent::ToolInputEnd { id: id.clone() });
            }
            out.push(StreamEvent::ToolCall {
                id: id.clone(),
                tool_name: call.name,
                args: call.args,
                provider_executed: false,
            });
            if let Some(extra) = call.extra_content {
                out.push(StreamEvent::ToolCallMetadata {
                    id,
                    metadata: json!({METADATA_KEY: {EXTRA_CONTENT: extra}}),
                });
            }
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamEvent>) {
        self.close_reasoning(out);
        self.close_text(out);
        self.complete_calls(out);
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.close_all(out);
        let reason = match self.finish {
            // Some servers report "stop" for a reply that called tools.
            Some(FinishReason::Stop) | None if self.had_calls => FinishReason::ToolCalls,
            Some(reason) => reason,
            None => FinishReason::Unknown,
        };
        out.push(StreamEvent::Finish {
            reason,
            usage: self.usage,
            provider_metadata: None,
        });
        self.finished = true;
    }

    fn chunk(&mut self, chunk: &Value, out: &mut Vec<StreamEvent>) {
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage.merge_max(&usage_of(usage));
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return;
        };
        // Only the first choice is requested; others are ignored.
        let Some(choice) = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        else {
            return;
        };
        if let Some(delta) = choice.get("delta") {
            // Servers moving from `reasoning_content` to `reasoning` send the same text under
            // both names for a while; only one is read.
            let reasoning = ["reasoning_content", "reasoning"]
                .iter()
                .filter_map(|key| delta.get(*key).and_then(Value::as_str))
                .find(|text| !text.is_empty());
            let text = |key| delta.get(key).and_then(Value::as_str);
            self.texts(reasoning, text("content"), text("refusal"), out);
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.tool_call_delta(position, call, out);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(finish_reason(reason));
            self.close_all(out);
        }
    }
}

/// The shape of nearly every chunk — text, reasoning or refusal deltas, a finish reason,
/// usage — read with its strings borrowed from the event instead of as a `Value` tree.
/// Anything else (tool calls, an error, a field of an unexpected type) is left to
/// [`ChatDecoder::chunk`], which reads every shape.
#[derive(Deserialize)]
struct PlainChunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<PlainChoice<'a>>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct PlainChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<PlainDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct PlainDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

impl ChatDecoder {
    /// Decodes a chunk of the plain shape ([`PlainChunk`]) exactly as [`Self::chunk`] would;
    /// false, with nothing done, for any other.
    fn plain_chunk(&mut self, data: &str, out: &mut Vec<StreamEvent>) -> bool {
        let Ok(chunk) = serde_json::from_str::<PlainChunk<'_>>(data) else {
            return false;
        };
        let has_calls = |choice: &PlainChoice<'_>| {
            choice
                .delta
                .as_ref()
                .is_some_and(|d| d.tool_calls.as_ref().is_some_and(|c| !c.is_null()))
        };
        if chunk.error.as_ref().is_some_and(|e| !e.is_null())
            || chunk.choices.iter().flatten().any(has_calls)
        {
            return false;
        }
        if let Some(usage) = chunk.usage.as_ref().filter(|u| u.is_object()) {
            self.usage.merge_max(&usage_of(usage));
        }
        let Some(choice) = chunk
            .choices
            .iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0)
        else {
            return true;
        };
        if let Some(delta) = &choice.delta {
            let reasoning = [&delta.reasoning_content, &delta.reasoning]
                .into_iter()
                .filter_map(|text| text.as_deref())
                .find(|text| !text.is_empty());
            self.texts(
                reasoning,
                delta.content.as_deref(),
                delta.refusal.as_deref(),
                out,
            );
        }
        if let Some(reason) = choice.finish_reason.as_deref() {
            self.finish = Some(finish_reason(reason));
            self.close_all(out);
        }
        true
    }
}

impl Decoder for ChatDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        let data = event.data.trim();
        if data == "[DONE]" {
            self.finish(out);
            return;
        }
        if event.event != "error" && self.plain_chunk(data, out) {
            return;
        }
        let chunk = serde_json::from_str::<Value>(data);
        let is_error = match &chunk {
            Ok(chunk) => chunk.get("error").is_some_and(|e| !e.is_null()),
            Err(_) => false,
        };
        if event.event == "error" || is_error {
            out.push(StreamEvent::Error(self.ctx.body(None, data)));
            self.finished = true;
            return;
        }
        match chunk {
            Ok(chunk) => self.chunk(&chunk, out),
            Err(_) => tracing::debug!(provider = %self.ctx.provider, "ignoring a non-JSON chunk"),
        }
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        // A server that reported a finish reason has sent the whole reply; only a few
        // compatible servers then close without `[DONE]`.
        if self.finish.is_some() {
            self.finish(out);
        } else {
            out.push(StreamEvent::Error(
                self.ctx.message("stream closed before the final chunk"),
            ));
            self.finished = true;
        }
    }
}

/// Whether a delta with `id` at an index starts a new call rather than adding to `current`,
/// the call there: only an id other than the one the server gave `current` does
/// (continuation chunks carry no id, or repeat it).
fn call_starts_anew(current: &PendingCall, id: Option<&str>) -> bool {
    id.is_some_and(|id| current.id_streamed && id != current.id)
}

/// An id for a call a server streamed without one (llama.cpp, some vLLM versions). It must
/// be unique in the chat for ever, not just within the reply: ids key the durable tool
/// records and pair calls with results in every later request, so a second turn's
/// `call_0` would be taken for the first turn's.
fn synthesized_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Unknown,
    }
}

/// Usage of a Chat Completions reply. `prompt_tokens` includes cached tokens; Keel counts
/// them apart.
pub(crate) fn usage_of(usage: &Value) -> Usage {
    let cached = count(usage.pointer("/prompt_tokens_details/cached_tokens"));
    Usage {
        input_tokens: count(usage.get("prompt_tokens")).saturating_sub(cached),
        output_tokens: count(usage.get("completion_tokens")),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: count(usage.pointer("/completion_tokens_details/reasoning_tokens")),
    }
}

#[cfg(test)]
mod tests;
