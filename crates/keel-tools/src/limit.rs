//! Result size limits: how much of a tool result the model is shown.
//!
//! A result larger than its budget keeps its beginning (two thirds of the budget) and its end
//! (one third), which is where commands and files usually say what matters, with a marker in
//! between saying how many bytes were cut. The budget follows the model's context limit.

use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};

/// Budget when the context limit is unknown.
pub const DEFAULT_BUDGET: usize = 64 * 1024;
/// No budget is smaller than this, however small the context.
pub const MIN_BUDGET: usize = 16 * 1024;

/// The marker put where `cut` bytes were removed.
pub fn cut_marker(cut: u64) -> String {
    format!("\n[... {cut} bytes truncated ...]\n")
}

/// The byte budget of one tool result for a model with `context_limit` tokens: a third of
/// the context, at about three bytes per token (the budget is context_limit/3 tokens × 3
/// bytes), never below [`MIN_BUDGET`]; [`DEFAULT_BUDGET`] when the limit is unknown.
pub fn budget_for(context_limit: Option<u64>) -> usize {
    match context_limit {
        None => DEFAULT_BUDGET,
        Some(limit) => {
            let bytes = (limit / 3).saturating_mul(3);
            usize::try_from(bytes).unwrap_or(usize::MAX).max(MIN_BUDGET)
        }
    }
}

/// `text` itself when it fits in `budget_bytes`, else its first two thirds of the budget and
/// its last third around a [`cut_marker`]. Cuts fall on character boundaries (the kept parts
/// may be a few bytes short of the budget); the marker comes on top of the budget.
pub fn truncate_result(text: &str, budget_bytes: usize) -> String {
    if text.len() <= budget_bytes {
        return text.to_owned();
    }
    let head_len = floor_char_boundary(text, budget_bytes - budget_bytes / 3);
    let tail_start = ceil_char_boundary(text, text.len() - budget_bytes / 3);
    let (head, tail) = (&text[..head_len], &text[tail_start..]);
    let cut = (tail_start - head_len) as u64;
    let mut out = String::with_capacity(head.len() + tail.len() + 40);
    out.push_str(head);
    out.push_str(&cut_marker(cut));
    out.push_str(tail);
    out
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// `output` cut to `budget_bytes`. Text and error messages are cut as text; a JSON value
/// whose serialisation is over budget can no longer stay JSON and becomes cut text.
pub fn limit_output(output: ToolOutput, budget_bytes: usize) -> ToolOutput {
    match output {
        ToolOutput::Text(text) => ToolOutput::Text(truncate_result(&text, budget_bytes)),
        ToolOutput::Error(text) => ToolOutput::Error(truncate_result(&text, budget_bytes)),
        ToolOutput::Json(value) => {
            let text = value.to_string();
            if text.len() <= budget_bytes {
                ToolOutput::Json(value)
            } else {
                ToolOutput::Text(truncate_result(&text, budget_bytes))
            }
        }
        media @ ToolOutput::Media { .. } => media,
    }
}

/// A tool whose results are cut to a byte budget.
pub struct Limited<T: ?Sized> {
    inner: Arc<T>,
    budget_bytes: usize,
}

impl<T: ?Sized> Limited<T> {
    pub fn new(inner: Arc<T>, budget_bytes: usize) -> Self {
        Self {
            inner,
            budget_bytes,
        }
    }
}

/// Wraps every tool in `tools` with the same budget.
pub fn limit_all(tools: Vec<Arc<dyn Tool>>, budget_bytes: usize) -> Vec<Arc<dyn Tool>> {
    tools
        .into_iter()
        .map(|tool| Arc::new(Limited::new(tool, budget_bytes)) as Arc<dyn Tool>)
        .collect()
}

#[async_trait]
impl<T: Tool + ?Sized> Tool for Limited<T> {
    fn definition(&self) -> ToolDefinition {
        self.inner.definition()
    }

    fn idempotent(&self) -> bool {
        self.inner.idempotent()
    }

    fn exclusive(&self) -> bool {
        self.inner.exclusive()
    }

    async fn call(&self, call: ToolCallRequest, cancel: Cancel) -> Result<ToolOutput, ToolError> {
        match self.inner.call(call, cancel).await {
            Ok(output) => Ok(limit_output(output, self.budget_bytes)),
            Err(ToolError(message)) => Err(ToolError(truncate_result(&message, self.budget_bytes))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_within_budget_is_unchanged() {
        assert_eq!(truncate_result("hello", 5), "hello");
        assert_eq!(truncate_result("", 0), "");
    }

    #[test]
    fn keeps_two_thirds_head_and_one_third_tail_with_exact_marker() {
        let text = "abcdefghijklmnopqrstuvwxyz"; // 26 bytes
        // Budget 9: head 6, tail 3, 17 cut.
        assert_eq!(
            truncate_result(text, 9),
            "abcdef\n[... 17 bytes truncated ...]\nxyz"
        );
    }

    #[test]
    fn never_splits_a_multibyte_character() {
        // 'é' is 2 bytes, '😀' 4 bytes.
        let text = "ééééé😀😀😀";
        for budget in 0..text.len() {
            let out = truncate_result(text, budget);
            let marker_at = out.find("\n[... ").unwrap();
            let (head, rest) = out.split_at(marker_at);
            let tail = rest.rsplit("]\n").next().unwrap();
            assert!(
                text.starts_with(head) && text.ends_with(tail),
                "{budget}: {out}"
            );
            assert!(head.len() + tail.len() <= budget, "{budget}: {out}");
            let cut = text.len() - head.len() - tail.len();
            assert!(out.contains(&format!("[... {cut} bytes truncated ...]")));
        }
        // Budget 7: the head would end inside the fourth 'é' (byte 5 of 10), the tail would
        // start inside the last emoji.
        assert_eq!(
            truncate_result(text, 7),
            "éé\n[... 18 bytes truncated ...]\n"
        );
        assert_eq!(
            truncate_result(text, 12),
            "éééé\n[... 10 bytes truncated ...]\n😀"
        );
    }

    #[test]
    fn budget_follows_the_context_limit() {
        assert_eq!(budget_for(None), 64 * 1024);
        assert_eq!(budget_for(Some(0)), 16 * 1024);
        assert_eq!(budget_for(Some(8_000)), 16 * 1024);
        assert_eq!(budget_for(Some(200_000)), 199_998);
        assert_eq!(budget_for(Some(1_047_576)), 1_047_576);
        assert_eq!(budget_for(Some(u64::MAX)), usize::MAX - usize::MAX % 3);
    }

    #[test]
    fn outputs_are_limited_by_kind() {
        let long = "x".repeat(100);
        let ToolOutput::Text(t) = limit_output(ToolOutput::Text(long.clone()), 30) else {
            panic!()
        };
        assert!(t.contains("[... 70 bytes truncated ...]"));
        let ToolOutput::Error(t) = limit_output(ToolOutput::Error(long.clone()), 30) else {
            panic!()
        };
        assert!(t.contains("bytes truncated"));
        let small = json!({"a": 1});
        assert_eq!(
            limit_output(ToolOutput::Json(small.clone()), 30),
            ToolOutput::Json(small)
        );
        let ToolOutput::Text(t) = limit_output(ToolOutput::Json(json!({ "a": long })), 30) else {
            panic!()
        };
        assert!(t.starts_with("{\"a\":\"xxx") && t.contains("bytes truncated"));
        let media = ToolOutput::Media {
            media_type: "image/png".into(),
            data: long,
        };
        assert_eq!(limit_output(media.clone(), 30), media);
    }

    struct Big;

    #[async_trait]
    impl Tool for Big {
        fn definition(&self) -> ToolDefinition {
            ToolDefinition::function("big", "", serde_json::Value::Null)
        }
        fn idempotent(&self) -> bool {
            true
        }
        async fn call(&self, _: ToolCallRequest, _: Cancel) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::Text("y".repeat(1000)))
        }
    }

    #[tokio::test]
    async fn limited_wraps_any_tool() {
        let tools = limit_all(vec![Arc::new(Big) as Arc<dyn Tool>], 90);
        let tool = &tools[0];
        assert_eq!(tool.definition().name, "big");
        assert!(tool.idempotent());
        let request = ToolCallRequest {
            tool_call_id: "1".into(),
            tool_name: "big".into(),
            args: "{}".into(),
        };
        let ToolOutput::Text(t) = tool.call(request, Cancel::new()).await.unwrap() else {
            panic!()
        };
        assert_eq!(
            t,
            format!(
                "{}\n[... 910 bytes truncated ...]\n{}",
                "y".repeat(60),
                "y".repeat(30)
            )
        );
    }
}
