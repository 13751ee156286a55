//! The soak's menu of scripted chats: what each asks of the mock provider and what its end
//! state must be. Choosing one is a pure function of a random number generator, so a seed
//! reproduces a whole soak.

use std::time::Duration;

use keel_mock::{Cut, HttpError, Malformed, Script, Stall, Step, StreamError};
use rand::{Rng, RngExt};
use serde_json::{Value, json};

/// Which model a chat uses (see [`super::processes::DaemonSetup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// OpenAI Chat Completions.
    Chat,
    /// OpenAI Responses in chain mode.
    Chain,
    /// Anthropic Messages.
    Anthropic,
}

impl Model {
    pub fn id(self) -> &'static str {
        match self {
            Model::Chat => "mock",
            Model::Chain => "mock-chain",
            Model::Anthropic => "mock-anthropic",
        }
    }

    /// Whether consecutive user messages reach the model as one user turn. Anthropic
    /// Messages needs alternating roles, so its adapter joins them, and the mock echoes
    /// them all, one per line; the OpenAI formats send each message on its own, and the
    /// mock echoes the last.
    pub fn merges_user_turns(self) -> bool {
        self == Model::Anthropic
    }
}

/// How a chat must end.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// Status `waiting`; the last assistant message has exactly this text (unless the user
    /// interrupted it, when it is a prefix of it).
    Reply(String),
    /// Status `error`: the script made success impossible.
    Failure,
}

/// One scripted chat.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    /// The id of its script, which the mock provider's tally names (see [`super::usage`]).
    pub id: String,
    pub model: Model,
    /// The first user message, with its `#mock` directive.
    pub text: String,
    /// Client-side tools offered at creation; the client answers their calls.
    pub client_tools: Vec<Value>,
    pub expect: Expect,
}

impl Scenario {
    /// Whether a fault of its script may leave a response the mock delivered whole
    /// uncommitted: a stall past the idle timeout or a malformed line makes the daemon give
    /// up on a stream whose end the mock may already have written.
    pub fn may_void_a_response(&self) -> bool {
        self.name.starts_with("stall_") || self.name == "malformed_line"
    }
}

/// The names of every scenario, in the order [`choose`] numbers them.
pub const NAMES: &[&str] = &[
    "plain",
    "builtin_tool_loop",
    "client_tool",
    "http_error_then_ok",
    "cut_mid_text",
    "cut_mid_tool_args",
    "stall_mid_text",
    "stall_mid_tool_args",
    "malformed_line",
    "stream_error_event",
    "chain_broken",
    "permanent_error",
    "retries_exhausted",
];

/// A random scenario for chat `index`; `id` makes the mock's per-attempt fault counting
/// unique to this chat.
pub fn choose(rng: &mut impl Rng, id: &str) -> Scenario {
    make(rng, None, id)
}

/// Like [`choose`], but scenario `name` (one of [`NAMES`]) whatever the draw.
pub fn named(rng: &mut impl Rng, name: &'static str, id: &str) -> Scenario {
    make(rng, Some(name), id)
}

fn make(rng: &mut impl Rng, name: Option<&'static str>, id: &str) -> Scenario {
    let words = |rng: &mut dyn Rng, lo: usize, hi: usize| -> String {
        let n = rng.random_range(lo..=hi);
        let tag: u32 = rng.random_range(0..1000);
        (1..=n)
            .map(|i| format!("t{tag}w{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rate = [0.0, 50.0, 200.0][rng.random_range(0..3)];
    let model = [Model::Chat, Model::Chat, Model::Anthropic, Model::Chain][rng.random_range(0..4)];
    let drawn = NAMES[rng.random_range(0..NAMES.len())];
    let name = name.unwrap_or(drawn);
    let reply = words(rng, 5, 40);
    let after = rng.random_range(1..5);
    let text_step = || Step::text(reply.clone()).rate(rate);
    let mut client_tools = Vec::new();
    let (script, expect, model) = match name {
        "plain" => (
            Script::new(text_step()),
            Expect::Reply(reply.clone()),
            model,
        ),
        "builtin_tool_loop" => (
            Script::new(Step::tool_call("list_dir", json!({"path": "."})).rate(rate))
                .then(text_step()),
            Expect::Reply(reply.clone()),
            model,
        ),
        "client_tool" => {
            client_tools.push(json!({
                "name": "lookup",
                "description": "Looks a word up on the client.",
                "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}
            }));
            (
                Script::new(Step::tool_call("lookup", json!({"word": "keel"}))).then(text_step()),
                Expect::Reply(reply.clone()),
                model,
            )
        }
        "http_error_then_ok" => {
            let status = [429, 500, 502, 503, 529][rng.random_range(0..5)];
            let times = rng.random_range(1..=2);
            (
                Script::new(
                    text_step().error(HttpError::new(status).retry_after_ms(10).times(times)),
                ),
                Expect::Reply(reply.clone()),
                model,
            )
        }
        "cut_mid_text" => (
            Script::new(text_step().cut(Cut::after(after).times(1))),
            Expect::Reply(reply.clone()),
            model,
        ),
        "cut_mid_tool_args" => (
            Script::new(
                Step::tool_call(
                    "read_file",
                    json!({"path": "a-file-that-does-not-exist.txt"}),
                )
                .cut(Cut::after(2).times(1)),
            )
            .then(text_step()),
            Expect::Reply(reply.clone()),
            model,
        ),
        "stall_mid_text" => (
            Script::new(
                text_step().stall(Stall::after(after, Duration::from_millis(2_500)).times(1)),
            ),
            Expect::Reply(reply.clone()),
            model,
        ),
        "stall_mid_tool_args" => (
            Script::new(
                Step::tool_call("list_dir", json!({"path": "."}))
                    .stall(Stall::after(1, Duration::from_millis(2_500)).times(1)),
            )
            .then(text_step()),
            Expect::Reply(reply.clone()),
            model,
        ),
        "malformed_line" => (
            Script::new(text_step().malformed(Malformed::after(after).times(1))),
            Expect::Reply(reply.clone()),
            model,
        ),
        "stream_error_event" => (
            Script::new(text_step().stream_error(StreamError::after(after).times(1))),
            Expect::Reply(reply.clone()),
            model,
        ),
        "chain_broken" => (
            Script::new(
                text_step().error(
                    HttpError::new(400)
                        .code("previous_response_not_found")
                        .message("Previous response with id 'resp_gone' not found.")
                        .times(1),
                ),
            ),
            Expect::Reply(reply.clone()),
            Model::Chain,
        ),
        "permanent_error" => (
            Script::new(text_step().error(HttpError::new([400, 401, 403][rng.random_range(0..3)]))),
            Expect::Failure,
            model,
        ),
        _ => (
            Script::new(text_step().error(HttpError::new(503).retry_after_ms(5))),
            Expect::Failure,
            model,
        ),
    };
    Scenario {
        name,
        id: id.to_owned(),
        model,
        text: script.id(id).message("soak"),
        client_tools,
        expect,
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn a_seed_chooses_the_same_scenarios() {
        let names = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..50)
                .map(|i| {
                    let s = choose(&mut rng, &format!("c{i}"));
                    (s.name, s.text)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(names(7), names(7));
        assert_ne!(names(7), names(8));
    }

    #[test]
    fn a_named_scenario_is_the_one_asked_for() {
        let mut rng = StdRng::seed_from_u64(5);
        for name in NAMES {
            assert_eq!(named(&mut rng, name, "c").name, *name);
        }
    }

    #[test]
    fn every_scenario_is_reachable_and_its_directive_parses() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut seen = std::collections::HashSet::new();
        for i in 0..2_000 {
            let scenario = choose(&mut rng, &format!("c{i}"));
            assert!(
                keel_mock::parse_directive(&scenario.text)
                    .unwrap()
                    .is_some()
            );
            seen.insert(scenario.name);
        }
        assert_eq!(seen.len(), NAMES.len());
    }
}
