//! The configuration file as written: the serde types of the TOML format and the defaults a
//! missing table or key takes. Unknown keys are errors (`deny_unknown_fields`), and a parse
//! error keeps the TOML parser's message, which points at the offending line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use keel_core::{Effort, ReasoningEffort, Thinking};
use keel_providers::{Continuation, OutputLimitField, ProviderKind, ReasoningContent};
use keel_tools::BuiltinTool;
use serde::Deserialize;

use super::ConfigError;

/// The file as written. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub database: Option<String>,
    #[serde(default)]
    pub providers: Vec<ProviderEntry>,
    #[serde(default)]
    pub models: Vec<ModelEntry>,
    #[serde(default)]
    pub runs: RunsConfig,
    #[serde(default)]
    pub mcp_servers: Vec<McpServerEntry>,
    #[serde(default)]
    pub tools: ToolsConfig,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub users: Vec<UserEntry>,
    #[serde(default)]
    pub telemetry: super::telemetry::TelemetryFile,
    #[serde(default)]
    pub log: LogConfig,
}

impl FileConfig {
    /// Parses the text of a config file; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Reads and parses the file at `path`.
    pub(super) fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    pub name: String,
    /// The wire protocol; an unknown kind fails parsing with the known ones named.
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// Send `stream_options.include_usage` (openai-chat); some servers reject it.
    #[serde(default = "yes")]
    pub include_usage: bool,
    /// How a cut reply is continued: `prefill` (the server continues the partial reply
    /// natively) or `prompt` (an instruction to continue, with the seam checked). Default:
    /// `prefill` for anthropic but Claude 4.6 and later, `prompt` otherwise.
    #[serde(default)]
    pub continuation: Option<Continuation>,
    /// openai-chat: the field of the output limit, `max_completion_tokens` (the default)
    /// or `max_tokens`.
    pub output_limit_field: Option<OutputLimitField>,
    /// openai-chat: whether reasoning goes back as `reasoning_content`, `omit` (the
    /// default) or `send`.
    pub reasoning_content: Option<ReasoningContent>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub id: String,
    pub provider: String,
    pub model: String,
    pub context_limit: Option<u64>,
    #[serde(default)]
    pub default: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<ReasoningEffort>,
    #[serde(default)]
    pub store: bool,
    pub thinking_budget_tokens: Option<u32>,
    /// Anthropic: `adaptive` lets the model decide how much to think (Claude 4.6 and later).
    pub thinking: Option<Thinking>,
    /// Anthropic: `output_config.effort`, how much the model spends on a reply.
    pub effort: Option<Effort>,
    /// How this model continues a cut reply; absent: its provider's `continuation`, else
    /// the default for the model ([`ProviderKind::default_continuation`]).
    pub continuation: Option<Continuation>,
    /// How long this model may take to send its first stream event; absent: the runs'
    /// `startup_timeout_ms`, scaled for reasoning models.
    pub startup_timeout_ms: Option<u64>,
    /// US dollars per million tokens; absent: the model's usage has no cost.
    pub price: Option<keel_core::Price>,
    /// Tools the provider runs itself, by name (`web_search`), offered with every call.
    #[serde(default)]
    pub provider_tools: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunsConfig {
    pub max_steps: i64,
    pub startup_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub retry_max_attempts: u32,
    pub retry_initial_delay_ms: u64,
    pub retry_max_delay_ms: u64,
    pub workers: usize,
    pub compaction_threshold: f64,
    /// How long a worker's claim on a chat lasts without renewal.
    pub lease_ms: u64,
    /// Queued messages a chat may hold.
    pub queue_max: usize,
    /// How long client-side tool calls may wait for results.
    pub pending_action_timeout_ms: u64,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Largest accepted body of `POST /api/v1/ai-sdk/chat`, which carries a front end's
    /// whole history (tool outputs, images) on every turn.
    pub ai_sdk_max_body_bytes: usize,
    /// Largest accepted body of `POST /api/v1/chats/import`, which carries a whole chat.
    pub import_max_body_bytes: usize,
    /// Whether an untitled chat gets a title generated after its first reply.
    pub titles: bool,
    /// The model that writes titles; the chat's own model when absent.
    pub title_model: Option<String>,
    /// Connections of the database pool; absent: sized to `workers`
    /// ([`RunsConfig::database_connections`]).
    #[serde(rename = "database_connections")]
    pub database_connections_set: Option<u32>,
}

impl Default for RunsConfig {
    fn default() -> Self {
        // The loop's own retry defaults, so that the two never differ.
        let retry = keel_agent::RetryPolicy::default();
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            max_steps: 25,
            startup_timeout_ms: 60_000,
            idle_timeout_ms: 60_000,
            retry_max_attempts: retry.max_attempts,
            retry_initial_delay_ms: ms(retry.initial_delay),
            retry_max_delay_ms: ms(retry.max_delay),
            workers: 64,
            compaction_threshold: 0.8,
            lease_ms: 30_000,
            queue_max: 20,
            pending_action_timeout_ms: 300_000,
            max_body_bytes: 1024 * 1024,
            ai_sdk_max_body_bytes: 32 * 1024 * 1024,
            import_max_body_bytes: 32 * 1024 * 1024,
            titles: true,
            title_model: None,
            database_connections_set: None,
        }
    }
}

impl RunsConfig {
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The database pool's size: as configured, else on PostgreSQL one connection per four
    /// workers, between 8 and 16, and on SQLite 8 readers (each is a thread of its own;
    /// writes go through one connection anyway). A run holds a connection only for each
    /// write, and the live path (the log writer's grouped transactions, the grouped read
    /// of other replicas' parts) has connections of its own, so the pool serves requests,
    /// claims and catch-ups. More connections than that only move the queue into the server:
    /// two replicas × 500 streaming chats on a 2-core PostgreSQL had a p99 of 137–184 ms
    /// with 16 a daemon, 180–224 ms with 32 (`docs/benchmarks.md`). Five replicas at the
    /// cap, with their live paths and `LISTEN`s, stay within PostgreSQL's default limit of
    /// 100 connections.
    pub fn database_connections(&self, postgres: bool) -> u32 {
        self.database_connections_set.unwrap_or_else(|| {
            if postgres {
                u32::try_from(self.workers.div_ceil(4))
                    .unwrap_or(u32::MAX)
                    .clamp(8, 16)
            } else {
                8
            }
        })
    }
}

/// `[server]`: who may talk to the daemon and how much of it one client may take.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Names the daemon answers to besides its own address and the loopback names, as
    /// `HOST` (any port) or `HOST:PORT`: what a reverse proxy forwards as `Host`, or the
    /// name in a browser's `Origin` when the page is reached through it.
    pub allowed_hosts: Vec<String>,
    /// Live event streams one user may hold open at once.
    pub sse_max_per_user: usize,
    /// Live event streams the daemon holds open at once, all users together.
    pub sse_max_total: usize,
    /// A connection that does not finish sending a request's headers within this is
    /// closed (also bounds how long an idle kept-alive connection is held); a request
    /// whose body pauses this long, or has not arrived whole this long after its headers,
    /// fails with `400`.
    pub header_read_timeout_ms: u64,
    /// Requests being handled at once; beyond it a request is answered `503` at once.
    /// A live event stream counts only until its headers are sent.
    pub max_requests_in_flight: usize,
    /// A live event stream writes at most once per this while its events keep coming;
    /// what is ready meanwhile leaves in one write. Zero writes every event alone.
    pub sse_write_interval_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            sse_max_per_user: 32,
            sse_max_total: 1024,
            header_read_timeout_ms: 30_000,
            max_requests_in_flight: 1024,
            sse_write_interval_ms: 10,
        }
    }
}

impl ServerConfig {
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    pub fn sse_write_interval(&self) -> Duration {
        Duration::from_millis(self.sse_write_interval_ms)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    pub name: String,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// Variables of the daemon's environment passed to the server by name.
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    pub url: Option<String>,
    /// The limit on one call of this server's tools, instead of `[tools] timeout_ms`.
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Absent: only the tools that read (`read_file`, `list_dir`); the others are opt-in.
    pub builtin: Vec<BuiltinTool>,
    pub workspace: PathBuf,
    /// The limit on one tool call; MCP servers may set their own.
    pub timeout_ms: u64,
    /// Run `run_command` unconfined where the kernel cannot confine it (Landlock ABI below 3)
    /// instead of refusing to start.
    pub run_command_unconfined: bool,
    /// Let `run_command`'s commands open network sockets (TCP, UDP); off, they reach no
    /// address, loopback included.
    pub run_command_network: bool,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            builtin: BuiltinTool::READ_ONLY.to_vec(),
            workspace: PathBuf::from("./workspace"),
            timeout_ms: 120_000,
            run_command_unconfined: false,
            run_command_network: false,
        }
    }
}

impl ToolsConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    pub name: String,
    pub token_sha256: String,
    /// Written to the database at every start; absent: the stored budget stays as it is.
    pub budget: Option<keel_store::Budget>,
}

/// `[log]`: how the daemon's log lines are written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Absent: `KEEL_LOG_FORMAT`, else text.
    pub format: Option<LogFormat>,
}

/// A log line as text for people, or as one JSON object for log collectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    pub(super) fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_database_pool_is_sized_to_the_workers_unless_set() {
        let runs = |workers, set| super::RunsConfig {
            workers,
            database_connections_set: set,
            ..super::RunsConfig::default()
        };
        assert_eq!(runs(1, None).database_connections(true), 8);
        assert_eq!(runs(40, None).database_connections(true), 10);
        assert_eq!(runs(64, None).database_connections(true), 16);
        assert_eq!(runs(1000, None).database_connections(true), 16);
        assert_eq!(runs(1000, Some(50)).database_connections(true), 50);
        assert_eq!(runs(1000, None).database_connections(false), 8);
        assert_eq!(runs(1000, Some(4)).database_connections(false), 4);
    }

    use std::time::Duration;

    use super::*;
    use crate::config::testing::parse;

    #[test]
    fn without_a_tools_table_only_the_read_only_builtins_are_enabled() {
        for text in ["", "[tools]\nworkspace = \"/srv/ws\""] {
            let config = parse(text).unwrap();
            assert_eq!(config.tools.builtin, BuiltinTool::READ_ONLY, "{text}");
            assert_eq!(config.tools.timeout(), Duration::from_secs(120));
        }
        let config = parse("[tools]\nbuiltin = [\"run_command\"]\ntimeout_ms = 500").unwrap();
        assert_eq!(config.tools.builtin, [BuiltinTool::RunCommand]);
        assert_eq!(config.tools.timeout(), Duration::from_millis(500));
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = parse("listen = \"127.0.0.1:1\"\nlisten_port = 3").unwrap_err();
        assert!(err.contains("listen_port"), "{err}");
        let err = parse("[runs]\nmax_step = 3").unwrap_err();
        assert!(err.contains("max_step"), "{err}");
    }

    #[test]
    fn a_parse_error_names_the_file_and_points_at_the_line() {
        let err = FileConfig::parse(
            "listen = \"127.0.0.1:1\"\n[runs]\nworkers = \"many\"",
            Path::new("keel.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("config file keel.toml: "), "{err}");
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn an_unknown_provider_kind_is_refused_naming_the_known_ones() {
        let err = parse("[[providers]]\nname = \"p\"\nkind = \"vertex\"").unwrap_err();
        for known in [
            "vertex",
            "openai-chat",
            "openai-responses",
            "anthropic",
            "gemini",
            "line 3",
        ] {
            assert!(err.contains(known), "{known}: {err}");
        }
    }

    #[test]
    fn closed_sets_of_values_parse_into_enums_and_refuse_the_rest() {
        let file = parse(
            "[[providers]]\nname = \"p\"\nkind = \"openai-responses\"\ncontinuation = \"prompt\"\n\
             [[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\nreasoning_effort = \"high\"",
        )
        .unwrap();
        assert_eq!(file.providers[0].kind, ProviderKind::OpenAiResponses);
        assert_eq!(file.providers[0].continuation, Some(Continuation::Prompt));
        assert_eq!(file.models[0].reasoning_effort, Some(ReasoningEffort::High));
        let err =
            parse("[[providers]]\nname = \"p\"\nkind = \"anthropic\"\ncontinuation = \"guess\"")
                .unwrap_err();
        assert!(err.contains("prefill") && err.contains("prompt"), "{err}");
        let err = parse("[tools]\nbuiltin = [\"read_file\", \"rm_rf\"]").unwrap_err();
        assert!(
            err.contains("rm_rf") && err.contains("run_command"),
            "{err}"
        );
        let err = parse(
            "[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\nreasoning_effort = \"max\"",
        )
        .unwrap_err();
        assert!(err.contains("medium") && err.contains("xhigh"), "{err}");
    }

    #[test]
    fn chat_completions_switches_parse_into_enums_and_refuse_the_rest() {
        let file = parse(
            "[[providers]]\nname = \"p\"\nkind = \"openai-chat\"\n\
             output_limit_field = \"max_tokens\"\nreasoning_content = \"send\"",
        )
        .unwrap();
        assert_eq!(
            file.providers[0].output_limit_field,
            Some(OutputLimitField::MaxTokens)
        );
        assert_eq!(
            file.providers[0].reasoning_content,
            Some(ReasoningContent::Send)
        );
        let err = parse(
            "[[providers]]\nname = \"p\"\nkind = \"openai-chat\"\noutput_limit_field = \"max_output_tokens\"",
        )
        .unwrap_err();
        assert!(
            err.contains("max_completion_tokens") && err.contains("max_tokens"),
            "{err}"
        );
        let err =
            parse("[[providers]]\nname = \"p\"\nkind = \"openai-chat\"\nreasoning_content = true")
                .unwrap_err();
        assert!(err.contains("reasoning_content"), "{err}");
    }

    #[test]
    fn missing_tables_take_their_defaults() {
        let file = parse("").unwrap();
        assert_eq!(file.runs, RunsConfig::default());
        assert_eq!(file.server, ServerConfig::default());
        assert_eq!(file.runs.lease(), Duration::from_secs(30));
        assert_eq!(file.server.header_read_timeout(), Duration::from_secs(30));
    }

    #[test]
    fn a_provider_sends_usage_options_unless_told_not_to() {
        let file = parse("[[providers]]\nname = \"p\"\nkind = \"openai-chat\"").unwrap();
        assert!(file.providers[0].include_usage);
    }
}
