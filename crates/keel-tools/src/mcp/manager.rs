//! [`McpManager`]: every configured MCP server, connected at start, and their tools.

use std::sync::Arc;
use std::time::Duration;

use keel_agent::Tool;

use super::config::{McpConfigError, McpServerConfig, validate};
use super::server::{Server, spawn_refresher};
use super::status::McpServerStatus;
use super::tool::McpTool;

/// How long a server may take to start and answer `initialize` (and `tools/list`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Options of [`McpManager::start_with`].
#[derive(Debug, Clone)]
pub struct McpOptions {
    pub connect_timeout: Duration,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// The configured MCP servers. A server that fails to start is recorded in [`status`]
/// (and the log) and offers no tools; the others work normally.
///
/// [`status`]: McpManager::status
pub struct McpManager {
    servers: Vec<Arc<Server>>,
    refreshers: Vec<tokio::task::JoinHandle<()>>,
}

impl McpManager {
    /// Validates `configs` and connects every server concurrently. Only invalid
    /// configuration is an error; unreachable servers are not.
    pub async fn start(configs: &[McpServerConfig]) -> Result<Self, McpConfigError> {
        Self::start_with(configs, McpOptions::default()).await
    }

    pub async fn start_with(
        configs: &[McpServerConfig],
        options: McpOptions,
    ) -> Result<Self, McpConfigError> {
        validate(configs)?;
        let servers: Vec<Arc<Server>> = configs
            .iter()
            .map(|config| Arc::new(Server::new(config.clone(), options.connect_timeout)))
            .collect();
        let refreshers = servers.iter().map(spawn_refresher).collect();
        futures::future::join_all(servers.iter().map(|s| s.start())).await;
        Ok(Self {
            servers,
            refreshers,
        })
    }

    /// Every tool currently offered, named `SERVER__TOOL`. Ask again for each run: the lists
    /// change when a server announces it.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.servers
            .iter()
            .flat_map(|server| {
                server
                    .tools()
                    .iter()
                    .map(|tool| {
                        Arc::new(McpTool::new(server.clone(), tool.clone())) as Arc<dyn Tool>
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The health of every server, in configuration order.
    pub fn status(&self) -> Vec<McpServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// Reconnects servers that are down and lists every server's tools again.
    pub async fn refresh(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.refresh())).await;
    }

    /// Closes every connection, stopping the stdio servers.
    pub async fn shutdown(&self) {
        for refresher in &self.refreshers {
            refresher.abort();
        }
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}

impl Drop for McpManager {
    fn drop(&mut self) {
        for refresher in &self.refreshers {
            refresher.abort();
        }
    }
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("status", &self.status())
            .finish()
    }
}
