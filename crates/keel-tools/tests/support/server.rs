//! An MCP server for tests: `echo`, `add` (structured result), `image`, `slow` (runs until
//! cancelled) and `grow` (adds a tool and announces the changed list).
//!
//! When `MCP_TEST_DIR` is set it writes there: `pid` (its process id, at start),
//! `slow-started`, `slow-cancelled` (the request's cancellation was seen) and
//! `cancelled-notification` (the reason of each `notifications/cancelled`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, ErrorData, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use serde_json::{Value, json};

/// A 1×1 transparent PNG.
pub const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

#[derive(Clone)]
pub struct TestServer {
    dir: Option<PathBuf>,
    grown: Arc<AtomicBool>,
}

impl TestServer {
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            grown: Arc::new(AtomicBool::new(false)),
        }
    }

    fn mark(&self, file: &str, text: &str) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::write(dir.join(file), text);
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let object = |v: Value| -> Arc<JsonObject> {
            match v {
                Value::Object(map) => Arc::new(map),
                _ => Arc::new(JsonObject::new()),
            }
        };
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echoes its text.",
                object(
                    json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}),
                ),
            ),
            Tool::new(
                "add",
                "Adds two numbers.",
                object(
                    json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}),
                ),
            ),
            Tool::new("image", "A tiny picture.", object(json!({"type":"object"}))),
            Tool::new(
                "slow",
                "Runs until cancelled.",
                object(json!({"type":"object"})),
            ),
            Tool::new("fail", "Always fails.", object(json!({"type":"object"}))),
            Tool::new(
                "env",
                "Lists the names of its environment variables.",
                object(json!({"type":"object"})),
            ),
            Tool::new(
                "grow",
                "Adds the tool `extra`.",
                object(json!({"type":"object"})),
            ),
        ];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Appears after grow.",
                object(json!({"type":"object"})),
            ));
        }
        tools
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => {
                let text = args.get("text").and_then(Value::as_str).unwrap_or_default();
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            "add" => {
                let num = |k: &str| args.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                let sum = json!({ "sum": num("a") + num("b") });
                let mut result = CallToolResult::success(vec![ContentBlock::text(sum.to_string())]);
                result.structured_content = Some(sum);
                result
            }
            "image" => CallToolResult::success(vec![ContentBlock::image(PNG_1X1, "image/png")]),
            "slow" => {
                self.mark("slow-started", "");
                context.ct.cancelled().await;
                self.mark("slow-cancelled", "");
                return Err(ErrorData::internal_error("cancelled", None));
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("it failed")]),
            "env" => {
                let mut names: Vec<String> = std::env::vars_os()
                    .map(|(k, _)| k.to_string_lossy().into_owned())
                    .collect();
                names.sort();
                CallToolResult::success(vec![ContentBlock::text(names.join("\n"))])
            }
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                CallToolResult::success(vec![ContentBlock::text("grown")])
            }
            "extra" => CallToolResult::success(vec![ContentBlock::text("extra")]),
            other => {
                return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(result.into())
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.mark(
            "cancelled-notification",
            notification.reason.as_deref().unwrap_or("(no reason)"),
        );
    }
}
