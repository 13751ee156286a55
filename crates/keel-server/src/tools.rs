//! The tools offered to models: built-in workspace tools and MCP servers' tools.

use std::sync::Arc;
use std::time::Duration;

use keel_agent::Tool;
use keel_tools::mcp::McpOptions;
use keel_tools::{McpManager, McpServerConfig, builtin_tools};

use crate::config::Config;
use crate::metrics::{Metrics, ServerLabels};

/// How often servers that failed are retried and tool lists refreshed.
pub const MCP_REFRESH: Duration = Duration::from_secs(60);

/// The daemon's tools.
pub struct ToolSet {
    builtin: Vec<Arc<dyn Tool>>,
    mcp: Option<Arc<McpManager>>,
}

impl ToolSet {
    /// No tools at all.
    pub fn empty() -> Self {
        Self {
            builtin: Vec::new(),
            mcp: None,
        }
    }

    /// Builds the configured tools. A bad configuration is an error naming the key; an MCP
    /// server that fails to start is only reported (log, metric, `/readyz`).
    pub async fn build(config: &Config, metrics: &Metrics) -> Result<Self, String> {
        let builtin = builtin_tools(&config.tools.builtin, &config.tools.workspace)
            .map_err(|e| format!("config key `tools`: {e}"))?;
        let servers: Vec<McpServerConfig> = config
            .mcp_servers
            .iter()
            .map(|entry| McpServerConfig {
                name: entry.name.clone(),
                command: entry.command.clone(),
                args: entry.args.clone(),
                env: entry
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                url: entry.url.clone(),
            })
            .collect();
        let mcp = if servers.is_empty() {
            None
        } else {
            // MCP servers over HTTP share the model providers' client and its TLS set-up.
            let http = keel_providers::http_client().map_err(|e| e.to_string())?;
            let options = McpOptions {
                http: Some(http),
                ..McpOptions::default()
            };
            let manager = McpManager::start_with(&servers, options)
                .await
                .map_err(|e| format!("config key `mcp_servers`: {e}"))?;
            for status in manager.status() {
                if let Some(error) = &status.error {
                    tracing::warn!(server = %status.name, %error, "MCP server did not start; its tools are unavailable");
                    metrics
                        .mcp_server_failures
                        .get_or_create(&ServerLabels {
                            server: status.name.clone(),
                        })
                        .inc();
                }
            }
            Some(Arc::new(manager))
        };
        Ok(Self { builtin, mcp })
    }

    /// The tools a run offers now (MCP tool lists change over time).
    pub fn current(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools = self.builtin.clone();
        if let Some(mcp) = &self.mcp {
            tools.extend(mcp.tools());
        }
        tools
    }

    /// MCP servers' health, for `/readyz`.
    pub fn status(&self) -> Vec<serde_json::Value> {
        self.mcp
            .as_ref()
            .map(|m| {
                m.status()
                    .iter()
                    .map(|s| serde_json::to_value(s).unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Retries failed servers and refreshes tool lists until `stop` fires, then stops the
    /// servers.
    pub async fn maintain(self: Arc<Self>, stop: keel_core::Cancel) {
        let Some(mcp) = self.mcp.clone() else {
            return;
        };
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(MCP_REFRESH) => mcp.refresh().await,
            }
        }
        mcp.shutdown().await;
    }
}
