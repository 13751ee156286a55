//! `write_file`: creates or replaces a file of the workspace, creating its parent directories.

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::args;
use crate::open;

const NAME: &str = super::BuiltinTool::WriteFile.name();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Path of the file, relative to the workspace. Missing parent directories are created.
    path: String,
    /// The complete new content of the file.
    content: String,
}

super::workspace_tool! {
    /// Writes a file of the workspace.
    WriteFile
}

#[async_trait]
impl Tool for WriteFile {
    fn definition(&self) -> ToolDefinition {
        args::tool_definition!(
            Args,
            NAME,
            "Create or overwrite a file of the workspace with the given content. Parent \
             directories are created as needed.",
        )
    }

    /// Writing the same content twice leaves the same file.
    fn idempotent(&self) -> bool {
        true
    }

    async fn call(&self, call: ToolCallRequest, _cancel: Cancel) -> Result<ToolOutput, ToolError> {
        let args: Args = args::parse(NAME, &call.args)?;
        let path = self
            .workspace
            .resolve(&args.path)
            .map_err(|e| ToolError(e.to_string()))?;
        if path.is_dir() {
            return Err(ToolError(format!("`{}` is a directory", args.path)));
        }
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| {
                ToolError(format!(
                    "cannot create the directories of `{}`: {e}",
                    args.path
                ))
            })?;
        }
        let written = args.content.len();
        open::write_all(
            self.workspace.root().to_path_buf(),
            path.clone(),
            args.path.clone(),
            args.content.into_bytes(),
        )
        .await
        .map_err(|e| ToolError(e.to_string()))?;
        Ok(ToolOutput::Text(format!(
            "wrote {} bytes to {}",
            written,
            self.workspace.display(&path)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::{call, workspace};

    #[tokio::test]
    async fn writes_and_creates_parent_directories() {
        let (_dir, ws) = workspace();
        let root = ws.root().to_path_buf();
        let tool = WriteFile::new(ws);
        let out = call(&tool, r#"{"path":"a/b/c.txt","content":"héllo"}"#)
            .await
            .unwrap();
        assert_eq!(out, ToolOutput::Text("wrote 6 bytes to a/b/c.txt".into()));
        assert_eq!(
            std::fs::read_to_string(root.join("a/b/c.txt")).unwrap(),
            "héllo"
        );
        // Overwrites.
        call(&tool, r#"{"path":"a/b/c.txt","content":"x"}"#)
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("a/b/c.txt")).unwrap(),
            "x"
        );
        assert!(tool.idempotent());
    }

    #[tokio::test]
    async fn escapes_are_refused_and_nothing_is_written() {
        let (dir, ws) = workspace();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, ws.root().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("new"), ws.root().join("dangling")).unwrap();
        let tool = WriteFile::new(ws);
        let abs = outside.join("abs.txt");
        for path in [
            "../outside/x.txt".to_owned(),
            "sub/../../outside/y.txt".to_owned(),
            abs.display().to_string(),
            "link/z.txt".to_owned(),
            "dangling".to_owned(),
            "a\u{0}b".to_owned(),
        ] {
            let args = serde_json::json!({ "path": path, "content": "pwned" }).to_string();
            let err = call(&tool, &args).await.unwrap_err();
            assert!(
                err.0.contains("outside the workspace") || err.0.contains("NUL"),
                "{path}: {err}"
            );
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        assert!(!dir.path().join("ws/sub").exists());
    }
}
