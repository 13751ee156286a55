//! Deciding what to answer: from a conversation and its directive to a [`Reply`] (or an
//! HTTP failure), independent of the protocol that will carry it.

use std::time::Duration;

use serde_json::Value;

use crate::conversation::Conversation;
use crate::script::{Finish, HttpError, SearchResult, Step, parse_directive};
use crate::state::State;
use crate::tokens;

/// What the reply to one request is made of.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// Unique within the server; ids of the response and its items derive from it.
    pub seq: u64,
    pub model: String,
    pub reasoning: Vec<String>,
    pub text: Vec<String>,
    /// Refusal tokens, streamed after the text.
    pub refusal: Vec<String>,
    pub calls: Vec<Call>,
    /// How many of `calls` (provider-run searches) stream before the text.
    pub leading_calls: usize,
    pub usage: Figures,
    pub finish: Finish,
    pub faults: Faults,
    /// Tokens per second; 0 means no pacing.
    pub rate: f64,
    /// Whether text tokens carry their send time (see `Step::stamp`).
    pub stamp: bool,
    /// The script it answers, for the tally of what was reported (see `crate::tally`).
    pub key: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct Call {
    id: Option<String>,
    /// Run by the provider itself (see `ToolCall::server`).
    pub server: bool,
    /// The Chat Completions `index` it streams under, when not its position.
    pub index: Option<usize>,
    pub name: String,
    pub args: String,
    pub chunks: Vec<String>,
    /// What a provider-run web search found (see `Step::web_search`).
    pub results: Vec<SearchResult>,
}

/// Usage in Keel's neutral sense (input excludes cached tokens).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Figures {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
}

/// Faults active for this attempt. `after` counts are tokens already sent.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    pub cut: Option<u32>,
    /// After how many tokens, for how long, and how often to send keep-alives meanwhile.
    pub stall: Option<(u32, Duration, Option<Duration>)>,
    pub malformed: Option<(u32, String)>,
    pub stream_error: Option<StreamFault>,
}

#[derive(Debug, Clone)]
pub(crate) struct StreamFault {
    pub after: u32,
    pub error_type: String,
    pub message: String,
}

/// The outcome of planning.
pub(crate) enum Plan {
    Reply(Box<Reply>),
    /// A scripted HTTP error.
    Fail(HttpError),
    /// The directive cannot be used; answered with a 400.
    Invalid(String),
}

const DEFAULT_MALFORMED: &str = "data: {\"malformed\": ";
const EMPTY_ECHO: &str = "(empty message)";

impl Reply {
    pub(crate) fn text(&self) -> String {
        self.text.concat()
    }

    pub(crate) fn reasoning(&self) -> String {
        self.reasoning.concat()
    }

    pub(crate) fn refusal(&self) -> String {
        self.refusal.concat()
    }

    /// The id of call `index`: the scripted one, or `prefix` and a unique suffix.
    pub(crate) fn call_id(&self, index: usize, prefix: &str) -> String {
        match self.calls.get(index).and_then(|c| c.id.clone()) {
            Some(id) => id,
            None => format!("{prefix}mock{}x{index}", self.seq),
        }
    }

    /// A stand-in for a provider's reasoning signature or encrypted content.
    pub(crate) fn signature(&self) -> String {
        format!("mock-signature-{}", self.seq)
    }

    /// Whether the stream may end before its natural finish; such responses are not stored.
    pub(crate) fn may_break(&self) -> bool {
        self.faults.cut.is_some() || self.faults.stream_error.is_some()
    }
}

/// Plans the answer to `conversation`.
pub(crate) fn plan(conversation: &Conversation, model: &str, state: &State) -> Plan {
    // A turn the mock paused is carried on by sending it back as it is: that is the next
    // step of the script, not a partial reply to continue.
    let continuation = conversation
        .continuation()
        .filter(|c| !state.was_paused(c.prefix));
    let user_text = match &continuation {
        Some(c) => c.user_text,
        None => conversation.last_user_text().unwrap_or_default(),
    };
    let directive = match parse_directive(user_text) {
        Ok(directive) => directive,
        Err(error) => return Plan::Invalid(error.to_string()),
    };
    let index = match &continuation {
        Some(c) => c.step,
        None => conversation.turns_since_user(),
    };
    let mut key = None;
    let (step, attempt) = match &directive {
        Some(directive) => {
            let script = directive
                .script
                .id
                .clone()
                .unwrap_or_else(|| directive.source.clone());
            let attempt = state.attempt(&script, index);
            key = Some(script);
            let step = match directive.script.steps.get(index) {
                Some(step) => step.clone(),
                None => final_step(conversation, &directive.rest),
            };
            (with_echo(step, &directive.rest), attempt)
        }
        None => (
            with_echo(unscripted_step(conversation, user_text, index), user_text),
            1,
        ),
    };
    tracing::debug!(
        scripted = directive.is_some(),
        step = index,
        attempt,
        model,
        "planning a reply"
    );
    let active = |times: Option<u32>| times.is_none_or(|t| attempt <= t);
    if let Some(error) = step.error.as_ref().filter(|e| active(e.times)) {
        return Plan::Fail(error.clone());
    }
    let mut reply = build(&step, conversation, model, state, &active);
    reply.key = key;
    if reply.finish == Finish::PauseTurn {
        state.pause(&reply.text());
    }
    if let Some(c) = &continuation
        && !(c.by_instruction && step.restart_on_continue)
    {
        continue_after(&mut reply, c.prefix);
    }
    Plan::Reply(Box::new(reply))
}

/// Drops what a continued reply already said: the text resumes right after `prefix` (a
/// provider's prefill may have lost trailing whitespace, which is tolerated), and a search
/// that came before that text is not run again.
fn continue_after(reply: &mut Reply, prefix: &str) {
    let text = reply.text();
    let rest = text
        .strip_prefix(prefix)
        .or_else(|| text.strip_prefix(prefix.trim_end()));
    if let Some(rest) = rest {
        reply.text = tokens::words(rest);
        reply.reasoning.clear();
        reply.calls.drain(..reply.leading_calls);
        reply.leading_calls = 0;
    }
}

/// Fills in the echo text for a step without its own text. A step that calls tools says
/// nothing unless told to, as models calling tools often do.
fn with_echo(mut step: Step, user_text: &str) -> Step {
    if step.text.is_none() && step.tool_calls.is_empty() && step.web_search.is_none() {
        let echo = if user_text.trim().is_empty() {
            EMPTY_ECHO
        } else {
            user_text
        };
        step.text = Some(echo.to_owned());
    }
    step
}

/// The answer past the last scripted step: a summary of the tool results just received,
/// or the echo.
fn final_step(conversation: &Conversation, user_text: &str) -> Step {
    let results = conversation.trailing_tool_results();
    if results.is_empty() {
        return Step::text(user_text);
    }
    Step::text(summarise(&results))
}

fn summarise(results: &[(Option<&str>, &str)]) -> String {
    const LIMIT: usize = 300;
    results
        .iter()
        .map(|(name, content)| {
            let shown: String = content.chars().take(LIMIT).collect();
            let more = if content.chars().count() > LIMIT {
                "…"
            } else {
                ""
            };
            match name {
                Some(name) => format!("Tool {name} returned: {shown}{more}"),
                None => format!("The tool returned: {shown}{more}"),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Without a directive: echo, except that a message starting with the name of an offered
/// tool (optionally after `/`) followed by a JSON object or nothing calls that tool, and
/// the turn after a tool call summarises its results. This is what lets the demo model
/// exercise tools without any script. `/NAME` for a tool that is not offered answers which
/// tools are.
fn unscripted_step(conversation: &Conversation, user_text: &str, index: usize) -> Step {
    if index > 0 {
        return final_step(conversation, user_text);
    }
    let trimmed = user_text.trim();
    let (head, rest) = trimmed
        .split_once(char::is_whitespace)
        .unwrap_or((trimmed, ""));
    let name = head.strip_prefix('/').unwrap_or(head);
    if !conversation.tools.iter().any(|tool| tool == name) {
        if head.starts_with('/') && is_tool_name(name) {
            return Step::text(not_offered(name, &conversation.tools));
        }
        return Step::echo();
    }
    let rest = rest.trim();
    let args = if rest.is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        match serde_json::from_str::<Value>(rest) {
            Ok(args @ Value::Object(_)) => args,
            _ => return Step::echo(),
        }
    };
    Step::tool_call(name, args)
}

/// What a tool name can look like (the providers' own rule); `/etc/passwd` is not one.
fn is_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The answer to a request for a tool that is not offered.
fn not_offered(name: &str, offered: &[String]) -> String {
    let enabled = if offered.is_empty() {
        "No tools are enabled.".to_owned()
    } else {
        format!("Enabled tools: {}.", offered.join(", "))
    };
    format!("I cannot use `{name}`: it is not enabled here. {enabled}")
}

fn build(
    step: &Step,
    conversation: &Conversation,
    model: &str,
    state: &State,
    active: &dyn Fn(Option<u32>) -> bool,
) -> Reply {
    let text = step.text.as_deref().unwrap_or_default();
    let text = match step.tokens {
        Some(count) => tokens::cycled(text, usize::try_from(count).unwrap_or(usize::MAX)),
        None => tokens::words(text),
    };
    let reasoning = step
        .reasoning
        .as_deref()
        .map(tokens::words)
        .unwrap_or_default();
    let refusal = step
        .refusal
        .as_deref()
        .map(tokens::words)
        .unwrap_or_default();
    let search = step.web_search.as_ref().map(search_call);
    let leading_calls = usize::from(search.is_some());
    let calls: Vec<Call> = search
        .into_iter()
        .chain(step.tool_calls.iter().map(|call| {
            let args = call.args_text();
            Call {
                id: call.id.clone(),
                server: call.server,
                index: call.index,
                name: call.name.clone(),
                chunks: tokens::chunks(&args),
                args,
                results: Vec::new(),
            }
        }))
        .collect();
    let sent = reasoning.len()
        + text.len()
        + refusal.len()
        + calls.iter().map(|c| c.chunks.len()).sum::<usize>();
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let scripted = step.usage.unwrap_or_default();
    let usage = Figures {
        input: scripted
            .input_tokens
            .unwrap_or_else(|| tokens::estimate(conversation.chars)),
        output: scripted.output_tokens.unwrap_or(count(sent)),
        cache_read: scripted.cache_read_tokens.unwrap_or(0),
        cache_write: scripted.cache_write_tokens.unwrap_or(0),
        reasoning: scripted.reasoning_tokens.unwrap_or(count(reasoning.len())),
    };
    // Calls the provider runs itself do not end the turn for the client.
    let finish = step.finish.unwrap_or(if calls.iter().all(|c| c.server) {
        Finish::Stop
    } else {
        Finish::ToolCalls
    });
    let faults = Faults {
        cut: step.cut.filter(|c| active(c.times)).map(|c| c.after),
        stall: step.stall.filter(|s| active(s.times)).map(|s| {
            let ping = s.ping_ms.filter(|ms| *ms > 0).map(Duration::from_millis);
            (s.after, Duration::from_millis(s.ms), ping)
        }),
        malformed: step
            .malformed
            .as_ref()
            .filter(|m| active(m.times))
            .map(|m| {
                (
                    m.after,
                    m.line
                        .clone()
                        .unwrap_or_else(|| DEFAULT_MALFORMED.to_owned()),
                )
            }),
        stream_error: step
            .stream_error
            .as_ref()
            .filter(|e| active(e.times))
            .map(|e| StreamFault {
                after: e.after,
                error_type: e
                    .error_type
                    .clone()
                    .unwrap_or_else(|| "overloaded_error".to_owned()),
                message: e.message.clone().unwrap_or_else(|| "Overloaded".to_owned()),
            }),
    };
    let rate = step.rate.unwrap_or(state.config.rate);
    Reply {
        seq: state.next_seq(),
        model: model.to_owned(),
        reasoning,
        text,
        refusal,
        calls,
        leading_calls,
        usage,
        finish,
        faults,
        rate: if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            0.0
        },
        stamp: step.stamp,
        key: None,
    }
}

/// The provider-run call a scripted web search is.
fn search_call(search: &crate::script::WebSearch) -> Call {
    let args = serde_json::json!({"query": search.query}).to_string();
    let results = if search.results.is_empty() {
        vec![SearchResult {
            url: "https://example.com/".to_owned(),
            title: "Example".to_owned(),
        }]
    } else {
        search.results.clone()
    };
    Call {
        id: None,
        server: true,
        index: None,
        name: "web_search".to_owned(),
        chunks: tokens::chunks(&args),
        args,
        results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(tools: &[&str]) -> Conversation {
        Conversation {
            tools: tools.iter().map(|t| t.to_string()).collect(),
            ..Conversation::default()
        }
    }

    #[test]
    fn a_tool_that_is_not_offered_is_named_with_the_ones_that_are() {
        let conversation = offering(&["read_file", "list_dir"]);
        let step = unscripted_step(&conversation, "/run_command {\"command\":\"ls\"}", 0);
        assert!(step.tool_calls.is_empty());
        assert_eq!(
            step.text.as_deref(),
            Some(
                "I cannot use `run_command`: it is not enabled here. Enabled tools: read_file, list_dir."
            )
        );
        let step = unscripted_step(&offering(&[]), "/write_file", 0);
        assert_eq!(
            step.text.as_deref(),
            Some("I cannot use `write_file`: it is not enabled here. No tools are enabled.")
        );
    }

    #[test]
    fn offered_tools_are_called_and_other_text_is_echoed() {
        let conversation = offering(&["list_dir"]);
        let step = unscripted_step(&conversation, "/list_dir {\"path\":\".\"}", 0);
        assert_eq!(step.tool_calls.len(), 1);
        for text in ["hello", "/etc/passwd is a file", "run_command please"] {
            let step = unscripted_step(&conversation, text, 0);
            assert!(step.text.is_none() && step.tool_calls.is_empty(), "{text}");
        }
    }
}
