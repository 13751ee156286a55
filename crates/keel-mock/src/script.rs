//! Scripts: what the mock replies, and how it misbehaves, for one request.
//!
//! A script travels inside the last user message as a directive line, `#mock {json}`, so
//! anything that relays user text to a provider (the daemon, an SDK, curl) can steer the
//! mock. [`Script`] is the typed form; it renders the directive with [`Script::directive`]
//! and is parsed back by [`parse_directive`]. The JSON format is documented in
//! `docs/mock-provider.md`.
//!
//! Longer than most files: the `#mock` script's whole vocabulary (replies, faults, tools,
//! protocol quirks) as serde types beside the checks that refuse a script the mock cannot play.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ScriptError;

/// The marker that starts a directive line.
pub const DIRECTIVE: &str = "#mock";

/// A script: an optional id (which keys attempt counting) and the steps of a conversation.
///
/// Step `i` answers a request that already holds `i` assistant turns after the last user
/// text message, so a tool loop walks through the steps one model call at a time. A request
/// past the last step gets an automatic final answer (see `docs/mock-provider.md`).
///
/// On the wire a one-step script is written flat (`{"text": "hi"}`); more steps use
/// `{"steps": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct Script {
    pub id: Option<String>,
    pub steps: Vec<Step>,
}

impl Script {
    /// A script with one step.
    pub fn new(step: Step) -> Self {
        Self {
            id: None,
            steps: vec![step],
        }
    }

    /// Names the script. Faults limited with `times` count attempts per script id and step,
    /// so scripts that use `times` should carry an id unique to their test.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Appends a step.
    pub fn then(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// The directive line, `#mock {json}`.
    pub fn directive(&self) -> String {
        format!("{DIRECTIVE} {}", Value::from(self.clone()))
    }

    /// A user message: `text` followed by the directive line.
    pub fn message(&self, text: &str) -> String {
        if text.is_empty() {
            self.directive()
        } else {
            format!("{text}\n{}", self.directive())
        }
    }
}

impl From<Script> for Value {
    fn from(script: Script) -> Self {
        let mut object = match script.steps.as_slice() {
            [single] => step_object(single),
            steps => {
                let mut object = Map::new();
                object.insert(
                    "steps".to_owned(),
                    Value::Array(
                        steps
                            .iter()
                            .map(|s| Value::Object(step_object(s)))
                            .collect(),
                    ),
                );
                object
            }
        };
        if let Some(id) = script.id {
            object.insert("id".to_owned(), Value::String(id));
        }
        Value::Object(object)
    }
}

fn step_object(step: &Step) -> Map<String, Value> {
    match serde_json::to_value(step) {
        Ok(Value::Object(object)) => object,
        // A struct of plain fields always serialises to an object.
        _ => Map::new(),
    }
}

impl TryFrom<Value> for Script {
    type Error = ScriptError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        let Value::Object(mut object) = value else {
            return Err(ScriptError::NotAnObject);
        };
        let id = match object.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id),
            Some(other) => Some(other.to_string()),
        };
        let steps = match object.remove("steps") {
            Some(steps) => {
                if let Some(key) = object.keys().next() {
                    return Err(ScriptError::StepsAndFields(key.clone()));
                }
                serde_json::from_value(steps).map_err(ScriptError::Json)?
            }
            None => vec![serde_json::from_value(Value::Object(object)).map_err(ScriptError::Json)?],
        };
        Ok(Self { id, steps })
    }
}

/// One model reply: content, reported usage and faults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Step {
    /// The reply text; absent means echoing the user text (without the directive line), or
    /// no text at all when the step calls tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Stream exactly this many text tokens, cycling the text (or filler words when the text
    /// is empty) — for long replies in benchmarks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
    /// Tokens per second; 0 streams as fast as possible. Absent: the server's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Appends `@` and the send time (microseconds since the Unix epoch) to every text
    /// token, so a client on the same machine can measure the latency of each delta.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stamp: bool,
    /// Reasoning text, streamed before the reply text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// A refusal, streamed after the text: OpenAI Chat `refusal` deltas, a Responses
    /// `refusal` content part, or Anthropic's `stop_reason: "refusal"` with this text as
    /// the explanation in `stop_details`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Tool calls, streamed after the text.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A web search the provider runs itself, streamed before the text, whose first
    /// result the text then cites.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_search: Option<WebSearch>,
    /// Usage to report instead of the counted figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Finish reason to report instead of the natural one (`stop` or `tool_calls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish: Option<Finish>,
    /// Fail with an HTTP error before any stream starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<HttpError>,
    /// Drop the connection after some tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
    /// Pause after some tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall: Option<Stall>,
    /// Emit a line that is not valid SSE JSON after some tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub malformed: Option<Malformed>,
    /// Emit the protocol's in-stream error event after some tokens and end the stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_error: Option<StreamError>,
    /// Asked by instruction to continue a cut reply, start it over instead, as small
    /// models often do. A native prefill is still continued.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub restart_on_continue: bool,
}

impl Step {
    /// A step that echoes the user text.
    pub fn echo() -> Self {
        Self::default()
    }

    /// A step that replies with `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A step that calls one tool and says nothing.
    pub fn tool_call(name: impl Into<String>, args: Value) -> Self {
        Self::default().call(name, args)
    }

    /// Adds a tool call.
    pub fn call(mut self, name: impl Into<String>, args: Value) -> Self {
        self.tool_calls.push(ToolCall::new(name, args));
        self
    }

    pub fn tokens(mut self, tokens: u32) -> Self {
        self.tokens = Some(tokens);
        self
    }

    pub fn rate(mut self, tokens_per_second: f64) -> Self {
        self.rate = Some(tokens_per_second);
        self
    }

    /// Stamps every text token with its send time (see the field).
    pub fn stamped(mut self) -> Self {
        self.stamp = true;
        self
    }

    pub fn reasoning(mut self, text: impl Into<String>) -> Self {
        self.reasoning = Some(text.into());
        self
    }

    pub fn refusal(mut self, text: impl Into<String>) -> Self {
        self.refusal = Some(text.into());
        self
    }

    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    pub fn finish(mut self, finish: Finish) -> Self {
        self.finish = Some(finish);
        self
    }

    pub fn error(mut self, error: HttpError) -> Self {
        self.error = Some(error);
        self
    }

    pub fn cut(mut self, cut: Cut) -> Self {
        self.cut = Some(cut);
        self
    }

    pub fn stall(mut self, stall: Stall) -> Self {
        self.stall = Some(stall);
        self
    }

    pub fn malformed(mut self, malformed: Malformed) -> Self {
        self.malformed = Some(malformed);
        self
    }

    pub fn stream_error(mut self, error: StreamError) -> Self {
        self.stream_error = Some(error);
        self
    }
}

impl From<Step> for Script {
    fn from(step: Step) -> Self {
        Script::new(step)
    }
}

/// A tool call to make. `args` is the arguments object; a JSON string is sent verbatim as
/// the argument text, which allows invalid JSON arguments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub name: String,
    #[serde(default)]
    pub args: Value,
    /// The call id; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Anthropic: a tool the provider runs itself (web search): a `server_tool_use` block
    /// and, once its input is complete, its `NAME_tool_result` block. Responses: a
    /// `web_search_call` item. Chat Completions sends it as an ordinary call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub server: bool,
    /// Chat Completions: the `index` the call streams under instead of its position, as
    /// servers do that stream every call at index 0 and tell calls apart by id alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
}

impl ToolCall {
    pub fn new(name: impl Into<String>, args: Value) -> Self {
        Self {
            name: name.into(),
            args,
            id: None,
            server: false,
            index: None,
        }
    }

    /// The argument text sent to the client.
    pub fn args_text(&self) -> String {
        match &self.args {
            Value::String(raw) => raw.clone(),
            Value::Null => "{}".to_owned(),
            other => other.to_string(),
        }
    }
}

/// A provider-run web search: Anthropic's `server_tool_use` and `web_search_tool_result`
/// blocks, or a Responses `web_search_call` item; the reply's text cites the first result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearch {
    pub query: String,
    /// The pages found; absent: one page at `https://example.com/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<SearchResult>,
}

/// One page a web search found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchResult {
    pub url: String,
    #[serde(default)]
    pub title: String,
}

/// Usage figures in Keel's neutral sense: `input_tokens` excludes cached prompt tokens.
/// Absent figures are counted from the request and the reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// A finish reason, mapped onto each protocol's own vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    /// Anthropic's `pause_turn` (a long turn of server tools paused); `stop` and
    /// `completed` on the OpenAI protocols, which have no such thing.
    PauseTurn,
}

/// An HTTP error returned instead of a reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpError {
    pub status: u16,
    /// The provider error type (`rate_limit_error`, `overloaded_error`, ...); derived from the
    /// status when absent.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// The provider error code (OpenAI's `code`, e.g. `context_length_exceeded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A raw body sent verbatim instead of the protocol's error envelope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The `retry-after` header: seconds, or an HTTP date.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "seconds_or_text"
    )]
    pub retry_after: Option<String>,
    /// The `retry-after-ms` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Fail only the first `times` attempts of this step; absent fails every attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

impl HttpError {
    pub fn new(status: u16) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }

    pub fn error_type(mut self, error_type: impl Into<String>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }

    pub fn code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after.as_secs().to_string());
        self
    }

    pub fn retry_after_text(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }
}

fn seconds_or_text<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::Null => None,
        Value::String(text) => Some(text),
        other => Some(other.to_string()),
    })
}

/// Drop the connection once `after` tokens (reasoning, text and argument chunks together)
/// have been sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cut {
    pub after: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

impl Cut {
    pub fn after(tokens: u32) -> Self {
        Self {
            after: tokens,
            times: None,
        }
    }

    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }
}

/// Send nothing for `ms` milliseconds once `after` tokens have been sent — or, with
/// `ping_ms`, only the protocol's keep-alives (Anthropic `ping`, Responses
/// `response.in_progress`, an SSE comment for Chat Completions) every `ping_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Stall {
    pub after: u32,
    pub ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ping_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

impl Stall {
    pub fn after(tokens: u32, pause: Duration) -> Self {
        Self {
            after: tokens,
            ms: u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
            ping_ms: None,
            times: None,
        }
    }

    /// Sends keep-alives every `every` while stalled.
    pub fn pinging(mut self, every: Duration) -> Self {
        self.ping_ms = Some(u64::try_from(every.as_millis()).unwrap_or(u64::MAX));
        self
    }

    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }
}

/// Send a broken SSE line once `after` tokens have been sent, then carry on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Malformed {
    pub after: u32,
    /// The raw line; default `data: {"malformed": ` (truncated JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

impl Malformed {
    pub fn after(tokens: u32) -> Self {
        Self {
            after: tokens,
            ..Self::default()
        }
    }

    pub fn line(mut self, line: impl Into<String>) -> Self {
        self.line = Some(line.into());
        self
    }

    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }
}

/// End the stream with the protocol's error event once `after` tokens have been sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamError {
    pub after: u32,
    /// Default `overloaded_error`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

impl StreamError {
    pub fn after(tokens: u32) -> Self {
        Self {
            after: tokens,
            ..Self::default()
        }
    }

    pub fn error_type(mut self, error_type: impl Into<String>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }

    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }
}

/// A directive found in a user message.
#[derive(Debug, Clone, PartialEq)]
pub struct Directive {
    pub script: Script,
    /// The raw JSON text; keys attempt counting for scripts without an id.
    pub source: String,
    /// The message text without the directive line.
    pub rest: String,
}

/// Finds the first `#mock {json}` line in `text`. `Ok(None)`: there is none.
pub fn parse_directive(text: &str) -> Result<Option<Directive>, ScriptError> {
    let mut rest = Vec::new();
    let mut found = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let is_directive = found.is_none()
            && trimmed
                .strip_prefix(DIRECTIVE)
                .is_some_and(|after| after.is_empty() || after.starts_with(char::is_whitespace));
        if is_directive {
            found = Some(trimmed[DIRECTIVE.len()..].trim().to_owned());
        } else {
            rest.push(line);
        }
    }
    let Some(source) = found else {
        return Ok(None);
    };
    let value: Value = if source.is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(&source).map_err(ScriptError::Json)?
    };
    Ok(Some(Directive {
        script: Script::try_from(value)?,
        source,
        rest: rest.join("\n").trim().to_owned(),
    }))
}

#[cfg(test)]
mod tests;
