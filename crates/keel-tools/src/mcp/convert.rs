//! How an MCP `tools/call` result becomes a [`ToolOutput`].
//!
//! * `isError` → [`ToolOutput::Error`] with the text content;
//! * structured content → [`ToolOutput::Json`];
//! * text only → [`ToolOutput::Text`] (blocks joined by newlines);
//! * one image or audio block alone → [`ToolOutput::Media`];
//! * any other mix → [`ToolOutput::Json`] of the content blocks as MCP writes them, so
//!   nothing is dropped.

use keel_agent::ToolOutput;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;

pub(super) fn to_output(result: CallToolResult) -> ToolOutput {
    if result.is_error == Some(true) {
        let text = texts(&result.content).unwrap_or_default();
        return ToolOutput::Error(if text.is_empty() {
            "the MCP tool reported an error without a message".to_owned()
        } else {
            text
        });
    }
    if let Some(value) = result.structured_content {
        return ToolOutput::Json(value);
    }
    if let Some(text) = texts(&result.content) {
        return ToolOutput::Text(text);
    }
    if let [only] = result.content.as_slice() {
        match only {
            ContentBlock::Image(image) => {
                return ToolOutput::Media {
                    media_type: image.mime_type.clone(),
                    data: image.data.clone(),
                };
            }
            ContentBlock::Audio(audio) => {
                return ToolOutput::Media {
                    media_type: audio.mime_type.clone(),
                    data: audio.data.clone(),
                };
            }
            _ => {}
        }
    }
    ToolOutput::Json(serde_json::to_value(&result.content).unwrap_or(Value::Null))
}

/// The text of the blocks when every block is text (or an embedded text resource).
fn texts(content: &[ContentBlock]) -> Option<String> {
    let parts: Option<Vec<&str>> = content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { text, .. } => Some(text.as_str()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    parts.map(|parts| parts.join("\n"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn maps_each_kind_of_result() {
        let text = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(to_output(text), ToolOutput::Text("a\nb".into()));

        let mut structured = CallToolResult::success(vec![ContentBlock::text("{\"sum\":3}")]);
        structured.structured_content = Some(json!({"sum": 3}));
        assert_eq!(to_output(structured), ToolOutput::Json(json!({"sum": 3})));

        let image = CallToolResult::success(vec![ContentBlock::image("AAAA", "image/png")]);
        assert_eq!(
            to_output(image),
            ToolOutput::Media {
                media_type: "image/png".into(),
                data: "AAAA".into()
            }
        );

        let error = CallToolResult::error(vec![ContentBlock::text("boom")]);
        assert_eq!(to_output(error), ToolOutput::Error("boom".into()));

        let mixed = CallToolResult::success(vec![
            ContentBlock::text("look"),
            ContentBlock::image("AAAA", "image/png"),
        ]);
        let ToolOutput::Json(Value::Array(blocks)) = to_output(mixed) else {
            panic!()
        };
        assert_eq!(blocks[1]["type"], "image");

        assert_eq!(
            to_output(CallToolResult::success(vec![])),
            ToolOutput::Text(String::new())
        );
    }
}
