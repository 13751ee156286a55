//! A time limit on every tool call (`[tools] timeout_ms`): a call that runs longer is dropped
//! (which kills a command's process group and abandons an MCP request) and answers an error
//! result, so the model sees what happened and the run goes on.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};

/// The default limit on one tool call.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// The error result of a call that ran out of time.
pub fn timed_out(tool: &str, limit: Duration) -> ToolError {
    ToolError(format!(
        "tool `{tool}` did not finish within {} ms and was stopped",
        limit.as_millis()
    ))
}

/// Runs `call` for at most `limit`.
pub async fn within<F>(tool: &str, limit: Duration, call: F) -> Result<ToolOutput, ToolError>
where
    F: Future<Output = Result<ToolOutput, ToolError>>,
{
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(timed_out(tool, limit)))
}

/// A tool whose calls are limited to a duration.
pub struct Timed {
    inner: Arc<dyn Tool>,
    limit: Duration,
}

impl Timed {
    pub fn new(inner: Arc<dyn Tool>, limit: Duration) -> Self {
        Self { inner, limit }
    }
}

#[async_trait]
impl Tool for Timed {
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
        let name = call.tool_name.clone();
        within(&name, self.limit, self.inner.call(call, cancel)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Hangs;

    #[async_trait]
    impl Tool for Hangs {
        fn definition(&self) -> ToolDefinition {
            ToolDefinition::function("hangs", "never answers", serde_json::json!({}))
        }

        async fn call(&self, call: ToolCallRequest, _: Cancel) -> Result<ToolOutput, ToolError> {
            if call.args == "quick" {
                return Ok(ToolOutput::Text("done".into()));
            }
            std::future::pending().await
        }
    }

    fn request(args: &str) -> ToolCallRequest {
        ToolCallRequest {
            tool_call_id: "c".into(),
            tool_name: "hangs".into(),
            args: args.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_call_ends_with_an_error_result_at_the_limit() {
        let tool = Timed::new(Arc::new(Hangs), Duration::from_millis(250));
        let started = tokio::time::Instant::now();
        let err = tool.call(request("{}"), Cancel::new()).await.unwrap_err();
        assert_eq!(
            err.0,
            "tool `hangs` did not finish within 250 ms and was stopped"
        );
        assert_eq!(started.elapsed(), Duration::from_millis(250));
        let out = tool.call(request("quick"), Cancel::new()).await.unwrap();
        assert_eq!(out, ToolOutput::Text("done".into()));
    }
}
