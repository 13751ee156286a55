//! The built-in workspace tools and the constructor that builds them from configuration
//! (`[tools] builtin = [...]`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keel_agent::Tool;

use crate::sandbox::Launcher;
use crate::workspace::{Workspace, WorkspaceError};

pub mod edit_file;
pub mod list_dir;
pub mod read_file;
pub mod run_command;
pub mod write_file;

pub use edit_file::EditFile;
pub use list_dir::ListDir;
pub use read_file::ReadFile;
pub use run_command::RunCommand;
pub use write_file::WriteFile;

/// Every built-in tool name, in the order the configuration example lists them.
pub const BUILTIN_NAMES: &[&str] = &[
    read_file::NAME,
    write_file::NAME,
    edit_file::NAME,
    list_dir::NAME,
    run_command::NAME,
];

/// The `[tools]` configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ToolsConfigError {
    #[error("tools.builtin: unknown tool `{name}` (known: {})", BUILTIN_NAMES.join(", "))]
    UnknownTool { name: String },
    #[error("tools.builtin: `{name}` is listed twice")]
    Duplicate { name: String },
    #[error("tools.workspace: {0}")]
    Workspace(#[from] WorkspaceError),
}

/// The built-ins enabled when `[tools]` does not list any: those that only read.
pub const READ_ONLY_NAMES: &[&str] = &[read_file::NAME, list_dir::NAME];

/// How the built-in tools run, beyond their workspace.
#[derive(Debug, Clone, Default)]
pub struct BuiltinOptions {
    /// `run_command`'s launcher into a Landlock sandbox; `None` runs commands unconfined.
    pub sandbox: Option<Launcher>,
    /// The longest a command may run (`[tools] timeout_ms`); `None` keeps the tool's own cap.
    pub max_command_time: Option<Duration>,
}

/// The configured built-in tools, built for one workspace at a time: the shared root in
/// single-user mode, a user's own directory below it otherwise.
#[derive(Debug, Clone)]
pub struct Builtins {
    names: Vec<String>,
    /// `None` when no built-in is enabled: the workspace is then never created.
    root: Option<Workspace>,
    options: BuiltinOptions,
}

impl Builtins {
    /// Checks `names` and opens `workspace` (created when missing) if any tool is named.
    pub fn new(
        names: &[String],
        workspace: &Path,
        options: BuiltinOptions,
    ) -> Result<Self, ToolsConfigError> {
        for (i, name) in names.iter().enumerate() {
            if !BUILTIN_NAMES.contains(&name.as_str()) {
                return Err(ToolsConfigError::UnknownTool { name: name.clone() });
            }
            if names[..i].contains(name) {
                return Err(ToolsConfigError::Duplicate { name: name.clone() });
            }
        }
        let root = if names.is_empty() {
            None
        } else {
            Some(Workspace::new(workspace)?)
        };
        Ok(Self {
            names: names.to_vec(),
            root,
            options,
        })
    }

    /// The shared workspace root, when any built-in is enabled.
    pub fn root(&self) -> Option<&Workspace> {
        self.root.as_ref()
    }

    /// The enabled tool names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The tools of `user`'s workspace (`None`: single-user mode, the root itself).
    pub fn for_user(&self, user: Option<&str>) -> Result<Vec<Arc<dyn Tool>>, WorkspaceError> {
        let Some(root) = &self.root else {
            return Ok(Vec::new());
        };
        let workspace = match user {
            Some(user) => root.for_user(user)?,
            None => root.clone(),
        };
        Ok(self.tools_in(&workspace))
    }

    fn tools_in(&self, workspace: &Workspace) -> Vec<Arc<dyn Tool>> {
        self.names
            .iter()
            .map(|name| -> Arc<dyn Tool> {
                let ws = workspace.clone();
                match name.as_str() {
                    read_file::NAME => Arc::new(ReadFile::new(ws)),
                    write_file::NAME => Arc::new(WriteFile::new(ws)),
                    edit_file::NAME => Arc::new(EditFile::new(ws)),
                    list_dir::NAME => Arc::new(ListDir::new(ws)),
                    _ => {
                        let mut tool = RunCommand::new(ws);
                        if let Some(max) = self.options.max_command_time {
                            tool = tool.with_max_timeout(max);
                        }
                        if let Some(launcher) = &self.options.sandbox {
                            tool = tool.with_sandbox(launcher.clone());
                        }
                        Arc::new(tool)
                    }
                }
            })
            .collect()
    }
}

/// The built-in tools named in `names`, confined to `workspace` (created when missing).
/// An empty list gives no tools and leaves the workspace untouched.
pub fn builtin_tools(
    names: &[String],
    workspace: &Path,
) -> Result<Vec<Arc<dyn Tool>>, ToolsConfigError> {
    Ok(Builtins::new(names, workspace, BuiltinOptions::default())?.for_user(None)?)
}

#[cfg(test)]
pub(crate) mod test_support {
    use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
    use keel_core::Cancel;

    use crate::workspace::Workspace;

    pub fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        (dir, ws)
    }

    pub async fn call(tool: &dyn Tool, args: &str) -> Result<ToolOutput, ToolError> {
        call_with(tool, args, Cancel::new()).await
    }

    pub async fn call_with(
        tool: &dyn Tool,
        args: &str,
        cancel: Cancel,
    ) -> Result<ToolOutput, ToolError> {
        let request = ToolCallRequest {
            tool_call_id: "call_1".into(),
            tool_name: tool.definition().name,
            args: args.into(),
        };
        tool.call(request, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn builds_the_named_tools_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("workspace");
        let tools = builtin_tools(&names(BUILTIN_NAMES), &ws).unwrap();
        let got: Vec<String> = tools.iter().map(|t| t.definition().name).collect();
        assert_eq!(got, names(BUILTIN_NAMES));
        assert!(ws.is_dir());
        let idempotent: Vec<bool> = tools.iter().map(|t| t.idempotent()).collect();
        assert_eq!(idempotent, [true, true, false, true, false]);
        for tool in &tools {
            assert_eq!(tool.definition().parameters["type"], "object");
        }
    }

    #[test]
    fn unknown_and_duplicate_names_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let err = builtin_tools(&names(&["read_file", "rm_rf"]), dir.path())
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "tools.builtin: unknown tool `rm_rf` (known: read_file, write_file, edit_file, \
             list_dir, run_command)"
        );
        let err = builtin_tools(&names(&["list_dir", "list_dir"]), dir.path())
            .err()
            .unwrap();
        assert_eq!(err.to_string(), "tools.builtin: `list_dir` is listed twice");
    }

    #[test]
    fn empty_list_gives_no_tools() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("never-created");
        assert!(builtin_tools(&[], &ws).unwrap().is_empty());
        assert!(!ws.exists());
    }

    #[test]
    fn parameters_match_the_configuration_contract() {
        let dir = tempfile::tempdir().unwrap();
        let tools = builtin_tools(&names(BUILTIN_NAMES), dir.path()).unwrap();
        let props: Vec<Vec<String>> = tools
            .iter()
            .map(|t| {
                let def = t.definition();
                let mut keys: Vec<String> = def.parameters["properties"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect();
                keys.sort();
                keys
            })
            .collect();
        assert_eq!(
            props,
            vec![
                names(&["end_line", "path", "start_line"]),
                names(&["content", "path"]),
                names(&["new", "old", "path"]),
                names(&["path"]),
                names(&["command", "timeout_ms"]),
            ]
        );
    }
}
