//! An MCP server's tool as a [`keel_agent::Tool`].

use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};
use serde_json::Value;

use super::server::{RemoteTool, Server};
use crate::timeout;

pub(crate) struct McpTool {
    server: Arc<Server>,
    tool: RemoteTool,
}

impl McpTool {
    pub(super) fn new(server: Arc<Server>, tool: RemoteTool) -> Self {
        Self { server, tool }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::function(
            self.tool.exposed.clone(),
            self.tool.description.clone(),
            self.tool.parameters.clone(),
        )
    }

    fn idempotent(&self) -> bool {
        self.tool.idempotent
    }

    async fn call(&self, call: ToolCallRequest, cancel: Cancel) -> Result<ToolOutput, ToolError> {
        let arguments = if call.args.trim().is_empty() {
            None
        } else {
            match serde_json::from_str::<Value>(&call.args) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => {
                    return Err(ToolError(format!(
                        "invalid arguments for {}: expected a JSON object",
                        self.tool.exposed
                    )));
                }
                Err(e) => {
                    return Err(ToolError(format!(
                        "invalid arguments for {}: {e}",
                        self.tool.exposed
                    )));
                }
            }
        };
        let limit = self.server.call_timeout();
        timeout::within(
            &self.tool.exposed,
            limit,
            self.server.call(&self.tool.remote, arguments, &cancel),
        )
        .await
    }
}
