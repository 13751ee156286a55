//! The built-in workspace tools and the constructor that builds them from configuration
//! (`[tools] builtin = [...]`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keel_agent::Tool;

use crate::sandbox::Launcher;
use crate::workspace::{Workspace, WorkspaceError};

/// A tool's type over the workspace, with the constructor the other built-ins share.
macro_rules! workspace_tool {
    ($(#[$attr:meta])* $tool:ident) => {
        $(#[$attr])*
        #[derive(Debug, Clone)]
        pub struct $tool {
            workspace: $crate::workspace::Workspace,
        }

        impl $tool {
            pub fn new(workspace: $crate::workspace::Workspace) -> Self {
                Self { workspace }
            }
        }
    };
}
use workspace_tool;

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

/// A built-in tool, as `[tools] builtin` names it. Its name is written once, in
/// [`BuiltinTool::name`]; parsing, the configuration's error messages and the tools'
/// definitions all take it from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinTool {
    ReadFile,
    WriteFile,
    EditFile,
    ListDir,
    RunCommand,
}

impl BuiltinTool {
    /// Every built-in, in the order the configuration example lists them.
    pub const ALL: [BuiltinTool; 5] = [
        BuiltinTool::ReadFile,
        BuiltinTool::WriteFile,
        BuiltinTool::EditFile,
        BuiltinTool::ListDir,
        BuiltinTool::RunCommand,
    ];

    /// The built-ins enabled when `[tools]` does not list any: those that only read.
    pub const READ_ONLY: [BuiltinTool; 2] = [BuiltinTool::ReadFile, BuiltinTool::ListDir];

    /// The name the model calls the tool by and the configuration lists it by.
    pub const fn name(self) -> &'static str {
        match self {
            BuiltinTool::ReadFile => "read_file",
            BuiltinTool::WriteFile => "write_file",
            BuiltinTool::EditFile => "edit_file",
            BuiltinTool::ListDir => "list_dir",
            BuiltinTool::RunCommand => "run_command",
        }
    }

    /// The built-in called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// Every name, comma-separated, for error messages.
    pub fn known_names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

impl std::fmt::Display for BuiltinTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for BuiltinTool {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Self::from_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown built-in tool `{name}`, expected one of {}",
                Self::known_names()
            ))
        })
    }
}

impl serde::Serialize for BuiltinTool {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// The `[tools]` configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ToolsConfigError {
    #[error("tools.builtin: `{name}` is listed twice")]
    Duplicate { name: BuiltinTool },
    #[error("tools.workspace: {0}")]
    Workspace(#[from] WorkspaceError),
}

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
    names: Vec<BuiltinTool>,
    /// `None` when no built-in is enabled: the workspace is then never created.
    root: Option<Workspace>,
    options: BuiltinOptions,
}

impl Builtins {
    /// Checks `names` and opens `workspace` (created when missing) if any tool is named.
    pub fn new(
        names: &[BuiltinTool],
        workspace: &Path,
        options: BuiltinOptions,
    ) -> Result<Self, ToolsConfigError> {
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(ToolsConfigError::Duplicate { name: *name });
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
                match name {
                    BuiltinTool::ReadFile => Arc::new(ReadFile::new(ws)),
                    BuiltinTool::WriteFile => Arc::new(WriteFile::new(ws)),
                    BuiltinTool::EditFile => Arc::new(EditFile::new(ws)),
                    BuiltinTool::ListDir => Arc::new(ListDir::new(ws)),
                    BuiltinTool::RunCommand => {
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
    names: &[BuiltinTool],
    workspace: &Path,
) -> Result<Vec<Arc<dyn Tool>>, ToolsConfigError> {
    Ok(Builtins::new(names, workspace, BuiltinOptions::default())?.for_user(None)?)
}

#[cfg(test)]
pub(crate) mod test_support {
    use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
    use keel_core::Cancel;

    use crate::workspace::Workspace;

    pub(crate) fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        (dir, ws)
    }

    pub(crate) async fn call(tool: &dyn Tool, args: &str) -> Result<ToolOutput, ToolError> {
        call_with(tool, args, Cancel::new()).await
    }

    pub(crate) async fn call_with(
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
        let tools = builtin_tools(&BuiltinTool::ALL, &ws).unwrap();
        let got: Vec<String> = tools.iter().map(|t| t.definition().name).collect();
        assert_eq!(got, BuiltinTool::ALL.map(|t| t.name().to_owned()));
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
        let err =
            serde_json::from_str::<Vec<BuiltinTool>>(r#"["read_file", "rm_rf"]"#).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "unknown built-in tool `rm_rf`, expected one of read_file, write_file, \
                 edit_file, list_dir, run_command"
            ),
            "{err}"
        );
        let err = builtin_tools(&[BuiltinTool::ListDir, BuiltinTool::ListDir], dir.path())
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
        let tools = builtin_tools(&BuiltinTool::ALL, dir.path()).unwrap();
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
