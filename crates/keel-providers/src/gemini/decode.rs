//! Decodes the `streamGenerateContent?alt=sse` stream into [`StreamEvent`]s.
//!
//! Every event is a whole `GenerateContentResponse`
//! (<https://ai.google.dev/api/generate-content#generatecontentresponse>) carrying the next
//! parts of the first candidate: text, thoughts (`thought: true`) and whole function calls.
//! Consecutive text (or thought) parts form one block. A `thoughtSignature` stays with the
//! part it came on: a call's becomes its metadata, a thought's its reasoning metadata; one on
//! plain text is not needed back and is dropped. The stream has no terminal event: the
//! chunk with a `finishReason` ends the reply, and a stream that closes before one is a
//! retryable connection error.

use keel_core::{FinishReason, StreamEvent, Usage};
use serde_json::{Value, json};

use super::request::{LOCAL_CALL_ID_PREFIX, METADATA_KEY, SIGNATURE};
use crate::convert::count;
use crate::convert::str_at;
use crate::http::ErrorContext;
use crate::sse::{Decoder, SseEvent};

/// The block the next text part extends.
#[derive(Debug, PartialEq)]
enum Open {
    None,
    Text(String),
    Thought(String),
}

/// The `streamGenerateContent` state machine.
#[derive(Debug)]
pub struct GeminiDecoder {
    ctx: ErrorContext,
    open: Open,
    /// Blocks opened so far, for their ids.
    blocks: usize,
    /// The signature of the thought block in progress, attached when it ends.
    thought_signature: Option<String>,
    calls: usize,
    /// Names ids of calls Gemini sent without one: the response's id, else one made here.
    response_id: Option<String>,
    fallback_id: String,
    usage: Usage,
    finished: bool,
}

impl GeminiDecoder {
    pub fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            open: Open::None,
            blocks: 0,
            thought_signature: None,
            calls: 0,
            response_id: None,
            fallback_id: uuid::Uuid::new_v4().simple().to_string(),
            usage: Usage::default(),
            finished: false,
        }
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => {}
            Open::Text(id) => out.push(StreamEvent::TextEnd { id }),
            Open::Thought(id) => {
                let metadata = self
                    .thought_signature
                    .take()
                    .map(|sig| json!({ METADATA_KEY: { SIGNATURE: sig } }));
                out.push(StreamEvent::ReasoningEnd { id, metadata });
            }
        }
    }

    fn text(&mut self, text: &str, thought: bool, out: &mut Vec<StreamEvent>) {
        let extends = matches!(
            (&self.open, thought),
            (Open::Text(_), false) | (Open::Thought(_), true)
        );
        if !extends {
            self.close(out);
            let id = if thought {
                format!("reasoning-{}", self.blocks)
            } else {
                format!("text-{}", self.blocks)
            };
            self.blocks += 1;
            out.push(if thought {
                StreamEvent::ReasoningStart {
                    id: id.clone(),
                    metadata: None,
                }
            } else {
                StreamEvent::TextStart { id: id.clone() }
            });
            self.open = if thought {
                Open::Thought(id)
            } else {
                Open::Text(id)
            };
        }
        match &self.open {
            _ if text.is_empty() => {}
            Open::Thought(id) => out.push(StreamEvent::ReasoningDelta {
                id: id.clone(),
                delta: text.to_owned(),
                metadata: None,
            }),
            Open::Text(id) => out.push(StreamEvent::TextDelta {
                id: id.clone(),
                delta: text.to_owned(),
            }),
            Open::None => {}
        }
    }

    fn call(&mut self, call: &Value, signature: Option<&str>, out: &mut Vec<StreamEvent>) {
        self.close(out);
        let id = match call.get("id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => format!(
                "{LOCAL_CALL_ID_PREFIX}{}-{}",
                self.response_id.as_deref().unwrap_or(&self.fallback_id),
                self.calls
            ),
        };
        self.calls += 1;
        let name = str_at(call, "name").to_owned();
        let args = match call.get("args") {
            Some(args @ Value::Object(_)) => args.to_string(),
            _ => "{}".to_owned(),
        };
        out.push(StreamEvent::ToolInputStart {
            id: id.clone(),
            tool_name: name.clone(),
            provider_executed: false,
        });
        out.push(StreamEvent::ToolInputDelta {
            id: id.clone(),
            delta: args.clone(),
        });
        out.push(StreamEvent::ToolInputEnd { id: id.clone() });
        out.push(StreamEvent::ToolCall {
            id: id.clone(),
            tool_name: name,
            args,
            provider_executed: false,
        });
        if let Some(sig) = signature {
            out.push(StreamEvent::ToolCallMetadata {
                id,
                metadata: json!({ METADATA_KEY: { SIGNATURE: sig } }),
            });
        }
    }

    fn part(&mut self, part: &Value, out: &mut Vec<StreamEvent>) {
        let signature = part
            .get("thoughtSignature")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if let Some(call) = part.get("functionCall") {
            self.call(call, signature, out);
            return;
        }
        let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            // A signature on an empty text part belongs to no text: nothing to show.
            if text.is_empty() && !thought {
                return;
            }
            self.text(text, thought, out);
            if thought && let Some(sig) = signature {
                self.thought_signature = Some(sig.to_owned());
            }
        }
    }

    fn finish(&mut self, reason: FinishReason, out: &mut Vec<StreamEvent>) {
        self.close(out);
        out.push(StreamEvent::Finish {
            reason,
            usage: self.usage,
            provider_metadata: None,
        });
        self.finished = true;
    }

    fn response(&mut self, value: &Value, out: &mut Vec<StreamEvent>) {
        if self.response_id.is_none()
            && let Some(id) = value.get("responseId").and_then(Value::as_str)
        {
            self.response_id = Some(id.to_owned());
        }
        // Each chunk's usage is the reply's so far, whole: the latest replaces the others
        // (a maximum would keep an early prompt count that did not yet set the cache apart).
        if let Some(usage) = value.get("usageMetadata") {
            self.usage = usage_of(usage);
        }
        let Some(candidate) = value.pointer("/candidates/0") else {
            // A prompt refused before any candidate: the whole reply is the block.
            if let Some(block) = value.pointer("/promptFeedback/blockReason") {
                let reason = block.as_str().unwrap_or("OTHER");
                let message = value
                    .pointer("/promptFeedback/blockReasonMessage")
                    .and_then(Value::as_str);
                out.push(refusal(
                    &format!("Gemini blocked the prompt ({reason})"),
                    message,
                ));
                self.finish(FinishReason::ContentFilter, out);
            }
            return;
        };
        for part in candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.part(part, out);
        }
        let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) else {
            return;
        };
        let mapped = finish_reason(reason, self.calls > 0);
        if mapped == FinishReason::ContentFilter {
            self.close(out);
            let message = candidate.get("finishMessage").and_then(Value::as_str);
            out.push(refusal(
                &format!("Gemini stopped the reply ({reason})"),
                message,
            ));
        }
        self.finish(mapped, out);
    }
}

impl Decoder for GeminiDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        let Ok(value) = serde_json::from_str::<Value>(&event.data) else {
            tracing::debug!(provider = %self.ctx.provider, "ignoring a non-JSON event");
            return;
        };
        // An error after the stream started arrives as the API's error envelope.
        if let Some(error) = value.get("error").filter(|e| e.is_object()) {
            let status = error
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok());
            out.push(StreamEvent::Error(self.ctx.body(status, &event.data)));
            self.finished = true;
            return;
        }
        self.response(&value, out);
    }

    fn is_finished(&self) -> bool {
        self.finished
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.finished {
            out.push(StreamEvent::Error(
                self.ctx.message("stream closed before a finishReason"),
            ));
            self.finished = true;
        }
    }
}

/// A block shown as a refusal: what Gemini said, else what it named.
fn refusal(fallback: &str, message: Option<&str>) -> StreamEvent {
    let text = message
        .filter(|m| !m.trim().is_empty())
        .map_or_else(|| format!("{fallback}."), str::to_owned);
    StreamEvent::RefusalDelta {
        id: "refusal".to_owned(),
        delta: text,
    }
}

/// Gemini's finish reasons (<https://ai.google.dev/api/generate-content#FinishReason>).
/// `STOP` also ends a reply that called functions, so `called` tells the two apart.
pub(crate) fn finish_reason(reason: &str, called: bool) -> FinishReason {
    match reason {
        "STOP" if called => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => FinishReason::ContentFilter,
        "MALFORMED_FUNCTION_CALL"
        | "UNEXPECTED_TOOL_CALL"
        | "TOO_MANY_TOOL_CALLS"
        | "MISSING_THOUGHT_SIGNATURE"
        | "MALFORMED_RESPONSE" => FinishReason::Error,
        _ => FinishReason::Unknown,
    }
}

/// Usage as Gemini reports it: `promptTokenCount` includes the cached tokens and
/// `candidatesTokenCount` excludes the thoughts
/// (<https://ai.google.dev/api/generate-content#UsageMetadata>).
pub(crate) fn usage_of(usage: &Value) -> Usage {
    let cached = count(usage.get("cachedContentTokenCount"));
    let thoughts = count(usage.get("thoughtsTokenCount"));
    Usage {
        input_tokens: count(usage.get("promptTokenCount")).saturating_sub(cached),
        output_tokens: count(usage.get("candidatesTokenCount")) + thoughts,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: thoughts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&str]) -> Vec<StreamEvent> {
        let mut decoder = GeminiDecoder::new(ErrorContext::new("gemini", "m"));
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.event(&SseEvent::new("message", *chunk), &mut out);
        }
        decoder.end(&mut out);
        out
    }

    #[test]
    fn a_call_without_an_id_gets_one_from_the_response() {
        let events = decode(&[
            r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"s"},{"functionCall":{"name":"g"}}]},"finishReason":"STOP"}],"responseId":"r1"}"#,
        ]);
        let ids: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["gemini-call-r1-0", "gemini-call-r1-1"]);
        assert!(events.contains(&StreamEvent::ToolCallMetadata {
            id: "gemini-call-r1-0".into(),
            metadata: json!({"gemini": {"thought_signature": "s"}}),
        }));
        assert!(matches!(
            events.last(),
            Some(StreamEvent::Finish {
                reason: FinishReason::ToolCalls,
                ..
            })
        ));
    }

    #[test]
    fn usage_counts_thoughts_as_output_and_cache_apart() {
        let usage = usage_of(
            &json!({"promptTokenCount": 100, "cachedContentTokenCount": 40,
            "candidatesTokenCount": 7, "thoughtsTokenCount": 20, "totalTokenCount": 127}),
        );
        assert_eq!(
            usage,
            Usage {
                input_tokens: 60,
                output_tokens: 27,
                cache_read_tokens: 40,
                cache_write_tokens: 0,
                reasoning_tokens: 20,
            }
        );
    }

    #[test]
    fn finish_reasons_map_onto_keels() {
        assert_eq!(finish_reason("STOP", false), FinishReason::Stop);
        assert_eq!(finish_reason("MAX_TOKENS", true), FinishReason::Length);
        assert_eq!(
            finish_reason("RECITATION", false),
            FinishReason::ContentFilter
        );
        assert_eq!(
            finish_reason("MALFORMED_FUNCTION_CALL", false),
            FinishReason::Error
        );
        assert_eq!(finish_reason("OTHER", false), FinishReason::Unknown);
    }

    #[test]
    fn a_blocked_prompt_is_a_refusal() {
        let events = decode(&[
            r#"{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":5}}"#,
        ]);
        assert_eq!(
            events[0],
            StreamEvent::RefusalDelta {
                id: "refusal".into(),
                delta: "Gemini blocked the prompt (PROHIBITED_CONTENT).".into()
            }
        );
        assert!(matches!(
            events[1],
            StreamEvent::Finish {
                reason: FinishReason::ContentFilter,
                ..
            }
        ));
    }
}
