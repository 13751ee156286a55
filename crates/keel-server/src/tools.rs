//! The tools offered to models: built-in workspace tools and MCP servers' tools.

use std::sync::Arc;

use keel_agent::Tool;

use crate::config::Config;

type StatusFn = Arc<dyn Fn() -> Vec<serde_json::Value> + Send + Sync>;

/// The daemon's tools and a view of their servers' health.
pub struct Tools {
    pub tools: Vec<Arc<dyn Tool>>,
    pub status: StatusFn,
}

/// Builds the configured tools.
pub async fn build(_config: &Config) -> Result<Tools, String> {
    Ok(Tools {
        tools: Vec::new(),
        status: Arc::new(Vec::new),
    })
}
