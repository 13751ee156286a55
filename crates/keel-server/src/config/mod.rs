//! The daemon's configuration: the TOML file, flags and environment of the public contract.
//!
//! Precedence: a flag beats the file; the file beats `KEEL_LISTEN` and `KEEL_DATABASE_URL`,
//! which beat the built-in defaults. Every mistake stops start-up with a message naming the
//! key — an unknown key is never silently ignored.
//!
//! - [`file`] — the file format: serde types, the defaults of missing tables and keys.
//! - [`resolve`] — precedence of flags, file and environment; providers from the usual
//!   environment variables; API keys looked up.
//! - [`validate`] — the checks each key must pass, each error naming its key.
//! - [`telemetry`] — `[telemetry]` and the standard OpenTelemetry variables.

mod file;
mod resolve;
pub mod telemetry;
mod validate;

use std::path::PathBuf;

pub use file::{
    FileConfig, LogConfig, LogFormat, McpServerEntry, ModelEntry, ProviderEntry, RunsConfig,
    ServerConfig, ToolsConfig, UserEntry,
};
pub use resolve::{DEFAULT_DATABASE, DEFAULT_LISTEN, Env, Overrides, ProcessEnv};
pub use telemetry::{Protocol, Telemetry};

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
    /// Traces exported over OTLP; `None`: telemetry is off.
    pub telemetry: Option<Telemetry>,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// No provider was configured: the built-in demo model serves `demo`.
    pub demo: bool,
    pub allow_unauthenticated_public: bool,
    pub source: Option<PathBuf>,
    /// How `run_command` starts commands confined to the workspace (Landlock); set by the
    /// `keel` binary when the kernel offers it, `None` runs them unconfined.
    pub command_sandbox: Option<keel_tools::sandbox::Launcher>,
}

impl Config {
    /// The id of the default model.
    pub fn default_model(&self) -> Option<&str> {
        self.models
            .iter()
            .find(|m| m.default)
            .or_else(|| self.models.first())
            .map(|m| m.id.as_str())
    }
}

/// Helpers the submodules' tests share: an environment given as pairs, a file resolved from
/// text.
#[cfg(test)]
mod testing {
    use std::collections::HashMap;

    use super::{Config, ConfigError, Env, FileConfig, Overrides};

    pub(super) struct FakeEnv(HashMap<&'static str, &'static str>);

    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| (*v).to_owned())
        }
    }

    pub(super) fn env(pairs: &[(&'static str, &'static str)]) -> FakeEnv {
        FakeEnv(pairs.iter().copied().collect())
    }

    pub(super) fn parse(text: &str) -> Result<FileConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    pub(super) fn resolve(text: &str, env: &FakeEnv) -> Result<Config, ConfigError> {
        Config::resolve(
            parse(text).map_err(|m| ConfigError::invalid("file", m))?,
            None,
            &Overrides::default(),
            env,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::testing::env;
    use super::*;

    const KEYS: &[&str] = &[
        "ai_sdk_max_body_bytes",
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
        "import_max_body_bytes",
        "include_usage",
        "kind",
        "lease_ms",
        "listen",
        "max_body_bytes",
        "max_output_tokens",
        "max_steps",
        "model",
        "name",
        "output_limit_field",
        "pending_action_timeout_ms",
        "provider",
        "provider_tools",
        "queue_max",
        "reasoning_content",
        "reasoning_effort",
        "retry_initial_delay_ms",
        "retry_max_attempts",
        "retry_max_delay_ms",
        "startup_timeout_ms",
        "store",
        "temperature",
        "thinking_budget_tokens",
        "thinking",
        "effort",
        "token_sha256",
        "top_p",
        "url",
        "workers",
        "workspace",
        "enabled",
        "endpoint",
        "protocol",
        "service_name",
        "capture_content",
        "sample_ratio",
        "format",
        "allowed_hosts",
        "sse_max_per_user",
        "sse_max_total",
        "header_read_timeout_ms",
        "max_requests_in_flight",
        "sse_write_interval_ms",
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
            Just("[telemetry]".to_owned()),
            Just("[log]".to_owned()),
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
