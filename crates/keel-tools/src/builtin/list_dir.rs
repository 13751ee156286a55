//! `list_dir`: the sorted entries of a workspace directory, directories marked with `/`.

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::args;

const NAME: &str = super::BuiltinTool::ListDir.name();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Path of the directory, relative to the workspace ("." for the workspace itself).
    path: String,
}

super::workspace_tool! {
    /// Lists a directory of the workspace.
    ListDir
}

#[async_trait]
impl Tool for ListDir {
    fn definition(&self) -> ToolDefinition {
        args::tool_definition!(
            Args,
            NAME,
            "List the entries of a directory of the workspace, sorted by name, one per line. \
             Directories end with `/`.",
        )
    }

    fn idempotent(&self) -> bool {
        true
    }

    async fn call(&self, call: ToolCallRequest, _cancel: Cancel) -> Result<ToolOutput, ToolError> {
        let args: Args = args::parse(NAME, &call.args)?;
        let path = self
            .workspace
            .resolve_existing(&args.path)
            .map_err(|e| ToolError(e.to_string()))?;
        if !path.is_dir() {
            return Err(ToolError(format!("`{}` is not a directory", args.path)));
        }
        let cannot = |e: std::io::Error| ToolError(format!("cannot list `{}`: {e}", args.path));
        let mut dir = tokio::fs::read_dir(&path).await.map_err(cannot)?;
        let mut entries = Vec::new();
        while let Some(entry) = dir.next_entry().await.map_err(cannot)? {
            let mut name = entry.file_name().to_string_lossy().into_owned();
            // Follows symbolic links, so a link to a directory reads as one.
            if tokio::fs::metadata(entry.path())
                .await
                .is_ok_and(|m| m.is_dir())
            {
                name.push('/');
            }
            entries.push(name);
        }
        entries.sort();
        if entries.is_empty() {
            return Ok(ToolOutput::Text("(empty directory)".to_owned()));
        }
        Ok(ToolOutput::Text(entries.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::{call, workspace};

    #[tokio::test]
    async fn lists_sorted_entries_with_directories_marked() {
        let (_dir, ws) = workspace();
        std::fs::create_dir_all(ws.root().join("src/inner")).unwrap();
        std::fs::write(ws.root().join("b.txt"), "").unwrap();
        std::fs::write(ws.root().join("a.txt"), "").unwrap();
        std::fs::write(ws.root().join("src/main.rs"), "").unwrap();
        let tool = ListDir::new(ws);
        assert_eq!(
            call(&tool, r#"{"path":"."}"#).await.unwrap(),
            ToolOutput::Text("a.txt\nb.txt\nsrc/".into())
        );
        assert_eq!(
            call(&tool, r#"{"path":"src"}"#).await.unwrap(),
            ToolOutput::Text("inner/\nmain.rs".into())
        );
        assert_eq!(
            call(&tool, r#"{"path":"src/inner"}"#).await.unwrap(),
            ToolOutput::Text("(empty directory)".into())
        );
        let err = call(&tool, r#"{"path":"a.txt"}"#).await.unwrap_err();
        assert_eq!(err.0, "`a.txt` is not a directory");
    }

    #[tokio::test]
    async fn escapes_are_refused() {
        let (dir, ws) = workspace();
        std::os::unix::fs::symlink(dir.path(), ws.root().join("up")).unwrap();
        let tool = ListDir::new(ws);
        for path in [
            "..".to_owned(),
            "../..".to_owned(),
            "/".to_owned(),
            dir.path().display().to_string(),
            "up".to_owned(),
            ".\u{0}".to_owned(),
        ] {
            let args = serde_json::json!({ "path": path }).to_string();
            let err = call(&tool, &args).await.unwrap_err();
            assert!(
                err.0.contains("outside the workspace") || err.0.contains("NUL"),
                "{path}: {err}"
            );
        }
    }
}
