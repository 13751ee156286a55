//! Tools of Model Context Protocol servers (`[[mcp_servers]]`).
//!
//! * [`config`]: the configuration entries and their validation;
//! * `server`: one server's connection (stdio child process or streamable HTTP), restart on
//!   next use after a crash, tool list refresh on `notifications/tools/list_changed`;
//! * [`names`]: `SERVER__TOOL` names within `[a-zA-Z0-9_-]{1,64}`;
//! * `convert`: MCP call results as [`keel_agent::ToolOutput`]s;
//! * [`status`]: the per-server health shown by `/readyz`;
//! * `manager`: [`McpManager`], the entry point.

pub mod config;
mod convert;
mod manager;
pub mod names;
mod server;
pub mod status;
mod tool;

pub use config::{McpConfigError, McpServerConfig, McpTransportKind};
pub use manager::{DEFAULT_CONNECT_TIMEOUT, McpManager, McpOptions};
pub use status::{McpServerState, McpServerStatus};
