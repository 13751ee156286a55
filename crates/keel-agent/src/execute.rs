//! Runs one step's local tool calls concurrently.
//!
//! Every call gets a result, whatever happens: a panic becomes `tool panicked: …`, an
//! unknown name `tool not found: NAME`, and a call still running when the run is cancelled
//! is left without a result here (the caller decides: a synthetic "interrupted" result on a
//! user interrupt, nothing on shutdown). Results come back in the order of the calls.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use keel_core::Cancel;
use tokio::task::JoinSet;

use crate::tool::{Tool, ToolCallRequest, ToolOutput};
use keel_core::Clock;

/// The result of one finished call.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedCall {
    pub request: ToolCallRequest,
    pub output: ToolOutput,
    pub finished_at: DateTime<Utc>,
}

/// What running a batch produced.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Finished calls in call order.
    pub finished: Vec<FinishedCall>,
    /// The batch was cut short by cancellation; calls missing from `finished` did not finish.
    pub cancelled: bool,
}

/// Runs `calls` concurrently against `tools`. Returns when all finished or when `cancel`
/// fires; on cancellation the still-running calls are aborted (dropping their futures, which
/// kills child processes they own) after being told through their cancel token.
pub async fn run_batch(
    calls: Vec<ToolCallRequest>,
    tools: &HashMap<String, Arc<dyn Tool>>,
    cancel: &Cancel,
    clock: &Arc<dyn Clock>,
    capture_content: bool,
) -> BatchOutcome {
    if let Some(refusal) = exclusive_refusal(&calls, tools) {
        let finished = calls
            .into_iter()
            .map(|request| FinishedCall {
                output: ToolOutput::Error(refusal.clone()),
                request,
                finished_at: clock.now(),
            })
            .collect();
        return BatchOutcome {
            finished,
            cancelled: false,
        };
    }

    let mut slots: Vec<Option<FinishedCall>> = vec![None; calls.len()];
    let mut set = JoinSet::new();
    let tool_cancel = cancel.child();
    let mut index_of_task = HashMap::new();
    for (index, request) in calls.iter().cloned().enumerate() {
        let Some(tool) = tools.get(&request.tool_name).cloned() else {
            slots[index] = Some(FinishedCall {
                output: ToolOutput::Error(format!("tool not found: {}", request.tool_name)),
                request,
                finished_at: clock.now(),
            });
            continue;
        };
        let token = tool_cancel.clone();
        let span = crate::trace::tool_call(&request, capture_content);
        let traced = span.clone();
        let call = async move {
            let outcome = tool.call(request, token).await;
            crate::trace::tool_result(&traced, &outcome, capture_content);
            outcome
        };
        let handle = set.spawn(tracing::Instrument::instrument(call, span));
        index_of_task.insert(handle.id(), index);
    }

    let mut cancelled = false;
    while !set.is_empty() {
        let joined = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                cancelled = true;
                break;
            }
            joined = set.join_next_with_id() => joined,
        };
        let Some(joined) = joined else { break };
        let (id, output) = match joined {
            Ok((id, Ok(output))) => (id, output),
            Ok((id, Err(error))) => (id, ToolOutput::Error(error.0)),
            Err(join_error) => {
                let id = join_error.id();
                let message = if join_error.is_panic() {
                    format!("tool panicked: {}", panic_message(join_error.into_panic()))
                } else {
                    "tool was aborted".to_owned()
                };
                (id, ToolOutput::Error(message))
            }
        };
        if let Some(&index) = index_of_task.get(&id) {
            slots[index] = Some(FinishedCall {
                request: calls[index].clone(),
                output,
                finished_at: clock.now(),
            });
        }
    }
    if cancelled {
        // Results that raced in with the cancellation still count: they finished.
        while let Some(Ok((id, Ok(output)))) = set.try_join_next_with_id() {
            if let Some(&index) = index_of_task.get(&id) {
                slots[index] = Some(FinishedCall {
                    request: calls[index].clone(),
                    output,
                    finished_at: clock.now(),
                });
            }
        }
        set.abort_all();
    }
    BatchOutcome {
        finished: slots.into_iter().flatten().collect(),
        cancelled,
    }
}

/// When a call to an exclusive tool shares its batch with other calls, none may run.
fn exclusive_refusal(
    calls: &[ToolCallRequest],
    tools: &HashMap<String, Arc<dyn Tool>>,
) -> Option<String> {
    if calls.len() < 2 {
        return None;
    }
    let exclusive: Vec<&str> = calls
        .iter()
        .filter(|c| tools.get(&c.tool_name).is_some_and(|t| t.exclusive()))
        .map(|c| c.tool_name.as_str())
        .collect();
    (!exclusive.is_empty()).then(|| {
        format!(
            "tool {} must run alone; call it in a step of its own (no call in this step was run)",
            exclusive.join(", ")
        )
    })
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}
