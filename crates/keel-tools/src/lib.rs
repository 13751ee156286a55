//! Keel's local tools: what the agent loop can run on the daemon's side.
//!
//! * [`workspace`]: path confinement to the one directory built-in tools may touch;
//! * [`builtin`]: the built-in tools (`read_file`, `write_file`, `edit_file`, `list_dir`,
//!   `run_command`) and [`builtin_tools`], which builds them from `[tools]` configuration;
//! * [`mcp`]: tools of Model Context Protocol servers (`[[mcp_servers]]`), offered as
//!   `SERVER__TOOL`, through [`McpManager`];
//! * [`limit`]: how much of a tool result the model is shown;
//! * [`timeout`]: the time limit on a call (`[tools] timeout_ms`);
//! * [`env`]: the environment allow-list of the processes tools start;
//! * [`open`]: opening regular files only (a FIFO or a device would block a call);
//! * [`sandbox`]: Landlock confinement of `run_command` children.
//!
//! Every tool implements [`keel_agent::Tool`].

#![warn(unreachable_pub)]

mod args;
pub mod builtin;
pub mod env;
pub mod limit;
pub mod mcp;
pub mod open;
pub mod sandbox;
pub mod timeout;
pub mod workspace;

pub use builtin::{BuiltinOptions, BuiltinTool, Builtins, ToolsConfigError, builtin_tools};
pub use limit::{Limited, budget_for, limit_all, limit_output, truncate_result};
pub use mcp::{McpConfigError, McpManager, McpServerConfig, McpServerStatus};
pub use timeout::{DEFAULT_TOOL_TIMEOUT, Timed};
pub use workspace::{PathError, Workspace, WorkspaceError, user_dir_name};
