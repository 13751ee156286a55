//! What `/readyz` and the logs say about each MCP server.

use serde::Serialize;

use super::config::McpTransportKind;

/// The health of one configured server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerStatus {
    pub name: String,
    pub transport: McpTransportKind,
    pub state: McpServerState,
    /// Tools currently offered from it.
    pub tools: usize,
    /// Times it was reconnected after its connection died.
    pub restarts: u32,
    /// Why it is not connected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    /// Initialised and answering.
    Connected,
    /// Starting or connecting failed; `error` says why. Retried on [`super::McpManager::refresh`].
    Failed,
    /// The connection closed (a crashed server); it is reopened on next use.
    Disconnected,
    /// No connection was attempted yet ([`super::McpManager::new`] without
    /// [`super::McpManager::connect_all`]), or one is being made.
    NotStarted,
}

impl McpServerStatus {
    pub fn is_connected(&self) -> bool {
        self.state == McpServerState::Connected
    }
}
