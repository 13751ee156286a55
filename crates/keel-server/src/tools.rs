//! The tools offered to models: built-in workspace tools and MCP servers' tools.
//!
//! Built-in tools are built for each run in the workspace of the chat's owner (see
//! [`ToolSet::for_owner`]), so a path a model names is resolved against that user's directory
//! only; MCP servers are the operator's and shared by every chat. Whether users exist is asked
//! on every run, so a daemon that users were added to while it runs gives each their own
//! directory from the next run on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use keel_agent::Tool;
use keel_tools::mcp::McpOptions;
use keel_tools::{
    BuiltinOptions, BuiltinTool, Builtins, McpManager, McpServerConfig, Timed, WorkspaceError,
};

use crate::config::Config;
use crate::metrics::{Metrics, ServerLabels};

/// How often servers that failed are retried and tool lists refreshed.
pub(crate) const MCP_REFRESH: Duration = Duration::from_secs(60);

/// How much longer than the limit a command may take to be killed and drained.
const RUN_COMMAND_GRACE: Duration = Duration::from_secs(3);

/// The daemon's tools.
pub(crate) struct ToolSet {
    builtin: Builtins,
    /// Users exist: each chat works in its owner's directory below the workspace. Once set it
    /// stays set, as the API's token mode does.
    per_user: AtomicBool,
    timeout: Duration,
    mcp: Option<Arc<McpManager>>,
}

/// Where the workspace is: inside it must be neither the database nor the configuration file,
/// which a model's tools could otherwise read or overwrite.
#[derive(Debug, thiserror::Error)]
#[error(
    "config key `tools.workspace`: the workspace {workspace} contains the {what} {path}; move \
     one of them so the workspace holds neither the database nor the configuration file"
)]
pub(crate) struct WorkspaceOverlap {
    pub workspace: PathBuf,
    pub what: &'static str,
    pub path: PathBuf,
}

impl ToolSet {
    /// Builds the configured tools. A bad configuration is an error naming the key; an MCP
    /// server that fails to start is only reported (log, metric, `/readyz`). `per_user`: users
    /// exist, so every chat gets its owner's directory of the workspace.
    pub(crate) async fn build(
        config: &Config,
        metrics: &Metrics,
        per_user: bool,
    ) -> Result<Self, String> {
        let options = BuiltinOptions {
            sandbox: config.command_sandbox.clone(),
            max_command_time: Some(config.tools.timeout()),
        };
        let builtin = Builtins::new(&config.tools.builtin, &config.tools.workspace, options)
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
                env_passthrough: entry.env_passthrough.clone(),
                url: entry.url.clone(),
                timeout_ms: entry.timeout_ms,
            })
            .collect();
        let mcp = if servers.is_empty() {
            None
        } else {
            // MCP servers over HTTP share the model providers' client and its TLS set-up.
            let http = keel_providers::http_client().map_err(|e| e.to_string())?;
            let options = McpOptions {
                http: Some(http),
                call_timeout: config.tools.timeout(),
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
        Ok(Self {
            builtin,
            per_user: AtomicBool::new(per_user),
            timeout: config.tools.timeout(),
            mcp,
        })
    }

    /// Whether chats work in their owners' directories: users exist now, or did at some
    /// point while the daemon ran (removing the last user does not merge the directories).
    /// When the database cannot tell, yes: a directory of one's own is the narrower root.
    pub(crate) async fn per_user(&self, store: &dyn keel_store::Store) -> bool {
        if self.per_user.load(Ordering::Acquire) {
            return true;
        }
        match store.has_users().await {
            Ok(false) => false,
            Ok(true) => {
                if !self.per_user.swap(true, Ordering::AcqRel) {
                    tracing::info!(
                        "a user exists now: each chat's tools work in its owner's directory of the workspace"
                    );
                }
                true
            }
            Err(error) => {
                tracing::warn!(%error, "cannot tell whether users exist: this run's tools work in its owner's directory");
                true
            }
        }
    }

    /// The tools a run of `owner`'s chat offers now (MCP tool lists change over time): the
    /// built-ins confined to the owner's workspace (`per_user`, from [`ToolSet::per_user`]) or
    /// to the whole workspace, each call limited to `[tools] timeout_ms`, and the MCP servers'
    /// tools (limited by their own timeout, else the same).
    pub(crate) fn for_owner(
        &self,
        owner: &str,
        per_user: bool,
    ) -> Result<Vec<Arc<dyn Tool>>, WorkspaceError> {
        let user = per_user.then_some(owner);
        let mut tools: Vec<Arc<dyn Tool>> = self
            .builtin
            .for_user(user)?
            .into_iter()
            .map(|tool| {
                // run_command enforces the same limit itself, killing its process group and
                // keeping the output so far; this outer limit only backs it up.
                let limit = if tool.definition().name == BuiltinTool::RunCommand.name() {
                    self.timeout + RUN_COMMAND_GRACE
                } else {
                    self.timeout
                };
                Arc::new(Timed::new(tool, limit)) as Arc<dyn Tool>
            })
            .collect();
        if let Some(mcp) = &self.mcp {
            tools.extend(mcp.tools());
        }
        Ok(tools)
    }

    /// MCP servers' health, for `/readyz`.
    pub(crate) fn status(&self) -> Vec<serde_json::Value> {
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
    pub(crate) async fn maintain(self: Arc<Self>, stop: keel_core::Cancel) {
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

/// Refuses a workspace that contains the SQLite database's directory or the configuration
/// file (when any built-in tool is enabled; the workspace is created if missing). Runs before
/// anything else at start-up.
pub(crate) fn check_workspace(config: &Config) -> Result<(), String> {
    if config.tools.builtin.is_empty() {
        return Ok(());
    }
    let root = keel_tools::Workspace::new(&config.tools.workspace)
        .map_err(|e| format!("config key `tools.workspace`: {e}"))?;
    check_outside(&root, config).map_err(|e| e.to_string())
}

fn check_outside(root: &keel_tools::Workspace, config: &Config) -> Result<(), WorkspaceOverlap> {
    let mut guarded: Vec<(&'static str, PathBuf)> = Vec::new();
    if let Some(file) = sqlite_file(&config.database) {
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        guarded.push(("database directory", dir));
    }
    if let Some(source) = &config.source {
        guarded.push(("configuration file", source.clone()));
    }
    for (what, path) in guarded {
        if root.contains(&path) {
            return Err(WorkspaceOverlap {
                workspace: root.root().to_path_buf(),
                what,
                path,
            });
        }
    }
    Ok(())
}

/// The file of a `sqlite:` database URL (`sqlite://PATH`, `sqlite:PATH`, with an optional
/// `?query`); `None` for any other database.
pub(crate) fn sqlite_file(database: &str) -> Option<PathBuf> {
    let rest = database.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty()).then(|| Path::new(path).to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sqlite_file_is_read_from_the_url() {
        let file = |url: &str| sqlite_file(url).map(|p| p.display().to_string());
        assert_eq!(
            file("sqlite://keel-data/keel.db").as_deref(),
            Some("keel-data/keel.db")
        );
        assert_eq!(
            file("sqlite:///var/lib/keel/k.db?mode=rwc").as_deref(),
            Some("/var/lib/keel/k.db")
        );
        assert_eq!(file("sqlite:k.db").as_deref(), Some("k.db"));
        assert_eq!(file("postgres://u@h/db"), None);
        assert_eq!(file("sqlite://"), None);
    }
}
