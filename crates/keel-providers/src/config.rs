//! What the daemon builds a model from: the provider kind, its settings, and
//! [`build_model`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use keel_core::LanguageModel;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::anthropic::Anthropic;
use crate::gemini::Gemini;
use crate::http::{Endpoint, ErrorContext};
use crate::openai_chat::{ChatRequestOptions, OpenAiChat};
use crate::openai_responses::OpenAiResponses;

/// Base URLs follow the official SDKs: OpenAI's includes the API version (`/v1`), Anthropic's
/// is the bare host (what `ANTHROPIC_BASE_URL` holds for Anthropic's SDKs), the adapter adding
/// `v1/messages`.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Gemini's includes the API version, as the `google-genai` SDKs build it.
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProviderKind {
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    #[serde(rename = "anthropic")]
    Anthropic,
    #[serde(rename = "gemini")]
    Gemini,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        keel_core::names::serde_name(&self)
    }

    /// How `model` continues a cut reply unless configured otherwise. Anthropic continues a
    /// final assistant turn natively, but Claude 4.6 and later refuse it
    /// ([`keel_core::claude::refuses_prefill`]); Chat Completions servers differ, so they are
    /// asked by instruction; the Responses API cannot continue a partial reply at all; Gemini
    /// documents no continuation of a final model turn ([`crate::gemini`]).
    pub fn default_continuation(self, model: &str) -> Continuation {
        match self {
            ProviderKind::Anthropic if !keel_core::claude::refuses_prefill(model) => {
                Continuation::Prefill
            }
            ProviderKind::Anthropic
            | ProviderKind::OpenAiChat
            | ProviderKind::OpenAiResponses
            | ProviderKind::Gemini => Continuation::Prompt,
        }
    }

    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAiChat | ProviderKind::OpenAiResponses => OPENAI_BASE_URL,
            ProviderKind::Anthropic => ANTHROPIC_BASE_URL,
            ProviderKind::Gemini => GEMINI_BASE_URL,
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a partial reply is continued after a cut stream (R1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Continuation {
    /// The server continues the trailing assistant message natively: Anthropic's final
    /// assistant turn; for Chat Completions servers the request ends with the partial
    /// reply as the assistant message, marked `prefix: true` (DeepSeek) with
    /// `continue_final_message: true` and `add_generation_prompt: false` (vLLM); llama.cpp's
    /// server continues a trailing assistant message as it is.
    Prefill,
    /// The partial reply is followed by an instruction to continue; the loop checks the
    /// seam and restarts the step when the model starts over.
    Prompt,
}

impl Continuation {
    pub fn as_str(self) -> &'static str {
        keel_core::names::serde_name(&self)
    }
}

/// The request field that carries a Chat Completions reply's output limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputLimitField {
    /// OpenAI's current field, the only one its reasoning models (o-series, gpt-5) take,
    /// on OpenAI itself, on Azure OpenAI and behind gateways alike
    /// (<https://platform.openai.com/docs/api-reference/chat/create>, `max_tokens`:
    /// "deprecated ... not compatible with o-series models"); Groq, Cerebras and vLLM
    /// take it too.
    #[default]
    MaxCompletionTokens,
    /// The older field, for servers that know no other (DeepSeek, llama.cpp, Ollama).
    MaxTokens,
}

impl OutputLimitField {
    pub fn as_str(self) -> &'static str {
        keel_core::names::serde_name(&self)
    }
}

/// Whether a Chat Completions assistant turn's reasoning goes back to the server as
/// `reasoning_content`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningContent {
    /// Never sent: OpenAI streams no reasoning on this API, and some servers refuse the
    /// field outright (Cerebras: "property '...reasoning_content' is unsupported").
    #[default]
    Omit,
    /// Sent with every turn that reasoned or called tools, as DeepSeek's thinking mode
    /// requires of tool-calling turns (<https://api-docs.deepseek.com/guides/thinking_mode>).
    Send,
}

impl ReasoningContent {
    pub fn as_str(self) -> &'static str {
        keel_core::names::serde_name(&self)
    }
}

/// One configured provider, with its API key already resolved from the environment.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSettings {
    pub name: String,
    pub kind: ProviderKind,
    /// `None` uses the kind's official endpoint.
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub api_key: Option<String>,
    /// OpenAI Chat Completions: ask for a final usage chunk with
    /// `stream_options.include_usage`. Some compatible servers reject the option.
    #[serde(default = "default_true")]
    pub include_usage: bool,
    /// Sent with every request.
    #[serde(default)]
    pub extra_headers: BTreeMap<String, String>,
    /// `None` uses the default for the kind and model ([`ProviderKind::default_continuation`]).
    /// The daemon puts a model's own setting here, else its provider's.
    #[serde(default)]
    pub continuation: Option<Continuation>,
    /// Chat Completions: the field of the output limit.
    #[serde(default)]
    pub output_limit_field: OutputLimitField,
    /// Chat Completions: whether reasoning goes back as `reasoning_content`.
    #[serde(default)]
    pub reasoning_content: ReasoningContent,
}

fn default_true() -> bool {
    true
}

impl ProviderSettings {
    pub fn new(name: impl Into<String>, kind: ProviderKind) -> Self {
        Self {
            name: name.into(),
            kind,
            base_url: None,
            api_key: None,
            include_usage: true,
            extra_headers: BTreeMap::new(),
            continuation: None,
            output_limit_field: OutputLimitField::default(),
            reasoning_content: ReasoningContent::default(),
        }
    }

    /// How `model` of this provider continues a cut reply.
    pub fn continuation(&self, model: &str) -> Continuation {
        self.continuation
            .unwrap_or_else(|| self.kind.default_continuation(model))
    }

    pub fn base_url(&self) -> &str {
        self.base_url
            .as_deref()
            .unwrap_or_else(|| self.kind.default_base_url())
    }
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("include_usage", &self.include_usage)
            .field("continuation", &self.continuation)
            .field("output_limit_field", &self.output_limit_field)
            .field("reasoning_content", &self.reasoning_content)
            .field(
                "extra_headers",
                &self.extra_headers.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ProviderSettings {
    /// Providers configured by the usual environment variables: `openai` (Chat Completions)
    /// from `OPENAI_API_KEY` / `OPENAI_BASE_URL`, and `anthropic` from `ANTHROPIC_API_KEY` /
    /// `ANTHROPIC_BASE_URL`, and `gemini` from `GEMINI_API_KEY` (else `GOOGLE_API_KEY`, the
    /// names Google's SDKs read) / `GEMINI_BASE_URL`. A provider appears when its key or its base URL is set; empty
    /// values count as unset. `var` looks a variable up, e.g. `|k| std::env::var(k).ok()`.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Vec<ProviderSettings> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let mut found = Vec::new();
        for (name, kind, keys, url) in [
            (
                "openai",
                ProviderKind::OpenAiChat,
                &["OPENAI_API_KEY"][..],
                "OPENAI_BASE_URL",
            ),
            (
                "anthropic",
                ProviderKind::Anthropic,
                &["ANTHROPIC_API_KEY"][..],
                "ANTHROPIC_BASE_URL",
            ),
            (
                "gemini",
                ProviderKind::Gemini,
                &["GEMINI_API_KEY", "GOOGLE_API_KEY"][..],
                "GEMINI_BASE_URL",
            ),
        ] {
            let api_key = keys.iter().find_map(|key| get(key));
            let base_url = get(url);
            if api_key.is_some() || base_url.is_some() {
                let mut settings = ProviderSettings::new(name, kind);
                settings.api_key = api_key;
                settings.base_url = base_url;
                found.push(settings);
            }
        }
        found
    }
}

/// A client suited to streaming model replies: bounded connection set-up, TCP and HTTP/2
/// keep-alive so a silently dead connection is noticed, and no overall request timeout,
/// since a reply may stream for many minutes (stalls are the caller's to detect). TLS as
/// [`crate::tls`] sets it up.
pub fn http_client() -> Result<reqwest::Client, ProviderBuildError> {
    crate::tls::client_builder()
        .map_err(|e| ProviderBuildError::HttpClient(e.to_string()))?
        .connect_timeout(Duration::from_secs(30))
        .tcp_keepalive(Duration::from_secs(30))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .http2_keep_alive_while_idle(true)
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| ProviderBuildError::HttpClient(e.to_string()))
}

/// Why a model could not be built from its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderBuildError {
    #[error("provider {provider}: invalid base_url {url:?}: {reason}")]
    InvalidBaseUrl {
        provider: String,
        url: String,
        reason: String,
    },
    #[error("provider {provider}: the official {kind} endpoint needs an API key")]
    MissingApiKey {
        provider: String,
        kind: ProviderKind,
    },
    #[error("provider {provider}: the API key is not a valid header value")]
    InvalidApiKey { provider: String },
    #[error("provider {provider}: invalid extra header {header:?}")]
    InvalidHeader { provider: String, header: String },
    #[error("cannot create the HTTP client: {0}")]
    HttpClient(String),
    #[error(
        "provider {provider}: the {kind} protocol cannot continue a partial reply natively; use continuation = \"prompt\""
    )]
    PrefillUnsupported {
        provider: String,
        kind: ProviderKind,
    },
}

/// Builds the model `upstream_model` of a provider. `http` is shared by all models; give it
/// connect timeouts but no overall request timeout, since replies stream for minutes.
pub fn build_model(
    settings: &ProviderSettings,
    upstream_model: &str,
    http: reqwest::Client,
) -> Result<Arc<dyn LanguageModel>, ProviderBuildError> {
    let base_url = settings.base_url();
    let parsed = reqwest::Url::parse(base_url).map_err(|e| ProviderBuildError::InvalidBaseUrl {
        provider: settings.name.clone(),
        url: base_url.to_owned(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ProviderBuildError::InvalidBaseUrl {
            provider: settings.name.clone(),
            url: base_url.to_owned(),
            reason: "the scheme must be http or https".to_owned(),
        });
    }
    if settings.base_url.is_none() && settings.api_key.is_none() {
        return Err(ProviderBuildError::MissingApiKey {
            provider: settings.name.clone(),
            kind: settings.kind,
        });
    }
    let prefill = settings.continuation(upstream_model) == Continuation::Prefill;
    if prefill
        && matches!(
            settings.kind,
            ProviderKind::OpenAiResponses | ProviderKind::Gemini
        )
    {
        return Err(ProviderBuildError::PrefillUnsupported {
            provider: settings.name.clone(),
            kind: settings.kind,
        });
    }
    let (base_url, had_version) = endpoint_base(settings.kind, base_url);
    if had_version {
        tracing::warn!(provider = %settings.name, base_url = %settings.base_url(),
            "an Anthropic base_url is the bare host, as for Anthropic's SDKs; the trailing /v1 is ignored");
    }
    let endpoint = Endpoint {
        ctx: ErrorContext::new(&settings.name, upstream_model),
        base_url,
        headers: headers(settings)?,
        http,
    };
    Ok(match settings.kind {
        ProviderKind::OpenAiChat => Arc::new(OpenAiChat::new(
            endpoint,
            ChatRequestOptions {
                include_usage: settings.include_usage,
                output_limit: settings.output_limit_field,
                reasoning_content: settings.reasoning_content,
                prefill,
            },
        )),
        ProviderKind::OpenAiResponses => Arc::new(OpenAiResponses::new(endpoint)),
        ProviderKind::Anthropic => Arc::new(Anthropic::new(endpoint).with_prefill(prefill)),
        ProviderKind::Gemini => Arc::new(Gemini::new(endpoint)),
    })
}

/// The base every request path is appended to, and whether a trailing `/v1` was dropped from
/// an Anthropic base URL (Anthropic's SDKs take the bare host; a `/v1` copied from an
/// OpenAI-style setting is accepted and ignored).
pub fn endpoint_base(kind: ProviderKind, base_url: &str) -> (String, bool) {
    let trimmed = base_url.trim_end_matches('/');
    match kind {
        ProviderKind::Anthropic => match trimmed.strip_suffix("/v1") {
            Some(bare) => (bare.to_owned(), true),
            None => (trimmed.to_owned(), false),
        },
        ProviderKind::OpenAiChat | ProviderKind::OpenAiResponses | ProviderKind::Gemini => {
            (trimmed.to_owned(), false)
        }
    }
}

fn headers(settings: &ProviderSettings) -> Result<HeaderMap, ProviderBuildError> {
    let mut map = HeaderMap::new();
    if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
        let invalid = || ProviderBuildError::InvalidApiKey {
            provider: settings.name.clone(),
        };
        match settings.kind {
            ProviderKind::Anthropic => {
                let mut value = HeaderValue::from_str(key).map_err(|_| invalid())?;
                value.set_sensitive(true);
                map.insert(HeaderName::from_static("x-api-key"), value);
            }
            ProviderKind::Gemini => {
                let mut value = HeaderValue::from_str(key).map_err(|_| invalid())?;
                value.set_sensitive(true);
                map.insert(HeaderName::from_static("x-goog-api-key"), value);
            }
            ProviderKind::OpenAiChat | ProviderKind::OpenAiResponses => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| invalid())?;
                value.set_sensitive(true);
                map.insert(AUTHORIZATION, value);
            }
        }
    }
    if settings.kind == ProviderKind::Anthropic {
        map.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(crate::anthropic::API_VERSION),
        );
    }
    for (name, value) in &settings.extra_headers {
        let invalid = || ProviderBuildError::InvalidHeader {
            provider: settings.name.clone(),
            header: name.clone(),
        };
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
        let value = HeaderValue::from_str(value).map_err(|_| invalid())?;
        map.insert(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_4_6_and_later_continue_by_instruction_unless_configured() {
        let anthropic = ProviderSettings::new("a", ProviderKind::Anthropic);
        assert_eq!(
            anthropic.continuation("claude-sonnet-4-6"),
            Continuation::Prompt
        );
        assert_eq!(
            anthropic.continuation("claude-opus-4-7"),
            Continuation::Prompt
        );
        assert_eq!(
            anthropic.continuation("claude-sonnet-4-5"),
            Continuation::Prefill
        );
        assert_eq!(anthropic.continuation("mock"), Continuation::Prefill);
        let mut configured = anthropic.clone();
        configured.continuation = Some(Continuation::Prefill);
        assert_eq!(
            configured.continuation("claude-sonnet-4-6"),
            Continuation::Prefill,
            "a configured value wins; the 400 teaches the rest"
        );
        let chat = ProviderSettings::new("c", ProviderKind::OpenAiChat);
        assert_eq!(chat.continuation("claude-sonnet-4-5"), Continuation::Prompt);
    }

    #[test]
    fn base_urls_follow_the_official_sdks() {
        let base = |kind, url| endpoint_base(kind, url);
        assert_eq!(
            base(ProviderKind::Anthropic, "https://api.anthropic.com"),
            ("https://api.anthropic.com".to_owned(), false)
        );
        assert_eq!(
            base(
                ProviderKind::Anthropic,
                "https://proxy.example/anthropic/v1/"
            ),
            ("https://proxy.example/anthropic".to_owned(), true)
        );
        assert_eq!(
            base(ProviderKind::OpenAiChat, "http://127.0.0.1:8080/v1/"),
            ("http://127.0.0.1:8080/v1".to_owned(), false)
        );
        assert_eq!(
            base(ProviderKind::OpenAiResponses, OPENAI_BASE_URL),
            (OPENAI_BASE_URL.to_owned(), false)
        );
    }
}
