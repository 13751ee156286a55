//! `[[mcp_servers]]` entries and their validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::names::sanitise;

/// One `[[mcp_servers]]` entry: a stdio server started with `command` and `args` (and extra
/// `env`), or a streamable HTTP server at `url`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    pub name: String,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Set in a stdio server's environment, on top of the allow-list (`crate::env`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables of the daemon's environment passed to a stdio server by name.
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    #[serde(default)]
    pub url: Option<String>,
    /// The limit on one tool call of this server, instead of the daemon's.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// How the daemon talks to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransportKind {
    Stdio,
    Http,
}

impl McpServerConfig {
    /// A stdio server.
    pub fn stdio(
        name: impl Into<String>,
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            command: Some(command.into()),
            args: args.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// A streamable HTTP server.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: Some(url.into()),
            ..Self::default()
        }
    }

    pub fn transport(&self) -> McpTransportKind {
        if self.url.is_some() {
            McpTransportKind::Http
        } else {
            McpTransportKind::Stdio
        }
    }
}

/// An `[[mcp_servers]]` entry cannot be used. Each message names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpConfigError {
    #[error("mcp_servers[{index}].name: must not be empty")]
    EmptyName { index: usize },
    #[error("mcp_servers[{index}].timeout_ms: must be at least 1")]
    ZeroTimeout { index: usize },
    #[error(
        "mcp_servers[{index}] (`{name}`): exactly one of `command` (stdio) or `url` (streamable \
         HTTP) must be set"
    )]
    Transport { index: usize, name: String },
    #[error(
        "mcp_servers[{index}] (`{name}`): `args`, `env` and `env_passthrough` only apply to \
         `command`"
    )]
    ArgsWithUrl { index: usize, name: String },
    #[error(
        "mcp_servers[{index}].name: `{name}` gives the tool prefix `{prefix}__`, already used by \
         `{other}`"
    )]
    DuplicateName {
        index: usize,
        name: String,
        prefix: String,
        other: String,
    },
}

/// Checks every entry; the first problem found is returned.
pub fn validate(configs: &[McpServerConfig]) -> Result<(), McpConfigError> {
    for (index, config) in configs.iter().enumerate() {
        let name = config.name.clone();
        if name.trim().is_empty() {
            return Err(McpConfigError::EmptyName { index });
        }
        if config.timeout_ms == Some(0) {
            return Err(McpConfigError::ZeroTimeout { index });
        }
        if config.command.is_some() == config.url.is_some() {
            return Err(McpConfigError::Transport { index, name });
        }
        if config.url.is_some()
            && (!config.args.is_empty()
                || !config.env.is_empty()
                || !config.env_passthrough.is_empty())
        {
            return Err(McpConfigError::ArgsWithUrl { index, name });
        }
        let prefix = sanitise(&name);
        if let Some(other) = configs[..index]
            .iter()
            .find(|c| sanitise(&c.name) == prefix)
        {
            return Err(McpConfigError::DuplicateName {
                index,
                name,
                prefix,
                other: other.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_transports() {
        let stdio: McpServerConfig = serde_json::from_str(
            r#"{"name":"files","command":"npx","args":["-y","pkg"],"env":{"A":"1"}}"#,
        )
        .unwrap();
        assert_eq!(stdio.transport(), McpTransportKind::Stdio);
        assert_eq!(stdio.env["A"], "1");
        let http: McpServerConfig =
            serde_json::from_str(r#"{"name":"web","url":"http://127.0.0.1:1/mcp"}"#).unwrap();
        assert_eq!(http.transport(), McpTransportKind::Http);
        assert!(validate(&[stdio, http]).is_ok());
        assert!(serde_json::from_str::<McpServerConfig>(r#"{"name":"x","cmd":"y"}"#).is_err());
    }

    #[test]
    fn bad_entries_are_named() {
        let err = validate(&[McpServerConfig::default()]).unwrap_err();
        assert_eq!(err.to_string(), "mcp_servers[0].name: must not be empty");
        let both = McpServerConfig {
            url: Some("http://x".into()),
            ..McpServerConfig::stdio("s", "cmd", Vec::<String>::new())
        };
        let err = validate(&[both]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("mcp_servers[0] (`s`): exactly one")
        );
        let err = validate(&[
            McpServerConfig::http("my.server", "http://x"),
            McpServerConfig::http("my_server", "http://y"),
        ])
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "mcp_servers[1].name: `my_server` gives the tool prefix `my_server__`, already used \
             by `my.server`"
        );
    }
}
