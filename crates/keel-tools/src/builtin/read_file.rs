//! `read_file`: a text file of the workspace, whole or a 1-based inclusive line range.

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::args;
use crate::open::{self, ReadError};

const NAME: &str = super::BuiltinTool::ReadFile.name();

/// Larger files are refused rather than loaded whole into memory; the model can page through
/// them with `run_command` (`sed -n`, `head`, `tail`).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Path of the file, relative to the workspace.
    path: String,
    /// First line to return (1-based, inclusive). Defaults to the first line.
    #[serde(default)]
    #[schemars(range(min = 1))]
    start_line: Option<usize>,
    /// Last line to return (1-based, inclusive). Defaults to the last line.
    #[serde(default)]
    #[schemars(range(min = 1))]
    end_line: Option<usize>,
}

super::workspace_tool! {
    /// Reads a file of the workspace.
    ReadFile
}

#[async_trait]
impl Tool for ReadFile {
    fn definition(&self) -> ToolDefinition {
        args::tool_definition!(
            Args,
            NAME,
            "Read a text file of the workspace. Optionally only the lines start_line..=end_line \
             (1-based, inclusive).",
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
        if path.is_dir() {
            return Err(ToolError(format!(
                "`{}` is a directory; use list_dir to see its entries",
                args.path
            )));
        }
        let bytes = open::read_to_end(
            self.workspace.root().to_path_buf(),
            path,
            args.path.clone(),
            MAX_FILE_BYTES,
        )
        .await
        .map_err(|e| match e {
            ReadError::TooLarge { size } => ToolError(format!(
                "`{}` is {size} bytes, more than read_file reads ({MAX_FILE_BYTES}); use \
                     run_command with head, tail or sed -n to read parts of it",
                args.path
            )),
            ReadError::Open(e) => ToolError(e.to_string()),
        })?;
        // Invalid UTF-8 is shown with replacement characters rather than refused: a mostly
        // textual file with a stray byte is still worth reading.
        let text = String::from_utf8_lossy(&bytes);
        if args.start_line.is_none() && args.end_line.is_none() {
            return Ok(ToolOutput::Text(text.into_owned()));
        }
        select_lines(&text, args.start_line, args.end_line)
            .map(ToolOutput::Text)
            .map_err(ToolError)
    }
}

/// Lines `start..=end` (1-based) with their line endings, so the slice is exact file content.
fn select_lines(text: &str, start: Option<usize>, end: Option<usize>) -> Result<String, String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let count = lines.len();
    if start == Some(0) || end == Some(0) {
        return Err("line numbers start at 1".to_owned());
    }
    if let (Some(start), Some(end)) = (start, end)
        && start > end
    {
        return Err(format!("start_line {start} is after end_line {end}"));
    }
    let start = start.unwrap_or(1);
    let end = end.unwrap_or(count);
    if start > count {
        return Err(format!(
            "start_line {start} is past the end of the file, which has {count} lines"
        ));
    }
    let end = end.min(count);
    Ok(lines[start - 1..end].concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::{call, workspace};
    use crate::workspace::Workspace;

    #[tokio::test]
    async fn reads_whole_file_and_line_ranges() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.root().join("f.txt"), "one\ntwo\nthree\nfour").unwrap();
        let tool = ReadFile::new(ws);
        assert_eq!(
            call(&tool, r#"{"path":"f.txt"}"#).await.unwrap(),
            ToolOutput::Text("one\ntwo\nthree\nfour".into())
        );
        assert_eq!(
            call(&tool, r#"{"path":"f.txt","start_line":2,"end_line":3}"#)
                .await
                .unwrap(),
            ToolOutput::Text("two\nthree\n".into())
        );
        assert_eq!(
            call(&tool, r#"{"path":"f.txt","start_line":3}"#)
                .await
                .unwrap(),
            ToolOutput::Text("three\nfour".into())
        );
        assert_eq!(
            call(&tool, r#"{"path":"f.txt","end_line":1}"#)
                .await
                .unwrap(),
            ToolOutput::Text("one\n".into())
        );
        // An end past the last line is clamped.
        assert_eq!(
            call(&tool, r#"{"path":"f.txt","start_line":4,"end_line":99}"#)
                .await
                .unwrap(),
            ToolOutput::Text("four".into())
        );
    }

    #[tokio::test]
    async fn bad_ranges_are_errors() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.root().join("f.txt"), "a\nb\n").unwrap();
        let tool = ReadFile::new(ws);
        let err = call(&tool, r#"{"path":"f.txt","start_line":5}"#)
            .await
            .unwrap_err();
        assert_eq!(
            err.0,
            "start_line 5 is past the end of the file, which has 2 lines"
        );
        let err = call(&tool, r#"{"path":"f.txt","start_line":2,"end_line":1}"#)
            .await
            .unwrap_err();
        assert_eq!(err.0, "start_line 2 is after end_line 1");
        let err = call(&tool, r#"{"path":"f.txt","start_line":0}"#)
            .await
            .unwrap_err();
        assert_eq!(err.0, "line numbers start at 1");
    }

    #[tokio::test]
    async fn missing_files_directories_and_bad_args_are_errors() {
        let (_dir, ws) = workspace();
        std::fs::create_dir(ws.root().join("d")).unwrap();
        let tool = ReadFile::new(ws);
        let err = call(&tool, r#"{"path":"nope.txt"}"#).await.unwrap_err();
        assert_eq!(err.0, "path `nope.txt` does not exist");
        let err = call(&tool, r#"{"path":"d"}"#).await.unwrap_err();
        assert!(err.0.contains("is a directory"), "{err}");
        let err = call(&tool, r#"{"path":1}"#).await.unwrap_err();
        assert!(
            err.0.starts_with("invalid arguments for read_file"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn huge_files_are_refused() {
        let (_dir, ws) = workspace();
        let file = std::fs::File::create(ws.root().join("big.log")).unwrap();
        // Sparse: no data is written.
        file.set_len(MAX_FILE_BYTES + 1).unwrap();
        let tool = ReadFile::new(ws);
        let err = call(&tool, r#"{"path":"big.log"}"#).await.unwrap_err();
        assert!(err.0.starts_with("`big.log` is 16777217 bytes"), "{err}");
    }

    #[tokio::test]
    async fn a_fifo_is_refused_without_blocking() {
        let (_dir, ws) = workspace();
        nix::unistd::mkfifo(&ws.root().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let tool = ReadFile::new(ws);
        let err = call(&tool, r#"{"path":"pipe"}"#).await.unwrap_err();
        assert_eq!(err.0, "`pipe` is not a regular file");
    }

    #[test]
    fn line_numbers_start_at_one_in_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let tool = ReadFile::new(Workspace::new(dir.path()).unwrap());
        let params = tool.definition().parameters;
        assert_eq!(params["properties"]["start_line"]["minimum"], 1);
        assert_eq!(params["properties"]["end_line"]["minimum"], 1);
    }

    #[tokio::test]
    async fn escapes_are_refused() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.root().join("link")).unwrap();
        let tool = ReadFile::new(ws);
        let abs = dir.path().join("secret");
        for path in [
            "../secret".to_owned(),
            abs.display().to_string(),
            "link".to_owned(),
            "a\u{0}b".to_owned(),
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
