//! What to do when a stream fails after it produced content.
//!
//! A [`StreamSnapshot`] records what the failed attempt left usable; [`choose_plan`] — a pure
//! function — picks one of four plans:
//!
//! | plan | when | what happens |
//! |---|---|---|
//! | R1 [`RecoveryPlan::ContinueText`] | text only | retry with the text as the assistant's prefix and stitch the continuation onto it |
//! | R2 [`RecoveryPlan::SynthesizeToolUse`] | at least one complete tool call | keep text and complete calls, cancel the in-flight call, finish as a tool-use step with no new request |
//! | R3 [`RecoveryPlan::TruncateBeforeTool`] | text and only a partial tool call | cancel the partial call, then continue as R1 |
//! | R4 [`RecoveryPlan::WholeRestart`] | nothing usable | void the live parts (`stream_reset`) and retry from scratch |

use serde::{Deserialize, Serialize};

use crate::accumulate::StepAccumulator;

/// A tool call as captured in a snapshot or checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
}

/// What a failed stream left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSnapshot {
    pub partial_text: String,
    /// Calls whose arguments completed and parse as JSON.
    pub completed_calls: Vec<CapturedCall>,
    /// The call whose arguments were still streaming.
    pub in_flight: Option<CapturedCall>,
    pub bytes_received: usize,
}

impl StreamSnapshot {
    /// Captures the usable content of the step so far.
    pub fn of(acc: &StepAccumulator) -> Self {
        let mut snapshot = StreamSnapshot {
            partial_text: acc.text(),
            ..Self::default()
        };
        for call in acc.tool_calls().filter(|c| !c.provider_executed) {
            let captured = CapturedCall {
                tool_call_id: call.tool_call_id.clone(),
                tool_name: call.tool_name.clone(),
                args: call.args.clone(),
            };
            snapshot.bytes_received += call.args.len();
            if call.complete && args_are_json(&call.args) {
                snapshot.completed_calls.push(captured);
            } else {
                snapshot.in_flight = Some(captured);
            }
        }
        snapshot.bytes_received += snapshot.partial_text.len();
        snapshot
    }
}

/// Empty arguments count as an empty object: some providers send none for argument-less
/// tools.
pub fn args_are_json(args: &str) -> bool {
    args.trim().is_empty() || serde_json::from_str::<serde_json::Value>(args).is_ok()
}

/// How to recover a stream that failed mid-way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryPlan {
    /// R1: continue the text from `prefix`.
    ContinueText { prefix: String },
    /// R2: finish the step with the completed calls; `cancelled` is the in-flight call.
    SynthesizeToolUse { cancelled: Option<CapturedCall> },
    /// R3: drop the partial call, then continue the text from `prefix`.
    TruncateBeforeTool {
        prefix: String,
        dropped: CapturedCall,
    },
    /// R4: start the step again from nothing.
    WholeRestart,
}

/// Picks the recovery plan for a snapshot.
pub fn choose_plan(snapshot: &StreamSnapshot) -> RecoveryPlan {
    let has_text = !snapshot.partial_text.trim().is_empty();
    if !snapshot.completed_calls.is_empty() {
        return RecoveryPlan::SynthesizeToolUse {
            cancelled: snapshot.in_flight.clone(),
        };
    }
    match (&snapshot.in_flight, has_text) {
        (Some(partial), true) => RecoveryPlan::TruncateBeforeTool {
            prefix: snapshot.partial_text.clone(),
            dropped: partial.clone(),
        },
        (None, true) => RecoveryPlan::ContinueText {
            prefix: snapshot.partial_text.clone(),
        },
        _ => RecoveryPlan::WholeRestart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, args: &str) -> CapturedCall {
        CapturedCall {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            args: args.into(),
        }
    }

    #[test]
    fn text_only_continues() {
        let s = StreamSnapshot {
            partial_text: "Hello wor".into(),
            ..Default::default()
        };
        assert_eq!(
            choose_plan(&s),
            RecoveryPlan::ContinueText {
                prefix: "Hello wor".into()
            }
        );
    }

    #[test]
    fn completed_calls_synthesize_tool_use_and_cancel_the_partial_one() {
        let s = StreamSnapshot {
            partial_text: "x".into(),
            completed_calls: vec![call("a", "{}")],
            in_flight: Some(call("b", "{\"pa")),
            bytes_received: 0,
        };
        assert_eq!(
            choose_plan(&s),
            RecoveryPlan::SynthesizeToolUse {
                cancelled: Some(call("b", "{\"pa"))
            }
        );
    }

    #[test]
    fn text_and_partial_call_truncates() {
        let s = StreamSnapshot {
            partial_text: "Let me look".into(),
            in_flight: Some(call("b", "{\"pa")),
            ..Default::default()
        };
        assert!(matches!(
            choose_plan(&s),
            RecoveryPlan::TruncateBeforeTool { .. }
        ));
    }

    #[test]
    fn nothing_usable_restarts() {
        assert_eq!(
            choose_plan(&StreamSnapshot::default()),
            RecoveryPlan::WholeRestart
        );
        let only_partial = StreamSnapshot {
            in_flight: Some(call("b", "{")),
            ..Default::default()
        };
        assert_eq!(choose_plan(&only_partial), RecoveryPlan::WholeRestart);
        let blank = StreamSnapshot {
            partial_text: "  \n".into(),
            ..Default::default()
        };
        assert_eq!(choose_plan(&blank), RecoveryPlan::WholeRestart);
    }

    #[test]
    fn truncated_json_is_not_a_completed_call() {
        assert!(!args_are_json("{\"path\": \"a"));
        assert!(args_are_json("{\"path\": \"a\"}"));
        assert!(args_are_json(""));
    }
}
