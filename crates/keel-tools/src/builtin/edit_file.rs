//! `edit_file`: replaces one exact, unique occurrence of a string in a workspace file.

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::args;
use crate::builtin::read_file::MAX_FILE_BYTES;
use crate::open;

const NAME: &str = super::BuiltinTool::EditFile.name();

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Path of the file, relative to the workspace.
    path: String,
    /// The exact text to replace. It must occur exactly once in the file.
    old: String,
    /// The replacement text.
    new: String,
}

super::workspace_tool! {
    /// Edits a file of the workspace by exact string replacement.
    EditFile
}

#[async_trait]
impl Tool for EditFile {
    fn definition(&self) -> ToolDefinition {
        args::tool_definition!(
            Args,
            NAME,
            "Replace the exact text `old` with `new` in a file of the workspace. `old` must occur \
             exactly once; include surrounding lines to make it unique.",
        )
    }

    async fn call(&self, call: ToolCallRequest, _cancel: Cancel) -> Result<ToolOutput, ToolError> {
        let args: Args = args::parse(NAME, &call.args)?;
        if args.old.is_empty() {
            return Err(ToolError("`old` must not be empty".to_owned()));
        }
        let path = self
            .workspace
            .resolve_existing(&args.path)
            .map_err(|e| ToolError(e.to_string()))?;
        let bytes = open::read_to_end(
            self.workspace.root().to_path_buf(),
            path.clone(),
            args.path.clone(),
            MAX_FILE_BYTES,
        )
        .await
        .map_err(|e| ToolError(format!("cannot edit `{}`: {e}", args.path)))?;
        let text = String::from_utf8(bytes)
            .map_err(|e| ToolError(format!("cannot read `{}` as text: {e}", args.path)))?;
        let edited = replace_unique(&text, &args.old, &args.new).map_err(|count| {
            ToolError(if count == 0 {
                format!("`old` was not found in {}", args.path)
            } else {
                format!(
                    "`old` was found {count} times in {}; it must occur exactly once, so include \
                     more surrounding text",
                    args.path
                )
            })
        })?;
        open::write_all(
            self.workspace.root().to_path_buf(),
            path.clone(),
            args.path.clone(),
            edited.into_bytes(),
        )
        .await
        .map_err(|e| ToolError(e.to_string()))?;
        Ok(ToolOutput::Text(format!(
            "edited {}",
            self.workspace.display(&path)
        )))
    }
}

/// `text` with its only occurrence of `old` replaced, or the number of occurrences when that
/// is not exactly one. Occurrences are counted without overlap, as `str::matches` does.
fn replace_unique(text: &str, old: &str, new: &str) -> Result<String, usize> {
    let mut found = text.match_indices(old);
    match (found.next(), found.next()) {
        (Some((at, _)), None) => {
            let mut out = String::with_capacity(text.len() - old.len() + new.len());
            out.push_str(&text[..at]);
            out.push_str(new);
            out.push_str(&text[at + old.len()..]);
            Ok(out)
        }
        (None, _) => Err(0),
        (Some(_), Some(_)) => Err(2 + found.count()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::{call, workspace};

    #[tokio::test]
    async fn replaces_a_unique_occurrence() {
        let (_dir, ws) = workspace();
        let file = ws.root().join("f.rs");
        std::fs::write(&file, "fn a() {}\nfn b() {}\n").unwrap();
        let tool = EditFile::new(ws);
        let out = call(&tool, r#"{"path":"f.rs","old":"fn b","new":"fn c"}"#)
            .await
            .unwrap();
        assert_eq!(out, ToolOutput::Text("edited f.rs".into()));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "fn a() {}\nfn c() {}\n"
        );
        assert!(!tool.idempotent());
    }

    #[tokio::test]
    async fn not_found_and_not_unique_are_clear_errors() {
        let (_dir, ws) = workspace();
        let file = ws.root().join("f.txt");
        std::fs::write(&file, "x x x").unwrap();
        let tool = EditFile::new(ws);
        let err = call(&tool, r#"{"path":"f.txt","old":"y","new":"z"}"#)
            .await
            .unwrap_err();
        assert_eq!(err.0, "`old` was not found in f.txt");
        let err = call(&tool, r#"{"path":"f.txt","old":"x","new":"z"}"#)
            .await
            .unwrap_err();
        assert!(
            err.0.starts_with("`old` was found 3 times in f.txt"),
            "{err}"
        );
        let err = call(&tool, r#"{"path":"f.txt","old":"","new":"z"}"#)
            .await
            .unwrap_err();
        assert_eq!(err.0, "`old` must not be empty");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x x x");
    }

    #[test]
    fn counts_twice_exactly() {
        assert_eq!(replace_unique("aXbXc", "X", "-"), Err(2));
        assert_eq!(replace_unique("aaaa", "aa", "-"), Err(2));
        assert_eq!(replace_unique("abc", "b", "é").unwrap(), "aéc");
    }

    #[tokio::test]
    async fn escapes_are_refused() {
        let (dir, ws) = workspace();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "keep").unwrap();
        std::os::unix::fs::symlink(&secret, ws.root().join("link")).unwrap();
        let tool = EditFile::new(ws);
        for path in [
            "../secret".to_owned(),
            secret.display().to_string(),
            "link".to_owned(),
            "a\u{0}b".to_owned(),
        ] {
            let args =
                serde_json::json!({ "path": path, "old": "keep", "new": "lost" }).to_string();
            let err = call(&tool, &args).await.unwrap_err();
            assert!(
                err.0.contains("outside the workspace") || err.0.contains("NUL"),
                "{path}: {err}"
            );
        }
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
    }
}
