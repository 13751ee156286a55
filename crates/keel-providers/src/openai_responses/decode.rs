//! Decodes the Responses API event stream into [`StreamEvent`]s.
//!
//! Output arrives as items (`message`, `function_call`, `reasoning`, provider tool calls such
//! as `web_search_call`) opened by `response.output_item.added` and closed by
//! `response.output_item.done`, with deltas in between. Reasoning items keep their id and
//! encrypted content opaque in metadata so they can be sent back, together with the type and
//! id of the item that followed (`next_item`): the API accepts a reasoning item sent back
//! only when that item follows it with its id. A reasoning block therefore ends when the
//! next item starts (or the response finishes). Only
//! `response.completed` is success; a stream that closes before a terminal event is a
//! retryable connection error.

use std::collections::HashMap;

use keel_core::{FinishReason, StreamEvent, Usage};
use serde_json::{Value, json};

use super::request::METADATA_KEY;
use crate::convert::count;
use crate::convert::str_at;
use crate::http::ErrorContext;
use crate::typed_events::TypedEvents;

#[derive(Debug)]
enum Item {
    Message,
    FunctionCall {
        call_id: String,
        name: String,
        args: String,
    },
    Reasoning {
        summary_index: Option<u64>,
    },
    ProviderTool {
        name: String,
    },
    Other,
}

/// The Responses API state machine.
#[derive(Debug)]
pub struct ResponsesDecoder {
    ctx: ErrorContext,
    items: HashMap<String, Item>,
    open_text: Vec<String>,
    /// A finished reasoning item waiting for the item that follows it: id and metadata.
    pending_reasoning: Option<(String, serde_json::Map<String, Value>)>,
    had_calls: bool,
    finished: bool,
}

impl ResponsesDecoder {
    pub fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            items: HashMap::new(),
            open_text: Vec::new(),
            pending_reasoning: None,
            had_calls: false,
            finished: false,
        }
    }

    fn text_id(event: &Value) -> String {
        let index = event
            .get("content_index")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        format!("{}:{index}", str_at(event, "item_id"))
    }

    fn open_text(&mut self, id: String, out: &mut Vec<StreamEvent>) {
        if !self.open_text.contains(&id) {
            out.push(StreamEvent::TextStart { id: id.clone() });
            self.open_text.push(id);
        }
    }

    fn close_text(&mut self, id: &str, out: &mut Vec<StreamEvent>) {
        if let Some(pos) = self.open_text.iter().position(|t| t == id) {
            self.open_text.remove(pos);
            out.push(StreamEvent::TextEnd { id: id.to_owned() });
        }
    }

    /// Ends the reasoning block waiting for its follower; `next` names the follower.
    fn end_reasoning(&mut self, next: Option<&Value>, out: &mut Vec<StreamEvent>) {
        let Some((id, mut meta)) = self.pending_reasoning.take() else {
            return;
        };
        if let Some(item) = next {
            let mut follower = serde_json::Map::new();
            for key in ["type", "id", "call_id"] {
                if let Some(value) = item.get(key).filter(|v| v.is_string()) {
                    follower.insert(key.to_owned(), value.clone());
                }
            }
            meta.insert("next_item".into(), Value::Object(follower));
        }
        out.push(StreamEvent::ReasoningEnd {
            id,
            metadata: Some(json!({ METADATA_KEY: meta })),
        });
    }

    fn item_added(&mut self, item: &Value, out: &mut Vec<StreamEvent>) {
        self.end_reasoning(Some(item), out);
        let id = str_at(item, "id").to_owned();
        let state = match str_at(item, "type") {
            "message" => Item::Message,
            "function_call" => {
                let call_id = match str_at(item, "call_id") {
                    "" => id.clone(),
                    c => c.to_owned(),
                };
                let name = str_at(item, "name").to_owned();
                let args = str_at(item, "arguments").to_owned();
                out.push(StreamEvent::ToolInputStart {
                    id: call_id.clone(),
                    tool_name: name.clone(),
                    provider_executed: false,
                });
                if !args.is_empty() {
                    out.push(StreamEvent::ToolInputDelta {
                        id: call_id.clone(),
                        delta: args.clone(),
                    });
                }
                Item::FunctionCall {
                    call_id,
                    name,
                    args,
                }
            }
            "reasoning" => {
                out.push(StreamEvent::ReasoningStart {
                    id: id.clone(),
                    metadata: None,
                });
                Item::Reasoning {
                    summary_index: None,
                }
            }
            ty if is_client_run(ty) => {
                tracing::warn!(provider = %self.ctx.provider, item = ty,
                    "ignoring a call Keel cannot run (offer it as a function tool instead)");
                Item::Other
            }
            ty if ty.ends_with("_call") => {
                let name = ty.trim_end_matches("_call").to_owned();
                out.push(StreamEvent::ToolInputStart {
                    id: id.clone(),
                    tool_name: name.clone(),
                    provider_executed: true,
                });
                Item::ProviderTool { name }
            }
            _ => Item::Other,
        };
        self.items.insert(id, state);
    }

    fn item_done(&mut self, item: &Value, out: &mut Vec<StreamEvent>) {
        let id = str_at(item, "id").to_owned();
        let state = self.items.remove(&id);
        match str_at(item, "type") {
            "message" => {
                let prefix = format!("{id}:");
                let open: Vec<String> = self
                    .open_text
                    .iter()
                    .filter(|t| t.starts_with(&prefix))
                    .cloned()
                    .collect();
                for text in open {
                    self.close_text(&text, out);
                }
            }
            "function_call" => {
                let (call_id, name, streamed) = match state {
                    Some(Item::FunctionCall {
                        call_id,
                        name,
                        args,
                    }) => (call_id, name, args),
                    _ => {
                        let call_id = match str_at(item, "call_id") {
                            "" => id.clone(),
                            c => c.to_owned(),
                        };
                        let name = str_at(item, "name").to_owned();
                        out.push(StreamEvent::ToolInputStart {
                            id: call_id.clone(),
                            tool_name: name.clone(),
                            provider_executed: false,
                        });
                        (call_id, name, String::new())
                    }
                };
                let args = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .map_or(streamed, str::to_owned);
                out.push(StreamEvent::ToolInputEnd {
                    id: call_id.clone(),
                });
                out.push(StreamEvent::ToolCall {
                    id: call_id,
                    tool_name: name,
                    args,
                    provider_executed: false,
                });
                self.had_calls = true;
            }
            "reasoning" => {
                if !matches!(state, Some(Item::Reasoning { .. })) {
                    out.push(StreamEvent::ReasoningStart {
                        id: id.clone(),
                        metadata: None,
                    });
                }
                let mut meta = serde_json::Map::new();
                meta.insert("item_id".into(), json!(id));
                if let Some(enc) = item.get("encrypted_content").filter(|e| e.is_string()) {
                    meta.insert("encrypted_content".into(), enc.clone());
                }
                self.end_reasoning(Some(item), out);
                self.pending_reasoning = Some((id, meta));
            }
            // Calls the client must run (computer use, shell, patches, custom tools) get
            // neither a call nor a made-up result: only their own `*_output` item can answer
            // them, and Keel runs none of them.
            ty if is_client_run(ty) => {}
            ty if ty.ends_with("_call") => {
                let name = match state {
                    Some(Item::ProviderTool { name }) => name,
                    _ => {
                        let name = ty.trim_end_matches("_call").to_owned();
                        out.push(StreamEvent::ToolInputStart {
                            id: id.clone(),
                            tool_name: name.clone(),
                            provider_executed: true,
                        });
                        name
                    }
                };
                let args = item
                    .get("action")
                    .map_or_else(|| "{}".to_owned(), Value::to_string);
                out.push(StreamEvent::ToolInputEnd { id: id.clone() });
                out.push(StreamEvent::ToolCall {
                    id: id.clone(),
                    tool_name: name.clone(),
                    args,
                    provider_executed: true,
                });
                out.push(StreamEvent::ToolResult {
                    id,
                    tool_name: name,
                    is_error: str_at(item, "status") == "failed",
                    result: item.clone(),
                });
            }
            _ => {}
        }
    }

    fn reasoning_delta(&mut self, event: &Value, out: &mut Vec<StreamEvent>) {
        let id = str_at(event, "item_id").to_owned();
        let delta = str_at(event, "delta");
        let index = event.get("summary_index").and_then(Value::as_u64);
        let mut text = String::new();
        match self.items.get_mut(&id) {
            Some(Item::Reasoning { summary_index }) => {
                // Summary parts are separate paragraphs of one reasoning block.
                if summary_index.is_some() && *summary_index != index {
                    text.push_str("\n\n");
                }
                *summary_index = index;
            }
            _ => {
                out.push(StreamEvent::ReasoningStart {
                    id: id.clone(),
                    metadata: None,
                });
                self.items.insert(
                    id.clone(),
                    Item::Reasoning {
                        summary_index: index,
                    },
                );
            }
        }
        text.push_str(delta);
        if !text.is_empty() {
            out.push(StreamEvent::ReasoningDelta {
                id,
                delta: text,
                metadata: None,
            });
        }
    }

    fn finish(&mut self, response: &Value, out: &mut Vec<StreamEvent>, reason: FinishReason) {
        self.end_reasoning(None, out);
        let usage = response.get("usage").map(usage_of).unwrap_or_default();
        for id in std::mem::take(&mut self.open_text) {
            out.push(StreamEvent::TextEnd { id });
        }
        out.push(StreamEvent::Finish {
            reason,
            usage,
            provider_metadata: None,
        });
        self.finished = true;
    }

    fn handle_event(&mut self, ty: &str, event: &Value, data: &str, out: &mut Vec<StreamEvent>) {
        let response = event.get("response").unwrap_or(&Value::Null);
        match ty {
            "response.created" => {
                if let Some(id) = response.get("id").and_then(Value::as_str) {
                    out.push(StreamEvent::ResponseId { id: id.to_owned() });
                }
            }
            "response.queued" | "response.in_progress" => out.push(StreamEvent::KeepAlive),
            "response.output_item.added" => {
                if let Some(item) = event.get("item") {
                    self.item_added(item, out);
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.get("item") {
                    self.item_done(item, out);
                }
            }
            "response.content_part.added" => {
                let kind = event.pointer("/part/type").and_then(Value::as_str);
                if kind == Some("output_text") {
                    self.open_text(Self::text_id(event), out);
                }
            }
            "response.refusal.delta" => {
                let delta = str_at(event, "delta");
                if !delta.is_empty() {
                    out.push(StreamEvent::RefusalDelta {
                        id: Self::text_id(event),
                        delta: delta.to_owned(),
                    });
                }
            }
            "response.output_text.delta" => {
                let id = Self::text_id(event);
                self.open_text(id.clone(), out);
                let delta = str_at(event, "delta");
                if !delta.is_empty() {
                    out.push(StreamEvent::TextDelta {
                        id,
                        delta: delta.to_owned(),
                    });
                }
            }
            "response.content_part.done" => self.close_text(&Self::text_id(event), out),
            "response.output_text.annotation.added" => {
                let annotation = event.get("annotation").unwrap_or(&Value::Null);
                if str_at(annotation, "type") == "url_citation" {
                    out.push(StreamEvent::Source {
                        url: str_at(annotation, "url").to_owned(),
                        title: annotation
                            .get("title")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    });
                }
            }
            "response.function_call_arguments.delta" => {
                let delta = str_at(event, "delta");
                if let Some(Item::FunctionCall { call_id, args, .. }) =
                    self.items.get_mut(str_at(event, "item_id"))
                {
                    args.push_str(delta);
                    if !delta.is_empty() {
                        out.push(StreamEvent::ToolInputDelta {
                            id: call_id.clone(),
                            delta: delta.to_owned(),
                        });
                    }
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(Item::FunctionCall { args, .. }), Some(full)) = (
                    self.items.get_mut(str_at(event, "item_id")),
                    event.get("arguments").and_then(Value::as_str),
                ) {
                    full.clone_into(args);
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.reasoning_delta(event, out);
            }
            "response.completed" => {
                let reason = if self.had_calls {
                    FinishReason::ToolCalls
                } else {
                    FinishReason::Stop
                };
                self.finish(response, out, reason);
            }
            "response.incomplete" => {
                let why = response
                    .pointer("/incomplete_details/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                match why {
                    "max_output_tokens" => self.finish(response, out, FinishReason::Length),
                    "content_filter" => self.finish(response, out, FinishReason::ContentFilter),
                    other => {
                        let error = self.ctx.message(&format!("response incomplete: {other}"));
                        self.fail(error, out);
                    }
                }
            }
            "response.failed" => {
                let error = match response.get("error").filter(|e| e.is_object()) {
                    Some(e) => {
                        // A failed response names its cause only by `code` (`server_error`,
                        // `rate_limit_exceeded`, ...), which the classifier reads as a type.
                        let mut e = e.clone();
                        if e.get("type").is_none()
                            && let Some(code) = e.get("code").cloned()
                        {
                            e["type"] = code;
                        }
                        self.ctx.body(None, &json!({ "error": e }).to_string())
                    }
                    None => self.ctx.message("response failed"),
                };
                self.fail(error, out);
            }
            "error" => {
                let error = self.ctx.body(None, data);
                self.fail(error, out);
            }
            _ => {}
        }
    }
}

crate::typed_events::typed_events!(ResponsesDecoder, "response.completed");

/// Output items the client runs, as opposed to tools the provider runs itself
/// (`web_search_call`, `file_search_call`, `code_interpreter_call`, ...).
/// <https://platform.openai.com/docs/api-reference/responses/object> (`output`).
fn is_client_run(item_type: &str) -> bool {
    matches!(
        item_type,
        "computer_call"
            | "local_shell_call"
            | "shell_call"
            | "apply_patch_call"
            | "custom_tool_call"
    )
}

/// Usage of a response. `input_tokens` includes cached tokens; Keel counts them apart.
pub(crate) fn usage_of(usage: &Value) -> Usage {
    let cached = count(usage.pointer("/input_tokens_details/cached_tokens"));
    Usage {
        input_tokens: count(usage.get("input_tokens")).saturating_sub(cached),
        output_tokens: count(usage.get("output_tokens")),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: count(usage.pointer("/output_tokens_details/reasoning_tokens")),
    }
}
