//! The daemon's configuration: the TOML file, flags and environment of the public contract.
//!
//! Precedence, as the contract gives it: a flag beats the file; the file beats `KEEL_LISTEN`
//! and `KEEL_DATABASE_URL`, which beat the built-in defaults. Every mistake stops start-up with
//! a message naming the key — an unknown key is never silently ignored.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use keel_providers::Continuation;
use keel_tools::{BUILTIN_NAMES, READ_ONLY_NAMES};
use serde::Deserialize;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";
pub const DEFAULT_DATABASE: &str = "sqlite://keel-data/keel.db";

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

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
}

impl FileConfig {
    /// Parses the text of a config file; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    pub name: String,
    /// `openai-chat`, `openai-responses` or `anthropic`.
    pub kind: String,
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// Send `stream_options.include_usage` (openai-chat); some servers reject it.
    #[serde(default = "yes")]
    pub include_usage: bool,
    /// How a cut reply is continued: `prefill` (the server continues the partial reply
    /// natively) or `prompt` (an instruction to continue, with the seam checked). Default:
    /// `prefill` for anthropic, `prompt` otherwise.
    #[serde(default)]
    pub continuation: Option<String>,
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
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub store: bool,
    pub thinking_budget_tokens: Option<u32>,
    /// How long this model may take to send its first stream event; absent: the runs'
    /// `startup_timeout_ms`, scaled for reasoning models.
    pub startup_timeout_ms: Option<u64>,
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
    /// Connections of the database pool; absent: sized to `workers`
    /// ([`RunsConfig::database_connections`]).
    #[serde(rename = "database_connections")]
    pub database_connections_set: Option<u32>,
}

impl Default for RunsConfig {
    fn default() -> Self {
        Self {
            max_steps: 25,
            startup_timeout_ms: 60_000,
            idle_timeout_ms: 60_000,
            retry_max_attempts: 5,
            retry_initial_delay_ms: 1_000,
            retry_max_delay_ms: 60_000,
            workers: 64,
            compaction_threshold: 0.8,
            lease_ms: 30_000,
            queue_max: 20,
            pending_action_timeout_ms: 300_000,
            max_body_bytes: 1024 * 1024,
            database_connections_set: None,
        }
    }
}

impl RunsConfig {
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The database pool's size: as configured, else one connection per four workers,
    /// between 8 and 32 (a run holds a connection only for each write, and the process's
    /// live-part log shares one transaction among all runs; two replicas at the cap stay
    /// within PostgreSQL's default limit of 100 connections).
    pub fn database_connections(&self) -> u32 {
        self.database_connections_set.unwrap_or_else(|| {
            u32::try_from(self.workers.div_ceil(4))
                .unwrap_or(u32::MAX)
                .clamp(8, 32)
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
    /// whose body pauses this long fails with `400`.
    pub header_read_timeout_ms: u64,
    /// Requests being handled at once; beyond it a request is answered `503` at once.
    /// A live event stream counts only until its headers are sent.
    pub max_requests_in_flight: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            sse_max_per_user: 32,
            sse_max_total: 1024,
            header_read_timeout_ms: 30_000,
            max_requests_in_flight: 1024,
        }
    }
}

impl ServerConfig {
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
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
    pub builtin: Vec<String>,
    pub workspace: PathBuf,
    /// The limit on one tool call; MCP servers may set their own.
    pub timeout_ms: u64,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            builtin: READ_ONLY_NAMES
                .iter()
                .map(|&name| name.to_owned())
                .collect(),
            workspace: PathBuf::from("./workspace"),
            timeout_ms: 120_000,
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
}

fn yes() -> bool {
    true
}

/// What the command line gave.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub listen: Option<String>,
    pub database: Option<String>,
    /// Allow a non-loopback listen address with no users configured.
    pub allow_unauthenticated_public: bool,
}

/// A provider ready to be built: its key resolved from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedProvider {
    pub entry: ProviderEntry,
    pub api_key: Option<String>,
}

/// The configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: String,
    pub database: String,
    pub providers: Vec<ResolvedProvider>,
    pub models: Vec<ModelEntry>,
    pub runs: RunsConfig,
    pub mcp_servers: Vec<McpServerEntry>,
    pub tools: ToolsConfig,
    pub server: ServerConfig,
    pub users: Vec<UserEntry>,
    /// No provider was configured: the built-in demo model serves `demo`.
    pub demo: bool,
    pub allow_unauthenticated_public: bool,
    pub source: Option<PathBuf>,
    /// How `run_command` starts commands confined to the workspace (Landlock); set by the
    /// `keel` binary when the kernel offers it, `None` runs them unconfined.
    pub command_sandbox: Option<keel_tools::sandbox::Launcher>,
}

/// Reads the environment; injectable so tests need not touch the process environment.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Config {
    /// Loads the configuration from the file (flag, else `KEEL_CONFIG`, else none), the
    /// flags and the environment.
    pub fn load(overrides: &Overrides, env: &dyn Env) -> Result<Self, ConfigError> {
        let path = overrides
            .config
            .clone()
            .or_else(|| env.var("KEEL_CONFIG").map(PathBuf::from));
        let file = match &path {
            Some(path) => Self::read_file(path)?,
            None => FileConfig::default(),
        };
        Self::resolve(file, path, overrides, env)
    }

    fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        FileConfig::parse(&text, path)
    }

    /// Applies precedence, defaults and validation to a parsed file.
    pub fn resolve(
        file: FileConfig,
        source: Option<PathBuf>,
        overrides: &Overrides,
        env: &dyn Env,
    ) -> Result<Self, ConfigError> {
        let listen = overrides
            .listen
            .clone()
            .or(file.listen)
            .or_else(|| env.var("KEEL_LISTEN"))
            .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let database = overrides
            .database
            .clone()
            .or(file.database)
            .or_else(|| env.var("KEEL_DATABASE_URL"))
            .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        validate_listen(&listen)?;
        validate_database(&database)?;

        let (mut providers, mut models) = (file.providers, file.models);
        if providers.is_empty() && models.is_empty() {
            (providers, models) = providers_from_env(env);
        }
        let providers = resolve_providers(providers, env)?;
        validate_models(&models, &providers)?;
        validate_runs(&file.runs)?;
        validate_mcp(&file.mcp_servers)?;
        validate_tools(&file.tools)?;
        validate_server(&file.server)?;
        validate_users(&file.users)?;
        let demo = providers.is_empty();

        let config = Self {
            listen,
            database,
            providers,
            models,
            runs: file.runs,
            mcp_servers: file.mcp_servers,
            tools: file.tools,
            server: file.server,
            users: file.users,
            demo,
            allow_unauthenticated_public: overrides.allow_unauthenticated_public,
            source,
            command_sandbox: None,
        };
        config.check_exposure()?;
        Ok(config)
    }

    /// Refuses to serve a non-loopback address without users unless explicitly allowed.
    fn check_exposure(&self) -> Result<(), ConfigError> {
        if self.users.is_empty() && !self.allow_unauthenticated_public && !is_loopback(&self.listen)
        {
            return Err(ConfigError::invalid(
                "listen",
                format!(
                    "{} is not a loopback address and no [[users]] are configured; add users or \
                     pass --allow-unauthenticated-public",
                    self.listen
                ),
            ));
        }
        Ok(())
    }

    /// The id of the default model.
    pub fn default_model(&self) -> Option<&str> {
        self.models
            .iter()
            .find(|m| m.default)
            .or_else(|| self.models.first())
            .map(|m| m.id.as_str())
    }
}

fn validate_listen(listen: &str) -> Result<(), ConfigError> {
    listen
        .parse::<std::net::SocketAddr>()
        .map(|_| ())
        .map_err(|e| ConfigError::invalid("listen", format!("`{listen}` is not HOST:PORT ({e})")))
}

fn validate_database(database: &str) -> Result<(), ConfigError> {
    if database.starts_with("sqlite:")
        || database.starts_with("postgres://")
        || database.starts_with("postgresql://")
    {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            "database",
            format!(
                "`{}` must start with sqlite:// or postgres://",
                keel_store::redact_url(database)
            ),
        ))
    }
}

fn is_loopback(listen: &str) -> bool {
    listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback())
}

pub const PROVIDER_KINDS: [&str; 3] = ["openai-chat", "openai-responses", "anthropic"];

fn resolve_providers(
    providers: Vec<ProviderEntry>,
    env: &dyn Env,
) -> Result<Vec<ResolvedProvider>, ConfigError> {
    let mut names = HashSet::new();
    providers
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let key = |field: &str| format!("providers[{i}].{field}");
            if entry.name.trim().is_empty() {
                return Err(ConfigError::invalid(key("name"), "must not be empty"));
            }
            if !names.insert(entry.name.clone()) {
                return Err(ConfigError::invalid(
                    key("name"),
                    format!("duplicate provider `{}`", entry.name),
                ));
            }
            if !PROVIDER_KINDS.contains(&entry.kind.as_str()) {
                return Err(ConfigError::invalid(
                    key("kind"),
                    format!(
                        "`{}` is not one of {}",
                        entry.kind,
                        PROVIDER_KINDS.join(", ")
                    ),
                ));
            }
            if let Some(url) = &entry.base_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return Err(ConfigError::invalid(
                    key("base_url"),
                    format!("`{url}` is not an http(s) URL"),
                ));
            }
            if let Some(continuation) = &entry.continuation {
                match Continuation::parse(continuation) {
                    None => {
                        return Err(ConfigError::invalid(
                            key("continuation"),
                            format!("`{continuation}` is not one of prefill, prompt"),
                        ));
                    }
                    Some(Continuation::Prefill) if entry.kind == "openai-responses" => {
                        return Err(ConfigError::invalid(
                            key("continuation"),
                            "the Responses API cannot continue a partial reply; use prompt",
                        ));
                    }
                    Some(_) => {}
                }
            }
            let api_key = match &entry.api_key_env {
                Some(var) => Some(env.var(var).ok_or_else(|| {
                    ConfigError::invalid(
                        key("api_key_env"),
                        format!("environment variable {var} is not set"),
                    )
                })?),
                None => None,
            };
            Ok(ResolvedProvider { entry, api_key })
        })
        .collect()
}

fn validate_models(
    models: &[ModelEntry],
    providers: &[ResolvedProvider],
) -> Result<(), ConfigError> {
    let mut ids = HashSet::new();
    for (i, model) in models.iter().enumerate() {
        let key = |field: &str| format!("models[{i}].{field}");
        if model.id.trim().is_empty() {
            return Err(ConfigError::invalid(key("id"), "must not be empty"));
        }
        if !ids.insert(model.id.as_str()) {
            return Err(ConfigError::invalid(
                key("id"),
                format!("duplicate model `{}`", model.id),
            ));
        }
        if !providers.iter().any(|p| p.entry.name == model.provider) {
            return Err(ConfigError::invalid(
                key("provider"),
                format!("no provider named `{}`", model.provider),
            ));
        }
        if model.startup_timeout_ms == Some(0) {
            return Err(ConfigError::invalid(
                key("startup_timeout_ms"),
                "must be positive",
            ));
        }
        if model.context_limit == Some(0) {
            return Err(ConfigError::invalid(
                key("context_limit"),
                "must be positive",
            ));
        }
    }
    if models.iter().filter(|m| m.default).count() > 1 {
        return Err(ConfigError::invalid(
            "models.default",
            "more than one model is the default",
        ));
    }
    if !providers.is_empty() && models.is_empty() {
        return Err(ConfigError::invalid(
            "models",
            "providers are configured but no [[models]]",
        ));
    }
    Ok(())
}

fn validate_runs(runs: &RunsConfig) -> Result<(), ConfigError> {
    let positive = [
        ("runs.startup_timeout_ms", runs.startup_timeout_ms),
        ("runs.idle_timeout_ms", runs.idle_timeout_ms),
        ("runs.retry_max_delay_ms", runs.retry_max_delay_ms),
        ("runs.lease_ms", runs.lease_ms),
        (
            "runs.pending_action_timeout_ms",
            runs.pending_action_timeout_ms,
        ),
    ];
    for (key, value) in positive {
        if value == 0 {
            return Err(ConfigError::invalid(key, "must be positive"));
        }
    }
    if runs.retry_max_attempts == 0 {
        return Err(ConfigError::invalid(
            "runs.retry_max_attempts",
            "must be at least 1",
        ));
    }
    if runs.workers == 0 {
        return Err(ConfigError::invalid("runs.workers", "must be at least 1"));
    }
    if runs.database_connections_set.is_some_and(|n| n < 2) {
        return Err(ConfigError::invalid(
            "runs.database_connections",
            "must be at least 2",
        ));
    }
    if !(runs.compaction_threshold > 0.0 && runs.compaction_threshold <= 1.0) {
        return Err(ConfigError::invalid(
            "runs.compaction_threshold",
            "must be in (0, 1]; 1.0 disables automatic compaction",
        ));
    }
    if runs.max_body_bytes < 1024 {
        return Err(ConfigError::invalid(
            "runs.max_body_bytes",
            "must be at least 1024",
        ));
    }
    Ok(())
}

fn validate_mcp(servers: &[McpServerEntry]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, server) in servers.iter().enumerate() {
        let key = |field: &str| format!("mcp_servers[{i}].{field}");
        let valid_name = !server.name.is_empty()
            && server
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(ConfigError::invalid(
                key("name"),
                "use letters, digits, _ and - only",
            ));
        }
        if !names.insert(server.name.as_str()) {
            return Err(ConfigError::invalid(
                key("name"),
                format!("duplicate server `{}`", server.name),
            ));
        }
        match (&server.command, &server.url) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    key("url"),
                    "give either command or url, not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::invalid(
                    key("command"),
                    "give a command (stdio) or a url",
                ));
            }
            _ => {}
        }
        if server.timeout_ms == Some(0) {
            return Err(ConfigError::invalid(
                key("timeout_ms"),
                "must be at least 1",
            ));
        }
        if server.url.is_some() && !server.env_passthrough.is_empty() {
            return Err(ConfigError::invalid(
                key("env_passthrough"),
                "only applies to a command (stdio) server",
            ));
        }
    }
    Ok(())
}

fn validate_tools(tools: &ToolsConfig) -> Result<(), ConfigError> {
    for (i, name) in tools.builtin.iter().enumerate() {
        if !BUILTIN_NAMES.contains(&name.as_str()) {
            return Err(ConfigError::invalid(
                format!("tools.builtin[{i}]"),
                format!("`{name}` is not one of {}", BUILTIN_NAMES.join(", ")),
            ));
        }
    }
    if tools.timeout_ms == 0 {
        return Err(ConfigError::invalid(
            "tools.timeout_ms",
            "must be at least 1",
        ));
    }
    Ok(())
}

fn validate_server(server: &ServerConfig) -> Result<(), ConfigError> {
    for (i, entry) in server.allowed_hosts.iter().enumerate() {
        crate::net::hosts::parse_allowed_entry(entry).map_err(|message| {
            ConfigError::invalid(format!("server.allowed_hosts[{i}]"), message)
        })?;
    }
    let positive = [
        ("server.sse_max_per_user", server.sse_max_per_user),
        ("server.sse_max_total", server.sse_max_total),
        (
            "server.max_requests_in_flight",
            server.max_requests_in_flight,
        ),
    ];
    for (key, value) in positive {
        if value == 0 {
            return Err(ConfigError::invalid(key, "must be at least 1"));
        }
    }
    if server.header_read_timeout_ms == 0 {
        return Err(ConfigError::invalid(
            "server.header_read_timeout_ms",
            "must be positive",
        ));
    }
    Ok(())
}

fn validate_users(users: &[UserEntry]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, user) in users.iter().enumerate() {
        if user.name.trim().is_empty() || !names.insert(user.name.as_str()) {
            return Err(ConfigError::invalid(
                format!("users[{i}].name"),
                "empty or duplicate name",
            ));
        }
        let hex = user.token_sha256.len() == 64
            && user.token_sha256.chars().all(|c| c.is_ascii_hexdigit());
        if !hex {
            return Err(ConfigError::invalid(
                format!("users[{i}].token_sha256"),
                "must be 64 hex digits (use `keel users add NAME`)",
            ));
        }
    }
    Ok(())
}

/// With no file-configured providers, the usual environment variables configure them.
fn providers_from_env(env: &dyn Env) -> (Vec<ProviderEntry>, Vec<ModelEntry>) {
    let mut providers = Vec::new();
    let mut models = Vec::new();
    let model = |id: &str, provider: &str, limit: u64, default: bool| ModelEntry {
        id: id.to_owned(),
        provider: provider.to_owned(),
        model: id.to_owned(),
        context_limit: Some(limit),
        default,
        temperature: None,
        top_p: None,
        max_output_tokens: None,
        reasoning_effort: None,
        store: false,
        thinking_budget_tokens: None,
        startup_timeout_ms: None,
    };
    if env.var("OPENAI_API_KEY").is_some() {
        providers.push(ProviderEntry {
            name: "openai".into(),
            kind: "openai-chat".into(),
            base_url: env.var("OPENAI_BASE_URL"),
            api_key_env: Some("OPENAI_API_KEY".into()),
            include_usage: true,
            continuation: None,
        });
        models.push(model("gpt-4.1", "openai", 1_047_576, true));
        models.push(model("gpt-4.1-mini", "openai", 1_047_576, false));
    }
    if env.var("ANTHROPIC_API_KEY").is_some() {
        let first = providers.is_empty();
        providers.push(ProviderEntry {
            name: "anthropic".into(),
            kind: "anthropic".into(),
            base_url: env.var("ANTHROPIC_BASE_URL"),
            api_key_env: Some("ANTHROPIC_API_KEY".into()),
            include_usage: true,
            continuation: None,
        });
        let mut sonnet = model("claude-sonnet-4-5", "anthropic", 200_000, first);
        sonnet.max_output_tokens = Some(8192);
        models.push(sonnet);
    }
    (providers, models)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeEnv(HashMap<&'static str, &'static str>);

    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| (*v).to_owned())
        }
    }

    fn env(pairs: &[(&'static str, &'static str)]) -> FakeEnv {
        FakeEnv(pairs.iter().copied().collect())
    }

    fn parse(text: &str) -> Result<FileConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    fn resolve(text: &str, env: &FakeEnv) -> Result<Config, ConfigError> {
        Config::resolve(
            parse(text).map_err(|m| ConfigError::invalid("file", m))?,
            None,
            &Overrides::default(),
            env,
        )
    }

    #[test]
    fn embedded_defaults_use_the_demo_model() {
        let config = resolve("", &env(&[])).unwrap();
        assert_eq!(config.listen, DEFAULT_LISTEN);
        assert_eq!(config.database, DEFAULT_DATABASE);
        assert!(config.demo);
        assert_eq!(config.runs, RunsConfig::default());
    }

    #[test]
    fn without_a_tools_table_only_the_read_only_builtins_are_enabled() {
        for text in ["", "[tools]\nworkspace = \"/srv/ws\""] {
            let config = resolve(text, &env(&[])).unwrap();
            assert_eq!(config.tools.builtin, ["read_file", "list_dir"], "{text}");
            assert_eq!(config.tools.timeout(), Duration::from_secs(120));
        }
        let config = resolve(
            "[tools]\nbuiltin = [\"run_command\"]\ntimeout_ms = 500",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(config.tools.builtin, ["run_command"]);
        assert_eq!(config.tools.timeout(), Duration::from_millis(500));
    }

    #[test]
    fn the_contract_example_parses() {
        let text = r#"
listen   = "127.0.0.1:8700"
database = "sqlite://keel-data/keel.db"

[[providers]]
name        = "openai"
kind        = "openai-chat"
base_url    = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"

[[models]]
id            = "gpt-4.1"
provider      = "openai"
model         = "gpt-4.1"
context_limit = 1047576
default       = true
temperature   = 0.2

[runs]
max_steps              = 25
startup_timeout_ms     = 60000
idle_timeout_ms        = 60000
retry_max_attempts     = 5
retry_initial_delay_ms = 1000
retry_max_delay_ms     = 60000
workers                = 64
compaction_threshold   = 0.8

[[mcp_servers]]
name    = "files"
command = "npx"
args    = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/project"]

[server]
allowed_hosts = []

[tools]
builtin   = ["read_file", "write_file", "edit_file", "list_dir", "run_command"]
workspace = "./workspace"
"#;
        let config = resolve(text, &env(&[("OPENAI_API_KEY", "sk-test")])).unwrap();
        assert!(!config.demo);
        assert_eq!(config.providers[0].api_key.as_deref(), Some("sk-test"));
        assert_eq!(config.default_model(), Some("gpt-4.1"));
        assert_eq!(config.mcp_servers[0].args.len(), 3);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = parse("listen = \"127.0.0.1:1\"\nlisten_port = 3").unwrap_err();
        assert!(err.contains("listen_port"), "{err}");
        let err = parse("[runs]\nmax_step = 3").unwrap_err();
        assert!(err.contains("max_step"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("[runs]\nworkers = 0", "runs.workers"),
            (
                "[runs]\ncompaction_threshold = 1.5",
                "runs.compaction_threshold",
            ),
            ("listen = \"nowhere\"", "listen"),
            ("database = \"mysql://x\"", "database"),
            ("[tools]\nbuiltin = [\"rm_rf\"]", "tools.builtin[0]"),
            ("[tools]\ntimeout_ms = 0", "tools.timeout_ms"),
            (
                "[[mcp_servers]]\nname = \"x\"\ncommand = \"y\"\ntimeout_ms = 0",
                "mcp_servers[0].timeout_ms",
            ),
            (
                "[[mcp_servers]]\nname = \"x\"\nurl = \"http://h/\"\nenv_passthrough = [\"A\"]",
                "mcp_servers[0].env_passthrough",
            ),
            (
                "[[providers]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"http://h\"\ncontinuation = \"guess\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
                "providers[0].continuation",
            ),
            (
                "[[providers]]\nname = \"p\"\nkind = \"openai-responses\"\nbase_url = \"http://h\"\ncontinuation = \"prefill\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
                "providers[0].continuation",
            ),
            (
                "[[providers]]\nname = \"p\"\nkind = \"gemini\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
                "providers[0].kind",
            ),
            (
                "[[providers]]\nname = \"p\"\nkind = \"anthropic\"\napi_key_env = \"MISSING_KEY\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
                "providers[0].api_key_env",
            ),
            (
                "[[providers]]\nname = \"p\"\nkind = \"anthropic\"\n[[models]]\nid = \"m\"\nprovider = \"q\"\nmodel = \"m\"",
                "models[0].provider",
            ),
            ("[[mcp_servers]]\nname = \"x\"", "mcp_servers[0].command"),
            (
                "[server]\nallowed_hosts = [\"http://proxy.example\"]",
                "server.allowed_hosts[0]",
            ),
            ("[server]\nsse_max_total = 0", "server.sse_max_total"),
            (
                "[server]\nheader_read_timeout_ms = 0",
                "server.header_read_timeout_ms",
            ),
            (
                "[[users]]\nname = \"a\"\ntoken_sha256 = \"zz\"",
                "users[0].token_sha256",
            ),
        ];
        for (text, key) in cases {
            match resolve(text, &env(&[])) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{text}"),
                other => panic!("{text}: expected an error naming {key}, got {other:?}"),
            }
        }
    }

    #[test]
    fn precedence_flag_then_file_then_env_then_default() {
        let e = env(&[
            ("KEEL_LISTEN", "127.0.0.1:9000"),
            ("KEEL_DATABASE_URL", "sqlite://env.db"),
        ]);
        let from_env = resolve("", &e).unwrap();
        assert_eq!(from_env.listen, "127.0.0.1:9000");
        assert_eq!(from_env.database, "sqlite://env.db");
        let from_file = resolve("listen = \"127.0.0.1:9100\"", &e).unwrap();
        assert_eq!(from_file.listen, "127.0.0.1:9100");
        let flags = Overrides {
            listen: Some("127.0.0.1:9200".into()),
            ..Overrides::default()
        };
        let from_flag = Config::resolve(
            parse("listen = \"127.0.0.1:9100\"").unwrap(),
            None,
            &flags,
            &e,
        )
        .unwrap();
        assert_eq!(from_flag.listen, "127.0.0.1:9200");
    }

    #[test]
    fn public_listen_needs_users_or_an_explicit_flag() {
        let err = resolve("listen = \"0.0.0.0:8700\"", &env(&[])).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { ref key, .. } if key == "listen"));
        let flags = Overrides {
            allow_unauthenticated_public: true,
            ..Overrides::default()
        };
        assert!(
            Config::resolve(
                parse("listen = \"0.0.0.0:8700\"").unwrap(),
                None,
                &flags,
                &env(&[])
            )
            .is_ok()
        );
        let with_user = format!(
            "listen = \"0.0.0.0:8700\"\n[[users]]\nname = \"alice\"\ntoken_sha256 = \"{}\"",
            "a".repeat(64)
        );
        assert!(resolve(&with_user, &env(&[])).is_ok());
    }

    #[test]
    fn the_database_pool_is_sized_to_the_workers_unless_set() {
        let runs = |workers, set| RunsConfig {
            workers,
            database_connections_set: set,
            ..RunsConfig::default()
        };
        assert_eq!(runs(1, None).database_connections(), 8);
        assert_eq!(runs(64, None).database_connections(), 16);
        assert_eq!(runs(1000, None).database_connections(), 32);
        assert_eq!(runs(1000, Some(50)).database_connections(), 50);
        let config = resolve("[runs]\ndatabase_connections = 12", &env(&[])).unwrap();
        assert_eq!(config.runs.database_connections(), 12);
        assert!(resolve("[runs]\ndatabase_connections = 1", &env(&[])).is_err());
    }

    #[test]
    fn providers_come_from_the_usual_environment_variables() {
        let config = resolve(
            "",
            &env(&[
                ("ANTHROPIC_API_KEY", "k"),
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:1"),
            ]),
        )
        .unwrap();
        assert!(!config.demo);
        assert_eq!(config.providers[0].entry.kind, "anthropic");
        assert_eq!(
            config.providers[0].entry.base_url.as_deref(),
            Some("http://127.0.0.1:1")
        );
        assert_eq!(config.default_model(), Some("claude-sonnet-4-5"));
    }

    const KEYS: &[&str] = &[
        "api_key_env",
        "args",
        "base_url",
        "builtin",
        "command",
        "compaction_threshold",
        "context_limit",
        "continuation",
        "database",
        "database_connections",
        "default",
        "env",
        "id",
        "idle_timeout_ms",
        "include_usage",
        "kind",
        "lease_ms",
        "listen",
        "max_body_bytes",
        "max_output_tokens",
        "max_steps",
        "model",
        "name",
        "pending_action_timeout_ms",
        "provider",
        "queue_max",
        "reasoning_effort",
        "retry_initial_delay_ms",
        "retry_max_attempts",
        "retry_max_delay_ms",
        "startup_timeout_ms",
        "store",
        "temperature",
        "thinking_budget_tokens",
        "token_sha256",
        "top_p",
        "url",
        "workers",
        "workspace",
        "allowed_hosts",
        "sse_max_per_user",
        "sse_max_total",
        "header_read_timeout_ms",
        "max_requests_in_flight",
    ];

    /// Lines a config file is made of, so generated files get past the TOML parser and into
    /// validation.
    fn config_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just("[[providers]]".to_owned()),
            Just("[[models]]".to_owned()),
            Just("[runs]".to_owned()),
            Just("[tools]".to_owned()),
            Just("[server]".to_owned()),
            Just("[[users]]".to_owned()),
            Just("[[mcp_servers]]".to_owned()),
            (
                proptest::sample::select(KEYS),
                prop_oneof![
                    "-?[0-9]{1,21}",
                    "-?[0-9]{1,4}\\.[0-9]{1,4}(e[0-9]{1,4})?",
                    "\"[ -~]{0,24}\"",
                    Just("true".to_owned()),
                    Just("[]".to_owned()),
                    Just("inf".to_owned()),
                    Just("nan".to_owned()),
                ],
            )
                .prop_map(|(k, v)| format!("{k} = {v}")),
            "\\PC{0,40}",
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn any_text_is_a_config_or_an_error(
            lines in proptest::collection::vec(config_line(), 0..24),
        ) {
            let text = lines.join("\n");
            if let Ok(file) = FileConfig::parse(&text, Path::new("prop.toml")) {
                let _ = Config::resolve(
                    file,
                    None,
                    &Overrides::default(),
                    &env(&[("OPENAI_API_KEY", "k"), ("KEY", "v")]),
                );
            }
        }
    }
}
