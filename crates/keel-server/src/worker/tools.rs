//! Tool calls with durable intent and result records.
//!
//! Before a tool runs its intent is recorded; after, its result. A worker that resumes a
//! step after a crash therefore never runs a finished tool again (it reuses the recorded
//! result) and reports a tool that was running as interrupted — unless the tool declares
//! itself idempotent, in which case it simply runs again. A record stands for a call only if
//! the id, the tool name and the arguments all match, and records live only as long as the
//! step they belong to (committing a step clears them).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};
use keel_store::{ChatId, Store, ToolRecord, ToolState};
use serde_json::Value;

use crate::metrics::{Metrics, ToolLabels};
use crate::worker::leases::{SharedLease, current};

/// What a resumed step's earlier process left behind.
pub(super) type PriorRecords = Arc<HashMap<String, ToolRecord>>;

pub(super) const RESTARTED_RESULT: &str = "tool call was interrupted by a daemon restart before it produced a result; it was not run again";

/// The result of a call whose intent could not be recorded.
fn not_started(error: &keel_store::StoreError) -> String {
    format!("tool call was not run: its start could not be recorded ({error})")
}

pub(super) struct DurableTool {
    pub inner: Arc<dyn Tool>,
    pub chat_id: ChatId,
    pub store: Arc<dyn Store>,
    pub lease: SharedLease,
    pub prior: PriorRecords,
    pub metrics: Arc<Metrics>,
}

impl DurableTool {
    async fn record(
        &self,
        request: &ToolCallRequest,
        state: ToolState,
        result: Option<(Value, bool)>,
    ) -> Result<(), keel_store::StoreError> {
        let now = chrono::Utc::now();
        let (result, is_error) = match result {
            Some((value, is_error)) => (Some(value), is_error),
            None => (None, false),
        };
        let record = ToolRecord {
            chat_id: self.chat_id,
            tool_call_id: request.tool_call_id.clone(),
            tool_name: request.tool_name.clone(),
            args: request.args.clone(),
            state,
            result,
            is_error,
            started_at: now,
            finished_at: (state == ToolState::Finished).then_some(now),
        };
        let recorded = self.store.record_tool(&current(&self.lease), record).await;
        if let Err(error) = &recorded {
            tracing::warn!(chat = %self.chat_id, tool = %request.tool_name, %error, "recording a tool call failed");
        }
        recorded
    }

    fn count(&self, tool: &str, outcome: &str) {
        self.metrics
            .tool_calls
            .get_or_create(&ToolLabels {
                tool: tool.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }
}

/// Whether a record is the one of this call: same id, tool and arguments.
fn same_call(record: &ToolRecord, request: &ToolCallRequest) -> bool {
    record.tool_call_id == request.tool_call_id
        && record.tool_name == request.tool_name
        && record.args == request.args
}

#[async_trait]
impl Tool for DurableTool {
    fn definition(&self) -> ToolDefinition {
        self.inner.definition()
    }

    fn idempotent(&self) -> bool {
        self.inner.idempotent()
    }

    fn exclusive(&self) -> bool {
        self.inner.exclusive()
    }

    async fn call(
        &self,
        request: ToolCallRequest,
        cancel: Cancel,
    ) -> Result<ToolOutput, ToolError> {
        if let Some(prior) = self
            .prior
            .get(&request.tool_call_id)
            .filter(|prior| same_call(prior, &request))
        {
            match (prior.state, &prior.result) {
                (ToolState::Finished, Some(result)) => {
                    self.count(&request.tool_name, "replayed");
                    return Ok(if prior.is_error {
                        ToolOutput::Error(
                            result
                                .as_str()
                                .map_or_else(|| result.to_string(), str::to_owned),
                        )
                    } else {
                        ToolOutput::Json(result.clone())
                    });
                }
                _ if !self.inner.idempotent() => {
                    self.count(&request.tool_name, "interrupted");
                    return Ok(ToolOutput::Error(RESTARTED_RESULT.to_owned()));
                }
                _ => {}
            }
        }
        // No intent on record, no run: a restart could not tell that the tool ran. The write
        // is fenced on the lease, so a run that lost its chat runs no more tools either.
        if let Err(error) = self.record(&request, ToolState::Started, None).await {
            self.count(&request.tool_name, "not_started");
            return Ok(ToolOutput::Error(not_started(&error)));
        }
        let outcome = self.inner.call(request.clone(), cancel.clone()).await;
        if cancel.is_cancelled() {
            // The run was stopped while the tool ran; the loop reports the call itself.
            self.count(&request.tool_name, "cancelled");
            return outcome;
        }
        let (result, is_error) = match &outcome {
            Ok(output) => output.clone().into_result(),
            Err(error) => (Value::String(error.0.clone()), true),
        };
        self.count(&request.tool_name, if is_error { "error" } else { "ok" });
        // A result that cannot be recorded is still the result; a restart reports the call
        // as interrupted rather than running it again.
        let _ = self
            .record(&request, ToolState::Finished, Some((result, is_error)))
            .await;
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, name: &str, args: &str) -> ToolRecord {
        let now = chrono::Utc::now();
        ToolRecord {
            chat_id: ChatId::new_v4(),
            tool_call_id: id.into(),
            tool_name: name.into(),
            args: args.into(),
            state: ToolState::Finished,
            result: Some(Value::String("a".into())),
            is_error: false,
            started_at: now,
            finished_at: Some(now),
        }
    }

    fn request(id: &str, name: &str, args: &str) -> ToolCallRequest {
        ToolCallRequest {
            tool_call_id: id.into(),
            tool_name: name.into(),
            args: args.into(),
        }
    }

    #[test]
    fn a_record_answers_only_the_same_id_tool_and_arguments() {
        let r = record("call_0", "read_file", r#"{"path":"a"}"#);
        assert!(same_call(
            &r,
            &request("call_0", "read_file", r#"{"path":"a"}"#)
        ));
        assert!(!same_call(
            &r,
            &request("call_0", "read_file", r#"{"path":"b"}"#)
        ));
        assert!(!same_call(
            &r,
            &request("call_0", "list_dir", r#"{"path":"a"}"#)
        ));
        assert!(!same_call(
            &r,
            &request("call_1", "read_file", r#"{"path":"a"}"#)
        ));
    }
}
