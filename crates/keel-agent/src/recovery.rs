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
//! | R4 [`RecoveryPlan::WholeRestart`] | R2 on a model that needs signed reasoning, without it | as above: never send a tool-use turn without its signed thinking |
//! | R4 [`RecoveryPlan::WholeRestart`] | a refusal had begun | as above: a refusal is not text a provider can be asked to continue |
//!
//! A model with signed reasoning (Anthropic extended thinking) rejects a tool-use turn that
//! does not start with its thinking block and the signature the provider gave it. Reasoning
//! is captured with its provider metadata (the signature) and restored with the step; a
//! snapshot that lost it — the signature never arrived, or the step was rebuilt from what
//! clients were sent — cannot finish as a tool-use step and restarts instead.

use crate::snapshot::{CapturedCall, StreamSnapshot};

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

/// Picks the recovery plan for a snapshot. `signed_reasoning` says the model rejects a
/// tool-use turn without its signed reasoning
/// ([`keel_core::LanguageModel::requires_signed_reasoning`]).
pub fn choose_plan(snapshot: &StreamSnapshot, signed_reasoning: bool) -> RecoveryPlan {
    if snapshot.refused {
        return RecoveryPlan::WholeRestart;
    }
    match plan_content(snapshot) {
        RecoveryPlan::SynthesizeToolUse { .. }
            if signed_reasoning && !snapshot.has_signed_reasoning() =>
        {
            RecoveryPlan::WholeRestart
        }
        plan => plan,
    }
}

fn plan_content(snapshot: &StreamSnapshot) -> RecoveryPlan {
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
    use crate::snapshot::{CapturedReasoning, args_are_json};

    fn call(id: &str, args: &str) -> CapturedCall {
        CapturedCall {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            args: args.into(),
        }
    }

    #[test]
    fn a_refusal_cut_midway_restarts_the_step() {
        let s = StreamSnapshot {
            partial_text: "Sure, here".into(),
            refused: true,
            ..Default::default()
        };
        assert_eq!(choose_plan(&s, false), RecoveryPlan::WholeRestart);
    }

    #[test]
    fn text_only_continues() {
        let s = StreamSnapshot {
            partial_text: "Hello wor".into(),
            ..Default::default()
        };
        assert_eq!(
            choose_plan(&s, false),
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
            ..Default::default()
        };
        assert_eq!(
            choose_plan(&s, false),
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
            choose_plan(&s, false),
            RecoveryPlan::TruncateBeforeTool { .. }
        ));
    }

    #[test]
    fn nothing_usable_restarts() {
        assert_eq!(
            choose_plan(&StreamSnapshot::default(), false),
            RecoveryPlan::WholeRestart
        );
        let only_partial = StreamSnapshot {
            in_flight: Some(call("b", "{")),
            ..Default::default()
        };
        assert_eq!(
            choose_plan(&only_partial, false),
            RecoveryPlan::WholeRestart
        );
        let blank = StreamSnapshot {
            partial_text: "  \n".into(),
            ..Default::default()
        };
        assert_eq!(choose_plan(&blank, false), RecoveryPlan::WholeRestart);
    }

    #[test]
    fn truncated_json_is_not_a_completed_call() {
        assert!(!args_are_json("{\"path\": \"a"));
        assert!(args_are_json("{\"path\": \"a\"}"));
        assert!(args_are_json(""));
    }

    fn signed(text: &str) -> CapturedReasoning {
        CapturedReasoning {
            text: text.into(),
            provider_metadata: Some(serde_json::json!({"anthropic": {"signature": "sig"}})),
        }
    }

    fn tool_step(reasoning: Vec<CapturedReasoning>) -> StreamSnapshot {
        StreamSnapshot {
            reasoning,
            completed_calls: vec![call("a", "{}")],
            ..Default::default()
        }
    }

    #[test]
    fn a_tool_step_with_its_signed_reasoning_synthesizes_tool_use() {
        let s = tool_step(vec![signed("think")]);
        assert!(matches!(
            choose_plan(&s, true),
            RecoveryPlan::SynthesizeToolUse { .. }
        ));
    }

    #[test]
    fn a_tool_step_that_lost_its_signed_reasoning_restarts() {
        let unsigned = CapturedReasoning {
            text: "think".into(),
            provider_metadata: None,
        };
        for reasoning in [vec![], vec![unsigned.clone()], vec![signed("a"), unsigned]] {
            let s = tool_step(reasoning);
            assert_eq!(choose_plan(&s, true), RecoveryPlan::WholeRestart, "{s:?}");
            assert!(
                matches!(
                    choose_plan(&s, false),
                    RecoveryPlan::SynthesizeToolUse { .. }
                ),
                "models without signed reasoning keep the calls"
            );
        }
    }

    #[test]
    fn text_continues_whatever_became_of_the_reasoning() {
        let s = StreamSnapshot {
            partial_text: "Hello wor".into(),
            ..Default::default()
        };
        assert!(matches!(
            choose_plan(&s, true),
            RecoveryPlan::ContinueText { .. }
        ));
    }
}
