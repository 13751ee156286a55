//! [`McpManager`]: every configured MCP server, connected at start, and their tools.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use keel_agent::Tool;

use super::config::{McpConfigError, McpServerConfig, validate};
use super::server::{Server, spawn_refresher};
use super::status::McpServerStatus;
use super::tool::McpTool;
use crate::timeout::DEFAULT_TOOL_TIMEOUT;

/// How long a server may take to start and answer `initialize` (and `tools/list`).
/// `npx` fetching a package on first use can take a while.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Options of [`McpManager::start_with`].
#[derive(Debug, Clone)]
pub struct McpOptions {
    pub connect_timeout: Duration,
    /// The client for servers reached over HTTP, so they share the program's TLS set-up (the
    /// daemon passes the one its model providers use). `None`: a default client, built from
    /// the process's rustls crypto provider when a server is first reached.
    pub http: Option<reqwest::Client>,
    /// The limit on one tool call of a server whose entry sets no `timeout_ms`.
    pub call_timeout: Duration,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            http: None,
            call_timeout: DEFAULT_TOOL_TIMEOUT,
        }
    }
}

/// The configured MCP servers. A server that fails to start is recorded in [`status`]
/// (and the log) and offers no tools; the others work normally.
///
/// [`status`]: McpManager::status
pub struct McpManager {
    servers: Vec<Arc<Server>>,
    /// Tasks that re-list a server's tools when it announces a change; started by the first
    /// [`McpManager::connect_all`], which runs inside the runtime.
    refreshers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl McpManager {
    /// Validates `configs` and connects every server concurrently, waiting for all of them.
    /// Only invalid configuration is an error; unreachable servers are not.
    pub async fn start(configs: &[McpServerConfig]) -> Result<Self, McpConfigError> {
        Self::start_with(configs, McpOptions::default()).await
    }

    pub async fn start_with(
        configs: &[McpServerConfig],
        options: McpOptions,
    ) -> Result<Self, McpConfigError> {
        let manager = Self::new(configs, options)?;
        manager.connect_all().await;
        Ok(manager)
    }

    /// Validates `configs` without connecting anything (every server is `not_started`), so a
    /// daemon can start serving and report readiness while [`McpManager::connect_all`] runs.
    pub fn new(configs: &[McpServerConfig], options: McpOptions) -> Result<Self, McpConfigError> {
        validate(configs)?;
        Ok(Self {
            servers: configs
                .iter()
                .map(|config| {
                    Arc::new(Server::new(
                        config.clone(),
                        options.connect_timeout,
                        options.http.clone(),
                        options.call_timeout,
                    ))
                })
                .collect(),
            refreshers: Mutex::new(Vec::new()),
        })
    }

    /// Connects every server that is not connected (concurrently) and lists its tools.
    /// Failures are recorded in the status.
    pub async fn connect_all(&self) {
        {
            let mut refreshers = self.refreshers();
            if refreshers.is_empty() {
                refreshers.extend(self.servers.iter().map(spawn_refresher));
            }
        }
        futures::future::join_all(self.servers.iter().map(|s| s.start())).await;
    }

    fn refreshers(&self) -> MutexGuard<'_, Vec<tokio::task::JoinHandle<()>>> {
        match self.refreshers.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
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

    /// Reconnects servers that are down (a server that failed at start is retried here) and
    /// lists every server's tools again.
    pub async fn refresh(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.refresh())).await;
    }

    /// Closes every connection, stopping the stdio servers and whatever they started.
    pub async fn shutdown(&self) {
        for refresher in self.refreshers().drain(..) {
            refresher.abort();
        }
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}

impl Drop for McpManager {
    fn drop(&mut self) {
        for refresher in self.refreshers().drain(..) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_can_be_shared_across_tasks() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<McpManager>();
    }
}
