//! The checks each configuration value must pass. Each is a pure function of the values it
//! checks, and each error names the key at fault (`providers[0].kind`, `runs.workers`).

use std::collections::HashSet;

use keel_providers::{Continuation, ProviderKind};

use super::{
    ConfigError, McpServerEntry, ModelEntry, ProviderEntry, ResolvedProvider, RunsConfig,
    ServerConfig, ToolsConfig, UserEntry,
};

pub(super) fn listen(listen: &str) -> Result<(), ConfigError> {
    listen
        .parse::<std::net::SocketAddr>()
        .map(|_| ())
        .map_err(|e| ConfigError::invalid("listen", format!("`{listen}` is not HOST:PORT ({e})")))
}

pub(super) fn database(database: &str) -> Result<(), ConfigError> {
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

/// One `[[providers]]` entry; `names` collects the names seen so far to catch duplicates.
pub(super) fn provider(
    i: usize,
    entry: &ProviderEntry,
    names: &mut HashSet<String>,
) -> Result<(), ConfigError> {
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
    if let Some(url) = &entry.base_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(ConfigError::invalid(
            key("base_url"),
            format!("`{url}` is not an http(s) URL"),
        ));
    }
    if entry.continuation == Some(Continuation::Prefill)
        && let Some(why) = prefill_refusal(entry.kind)
    {
        return Err(ConfigError::invalid(key("continuation"), why));
    }
    if entry.kind != ProviderKind::OpenAiChat {
        let set = [
            ("output_limit_field", entry.output_limit_field.is_some()),
            ("reasoning_content", entry.reasoning_content.is_some()),
        ];
        if let Some((field, _)) = set.into_iter().find(|(_, set)| *set) {
            return Err(ConfigError::invalid(
                key(field),
                format!("applies to openai-chat providers only, not {}", entry.kind),
            ));
        }
    }
    Ok(())
}

pub(super) fn models(
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
        if let Some(field) = model.price.and_then(|p| p.invalid_field()) {
            return Err(ConfigError::invalid(
                key(&format!("price.{field}")),
                "must be a non-negative number of dollars per million tokens",
            ));
        }
        if model.context_limit == Some(0) {
            return Err(ConfigError::invalid(
                key("context_limit"),
                "must be positive",
            ));
        }
        let kind = providers
            .iter()
            .find(|p| p.entry.name == model.provider)
            .map(|p| p.entry.kind);
        model_options(model, kind).map_err(|(field, why)| ConfigError::invalid(key(field), why))?;
        if let Some(kind) = kind {
            provider_tools(model, kind)
                .map_err(|why| ConfigError::invalid(key("provider_tools"), why))?;
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

/// Why a provider of `kind` cannot continue a partial reply natively, if it cannot.
fn prefill_refusal(kind: ProviderKind) -> Option<&'static str> {
    match kind {
        ProviderKind::OpenAiResponses => {
            Some("the Responses API cannot continue a partial reply; use prompt")
        }
        ProviderKind::Gemini => Some("Gemini continues a partial reply by instruction; use prompt"),
        ProviderKind::OpenAiChat | ProviderKind::Anthropic => None,
    }
}

/// The options of one model that its provider's `kind` cannot take, or that contradict
/// each other: the field at fault and why.
fn model_options(
    model: &ModelEntry,
    kind: Option<ProviderKind>,
) -> Result<(), (&'static str, &'static str)> {
    if model.continuation == Some(Continuation::Prefill)
        && let Some(why) = kind.and_then(prefill_refusal)
    {
        return Err(("continuation", why));
    }
    if model.thinking.is_some() && model.thinking_budget_tokens.is_some() {
        return Err((
            "thinking",
            "adaptive thinking has no budget; set thinking or thinking_budget_tokens, not both",
        ));
    }
    let anthropic = kind == Some(ProviderKind::Anthropic);
    if model.thinking.is_some() && !anthropic {
        return Err(("thinking", "only anthropic providers take it"));
    }
    if model.effort.is_some() && !anthropic {
        return Err((
            "effort",
            "only anthropic providers take it; OpenAI models take reasoning_effort",
        ));
    }
    Ok(())
}

/// Each provider tool of a model must be one its provider runs, named once.
fn provider_tools(model: &ModelEntry, kind: ProviderKind) -> Result<(), String> {
    let mut seen = HashSet::new();
    for name in &model.provider_tools {
        if !seen.insert(name.as_str()) {
            return Err(format!("`{name}` is listed twice"));
        }
        keel_providers::provider_tool(kind, name).map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub(super) fn runs(runs: &RunsConfig) -> Result<(), ConfigError> {
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
    if runs.ai_sdk_max_body_bytes < runs.max_body_bytes {
        return Err(ConfigError::invalid(
            "runs.ai_sdk_max_body_bytes",
            "must be at least runs.max_body_bytes (the body carries a whole history)",
        ));
    }
    if runs.import_max_body_bytes < runs.max_body_bytes {
        return Err(ConfigError::invalid(
            "runs.import_max_body_bytes",
            "must be at least runs.max_body_bytes (the body carries a whole chat)",
        ));
    }
    Ok(())
}

/// `runs.title_model` names a configured model (the built-in `demo` model when there are
/// none).
pub(super) fn title_model(runs: &RunsConfig, models: &[ModelEntry]) -> Result<(), ConfigError> {
    let Some(id) = &runs.title_model else {
        return Ok(());
    };
    let known = if models.is_empty() {
        id == "demo"
    } else {
        models.iter().any(|m| &m.id == id)
    };
    if known {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            "runs.title_model",
            format!("no model `{id}` is configured"),
        ))
    }
}

pub(super) fn mcp(servers: &[McpServerEntry]) -> Result<(), ConfigError> {
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

pub(super) fn tools(tools: &ToolsConfig) -> Result<(), ConfigError> {
    for (i, name) in tools.builtin.iter().enumerate() {
        if tools.builtin[..i].contains(name) {
            return Err(ConfigError::invalid(
                format!("tools.builtin[{i}]"),
                format!("`{name}` is listed twice"),
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

pub(super) fn server(server: &ServerConfig) -> Result<(), ConfigError> {
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
    if server.sse_write_interval_ms > MAX_SSE_WRITE_INTERVAL_MS {
        return Err(ConfigError::invalid(
            "server.sse_write_interval_ms",
            format!("must be at most {MAX_SSE_WRITE_INTERVAL_MS} (a delay people would see)"),
        ));
    }
    Ok(())
}

/// Longer than this, pacing a stream's writes would show as stutter.
const MAX_SSE_WRITE_INTERVAL_MS: u64 = 250;

pub(super) fn users(users: &[UserEntry]) -> Result<(), ConfigError> {
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
        if let Some(why) = user.budget.as_ref().and_then(keel_store::Budget::invalid) {
            return Err(ConfigError::invalid(format!("users[{i}].budget"), why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
