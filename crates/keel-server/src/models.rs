//! The models this daemon offers, built from configuration.
//!
//! With no provider configured, the built-in `demo` model is the mock provider started
//! in-process on a loopback port and reached through the real OpenAI-chat adapter, so a
//! fresh install streams, retries and calls tools exactly as it would against a real server.

use std::collections::HashMap;
use std::sync::Arc;

use keel_core::{CallOptions, LanguageModel, ToolDefinition};
use keel_providers::{ProviderKind, ProviderSettings, build_model};

use crate::config::{Config, ModelEntry};

/// One model clients can pick.
#[derive(Clone)]
pub struct ModelHandle {
    pub id: String,
    pub provider: String,
    pub model: Arc<dyn LanguageModel>,
    pub context_limit: Option<u64>,
    pub options: CallOptions,
    /// The model's own start-up timeout (`startup_timeout_ms`), used as is.
    pub startup_timeout: Option<std::time::Duration>,
    /// What its tokens cost (`price`); `None`: its usage is recorded without a cost.
    pub price: Option<keel_core::Price>,
    /// Tools the provider runs itself (`provider_tools`), offered with every call.
    pub provider_tools: Vec<ToolDefinition>,
}

/// Why models could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    #[error("config key `models[{index}]`: {source}")]
    Build {
        index: usize,
        source: keel_providers::ProviderBuildError,
    },
    #[error("config key `models[{index}].provider_tools`: {source}")]
    ProviderTool {
        index: usize,
        source: keel_providers::ProviderToolError,
    },
    #[error("starting the built-in demo model failed: {0}")]
    Demo(std::io::Error),
}

/// Every model by id, and the default one. Cloning it is cheap: the HTTP state is cloned
/// for every request.
#[derive(Clone)]
pub struct ModelRegistry {
    models: Arc<HashMap<String, ModelHandle>>,
    order: Arc<[String]>,
    default: Arc<str>,
    /// Keeps the in-process demo server alive as long as the registry lives.
    _demo: Option<Arc<keel_mock::MockServer>>,
}

impl ModelRegistry {
    /// Builds every configured model (or the demo model).
    pub async fn build(config: &Config) -> Result<Self, ModelsError> {
        let http = keel_providers::http_client()
            .map_err(|source| ModelsError::Build { index: 0, source })?;
        if config.demo {
            let server = keel_mock::spawn(keel_mock::MockConfig::human_pace())
                .await
                .map_err(ModelsError::Demo)?;
            let mut settings = ProviderSettings::new("demo", ProviderKind::OpenAiChat);
            settings.base_url = Some(server.base_url());
            let model = build_model(&settings, "demo", http)
                .map_err(|source| ModelsError::Build { index: 0, source })?;
            let handle = ModelHandle {
                id: "demo".into(),
                provider: "demo".into(),
                model,
                context_limit: Some(128_000),
                options: CallOptions::default(),
                startup_timeout: None,
                price: None,
                provider_tools: Vec::new(),
            };
            return Ok(Self::from_handles(
                vec![handle],
                "demo",
                Some(Arc::new(server)),
            ));
        }
        let mut handles = Vec::new();
        for (index, entry) in config.models.iter().enumerate() {
            let Some(provider) = config
                .providers
                .iter()
                .find(|p| p.entry.name == entry.provider)
            else {
                continue;
            };
            let mut settings =
                ProviderSettings::new(provider.entry.name.clone(), provider.entry.kind);
            settings.base_url = provider.entry.base_url.clone();
            settings.api_key = provider.api_key.clone();
            settings.include_usage = provider.entry.include_usage;
            settings.continuation = entry.continuation.or(provider.entry.continuation);
            settings.output_limit_field = provider.entry.output_limit_field.unwrap_or_default();
            settings.reasoning_content = provider.entry.reasoning_content.unwrap_or_default();
            let model = build_model(&settings, &entry.model, http.clone())
                .map_err(|source| ModelsError::Build { index, source })?;
            let provider_tools = entry
                .provider_tools
                .iter()
                .map(|name| keel_providers::provider_tool(provider.entry.kind, name))
                .collect::<Result<_, _>>()
                .map_err(|source| ModelsError::ProviderTool { index, source })?;
            handles.push(ModelHandle {
                id: entry.id.clone(),
                provider: entry.provider.clone(),
                model,
                context_limit: entry.context_limit,
                options: call_options(entry),
                startup_timeout: entry
                    .startup_timeout_ms
                    .map(std::time::Duration::from_millis),
                price: entry.price,
                provider_tools,
            });
        }
        let default = config.default_model().unwrap_or_default().to_owned();
        Ok(Self::from_handles(handles, &default, None))
    }

    /// A registry of given models (tests, benchmarks).
    pub fn from_handles(
        handles: Vec<ModelHandle>,
        default: &str,
        demo: Option<Arc<keel_mock::MockServer>>,
    ) -> Self {
        let order = handles.iter().map(|h| h.id.clone()).collect();
        Self {
            models: Arc::new(handles.into_iter().map(|h| (h.id.clone(), h)).collect()),
            order,
            default: default.into(),
            _demo: demo,
        }
    }

    pub fn get(&self, id: &str) -> Option<&ModelHandle> {
        self.models.get(id)
    }

    pub fn default_id(&self) -> &str {
        &self.default
    }

    /// Models in configuration order.
    pub fn list(&self) -> impl Iterator<Item = &ModelHandle> {
        self.order.iter().filter_map(|id| self.models.get(id))
    }
}

fn call_options(entry: &ModelEntry) -> CallOptions {
    CallOptions {
        temperature: entry.temperature,
        top_p: entry.top_p,
        max_output_tokens: entry.max_output_tokens,
        reasoning_effort: entry.reasoning_effort,
        thinking_budget_tokens: entry.thinking_budget_tokens,
        thinking: entry.thinking,
        effort: entry.effort,
        store: entry.store,
        ..CallOptions::default()
    }
}
