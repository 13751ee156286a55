//! Streaming a summary and committing it as the chat's new starting point.
//!
//! The summary is one more model call on the history plus [`SUMMARY_INSTRUCTION`], streamed
//! through the same attempt machinery as a step (live parts, retries, recovery, interrupts).
//! Tools stay defined so the prompt matches the chat's other requests, but the model may not
//! call them. Nothing is committed unless the summary is complete.

use std::collections::HashSet;

use keel_core::{CancelCause, Message, PartKind, ToolChoice};

use crate::accumulate::StepAccumulator;
use crate::compaction::{SUMMARY_INSTRUCTION, SummaryRecord};
use crate::context_limit;
use crate::persist::PersistError;
use crate::response::assistant_message;
use crate::run::{Compacted, RunError, Runner, StepEnd};

/// The history for a summary prompt: tool calls that have no result yet (client-side calls
/// the run is about to hand over) are left out, since every provider rejects a tool call
/// without its result; a message left empty is dropped.
pub(crate) fn without_unanswered_calls(history: &[Message]) -> Vec<Message> {
    let answered: HashSet<&str> = history
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|p| match &p.kind {
            PartKind::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    history
        .iter()
        .filter_map(|m| {
            let parts: Vec<_> = m
                .parts
                .iter()
                .filter(|p| match &p.kind {
                    PartKind::ToolCall {
                        tool_call_id,
                        provider_executed: false,
                        ..
                    } => answered.contains(tool_call_id.as_str()),
                    _ => true,
                })
                .cloned()
                .collect();
            (!parts.is_empty()).then(|| Message { parts, ..m.clone() })
        })
        .collect()
}

impl Runner {
    /// Summarises `history` and replaces it with the committed prompt history.
    pub(crate) async fn compact(
        &mut self,
        history: &mut Vec<Message>,
    ) -> Result<Compacted, RunError> {
        let span = crate::trace::compaction();
        tracing::Instrument::instrument(self.summarize(history), span).await
    }

    async fn summarize(&mut self, history: &mut Vec<Message>) -> Result<Compacted, RunError> {
        let Some(compaction) = self.options.compaction.clone() else {
            return Ok(Compacted::Done);
        };
        let mut prompt = without_unanswered_calls(history);
        prompt.push(Message::user(SUMMARY_INSTRUCTION));

        // A summary is never resumed from a step checkpoint nor chained onto a stored
        // response: it must see the whole history and must not call tools.
        let saved_options = self.options.call_options.clone();
        let saved_checkpointing = self.options.checkpointing.take();
        self.options.call_options.tool_choice = ToolChoice::None;
        self.options.call_options.previous_response_id = None;
        let mut acc = StepAccumulator::new();
        compaction.hooks.summary_started();
        let end = self.stream_step(usize::MAX, &mut prompt, &mut acc).await;
        self.options.call_options = saved_options;
        self.options.checkpointing = saved_checkpointing;

        match end {
            StepEnd::Finished => {}
            StepEnd::Cancelled => return self.cancelled().map_err(|e| *e),
            StepEnd::Failed(error) => return Err(*error),
        }
        if self.cancel.is_cancelled() {
            return self.cancelled().map_err(|e| *e);
        }
        let now = self.options.clock.now();
        let text = assistant_message(&acc, true, now)
            .map(|m| m.text())
            .unwrap_or_default();
        if text.trim().is_empty() {
            return Err(RunError::Compaction(
                "the model returned an empty summary".to_owned(),
            ));
        }
        let record = SummaryRecord {
            text,
            usage: acc.usage,
            context_limit: context_limit::resolve(
                acc.provider_metadata.as_ref(),
                self.options.context_limit_fallback,
            ),
        };
        match compaction.hooks.commit_summary(record).await {
            Ok(fresh) => {
                *history = fresh;
                // The stored response chain holds everything the summary replaced: later
                // steps start from the summary, never from that chain.
                self.options.call_options.previous_response_id = None;
                Ok(Compacted::Done)
            }
            Err(PersistError::Interrupted) => Ok(Compacted::Interrupted),
            Err(error) => Err(RunError::Persist(error)),
        }
    }

    fn cancelled(&self) -> Result<Compacted, Box<RunError>> {
        if self.cancel.cause() == Some(CancelCause::Interrupted) {
            Ok(Compacted::Interrupted)
        } else {
            Err(Box::new(RunError::Cancelled))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::{Part, Role};
    use serde_json::Value;

    #[test]
    fn a_summary_prompt_carries_no_call_without_its_result() {
        let history = vec![
            Message::user("weather and notes?"),
            Message::new(
                Role::Assistant,
                vec![
                    Part::text("checking"),
                    Part::tool_call("local", "read_file", "{}", false),
                    Part::tool_call("client", "get_weather", "{}", false),
                ],
            ),
            Message::new(
                Role::Tool,
                vec![Part::tool_result(
                    "local",
                    "read_file",
                    Value::Null,
                    false,
                    false,
                )],
            ),
            Message::new(
                Role::Assistant,
                vec![Part::tool_call("client2", "get_weather", "{}", false)],
            ),
        ];
        let prompt = without_unanswered_calls(&history);
        assert_eq!(
            prompt.len(),
            3,
            "the message of only a pending call is dropped"
        );
        let ids: Vec<&str> = prompt
            .iter()
            .flat_map(|m| &m.parts)
            .filter_map(|p| match &p.kind {
                PartKind::ToolCall { tool_call_id, .. } => Some(tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["local"]);
    }
}
