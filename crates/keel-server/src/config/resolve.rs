//! From a parsed file to the configuration the daemon runs with: the file path (flag, else
//! `KEEL_CONFIG`), precedence of flags over the file over the environment over the built-in
//! defaults, providers from the usual environment variables when the file names none, and API
//! keys looked up by the variable each provider names.

use std::collections::HashSet;
use std::path::PathBuf;

use keel_providers::ProviderKind;

use super::validate;
use super::{
    Config, ConfigError, FileConfig, LogFormat, ModelEntry, ProviderEntry, ResolvedProvider,
};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";
pub const DEFAULT_DATABASE: &str = "sqlite://keel-data/keel.db";

/// What the command line gave.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub listen: Option<String>,
    pub database: Option<String>,
    /// Allow a non-loopback listen address with no users configured.
    pub allow_unauthenticated_public: bool,
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
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        Self::resolve(file, path, overrides, env)
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
        validate::listen(&listen)?;
        validate::database(&database)?;

        let (mut providers, mut models) = (file.providers, file.models);
        if providers.is_empty() && models.is_empty() {
            (providers, models) = providers_from_env(env);
        }
        let providers = resolve_providers(providers, env)?;
        validate::models(&models, &providers)?;
        validate::runs(&file.runs)?;
        validate::title_model(&file.runs, &models)?;
        validate::mcp(&file.mcp_servers)?;
        validate::tools(&file.tools)?;
        validate::server(&file.server)?;
        validate::users(&file.users)?;
        let telemetry = super::telemetry::resolve(&file.telemetry, env)?;
        let log_format = match file.log.format {
            Some(format) => format,
            None => match env.var("KEEL_LOG_FORMAT") {
                Some(value) => LogFormat::parse(&value).ok_or_else(|| {
                    ConfigError::invalid(
                        "KEEL_LOG_FORMAT",
                        format!("`{value}` is not `text` or `json`"),
                    )
                })?,
                None => LogFormat::Text,
            },
        };
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
            telemetry,
            log_format,
            demo,
            allow_unauthenticated_public: overrides.allow_unauthenticated_public,
            source,
            command_sandbox: None,
        };
        Ok(config)
    }
}

/// Checks each provider and looks up its API key, in file order, so the first mistake in the
/// file is the one reported.
fn resolve_providers(
    providers: Vec<ProviderEntry>,
    env: &dyn Env,
) -> Result<Vec<ResolvedProvider>, ConfigError> {
    let mut names = HashSet::new();
    providers
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            validate::provider(i, &entry, &mut names)?;
            let api_key = match &entry.api_key_env {
                Some(var) => Some(env.var(var).ok_or_else(|| {
                    ConfigError::invalid(
                        format!("providers[{i}].api_key_env"),
                        format!("environment variable {var} is not set"),
                    )
                })?),
                None => None,
            };
            Ok(ResolvedProvider { entry, api_key })
        })
        .collect()
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
        thinking: None,
        effort: None,
        continuation: None,
        startup_timeout_ms: None,
        price: None,
        provider_tools: Vec::new(),
    };
    if env.var("OPENAI_API_KEY").is_some() {
        providers.push(ProviderEntry {
            name: "openai".into(),
            kind: ProviderKind::OpenAiChat,
            base_url: env.var("OPENAI_BASE_URL"),
            api_key_env: Some("OPENAI_API_KEY".into()),
            include_usage: true,
            continuation: None,
            output_limit_field: None,
            reasoning_content: None,
        });
        models.push(model("gpt-4.1", "openai", 1_047_576, true));
        models.push(model("gpt-4.1-mini", "openai", 1_047_576, false));
    }
    if env.var("ANTHROPIC_API_KEY").is_some() {
        let first = providers.is_empty();
        providers.push(ProviderEntry {
            name: "anthropic".into(),
            kind: ProviderKind::Anthropic,
            base_url: env.var("ANTHROPIC_BASE_URL"),
            api_key_env: Some("ANTHROPIC_API_KEY".into()),
            include_usage: true,
            continuation: None,
            output_limit_field: None,
            reasoning_content: None,
        });
        let mut sonnet = model("claude-sonnet-4-5", "anthropic", 200_000, first);
        sonnet.max_output_tokens = Some(8192);
        models.push(sonnet);
    }
    // Google's SDKs read GEMINI_API_KEY, else GOOGLE_API_KEY.
    let gemini_key = ["GEMINI_API_KEY", "GOOGLE_API_KEY"]
        .into_iter()
        .find(|var| env.var(var).is_some());
    if let Some(var) = gemini_key {
        let first = providers.is_empty();
        providers.push(ProviderEntry {
            name: "gemini".into(),
            kind: ProviderKind::Gemini,
            base_url: env.var("GEMINI_BASE_URL"),
            api_key_env: Some(var.into()),
            include_usage: true,
            continuation: None,
            output_limit_field: None,
            reasoning_content: None,
        });
        models.push(model("gemini-2.5-flash", "gemini", 1_048_576, first));
    }
    (providers, models)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunsConfig;
    use crate::config::testing::{env, parse, resolve};

    #[test]
    fn embedded_defaults_use_the_demo_model() {
        let config = resolve("", &env(&[])).unwrap();
        assert_eq!(config.listen, DEFAULT_LISTEN);
        assert_eq!(config.database, DEFAULT_DATABASE);
        assert!(config.demo);
        assert_eq!(config.runs, RunsConfig::default());
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
        assert_eq!(config.providers[0].entry.kind, ProviderKind::Anthropic);
        assert_eq!(
            config.providers[0].entry.base_url.as_deref(),
            Some("http://127.0.0.1:1")
        );
        assert_eq!(config.default_model(), Some("claude-sonnet-4-5"));
    }

    #[test]
    fn a_google_api_key_alone_configures_gemini() {
        let config = resolve("", &env(&[("GOOGLE_API_KEY", "k")])).unwrap();
        let gemini = &config.providers[0];
        assert_eq!(gemini.entry.kind, ProviderKind::Gemini);
        assert_eq!(gemini.entry.api_key_env.as_deref(), Some("GOOGLE_API_KEY"));
        assert_eq!(gemini.api_key.as_deref(), Some("k"));
        assert_eq!(config.default_model(), Some("gemini-2.5-flash"));
    }
}
