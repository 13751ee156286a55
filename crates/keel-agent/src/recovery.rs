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

use serde::{Deserialize, Serialize};
use serde_json::Value;

use keel_core::PartKind;

use crate::accumulate::{Block, StepAccumulator};

/// A tool call as captured in a snapshot or checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
}

/// A reasoning block as captured in a snapshot or checkpoint, with the provider metadata
/// (e.g. Anthropic's signature) needed to send it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedReasoning {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_metadata: Option<Value>,
}

/// A call the provider ran (a web search) with its result, as captured in a snapshot or
/// checkpoint: it goes back to the provider with the continued reply, never to a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedProviderCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub args: String,
    pub result: Value,
    #[serde(default)]
    pub is_error: bool,
}

/// What a failed stream left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSnapshot {
    /// Reasoning blocks, in order; they come before the text.
    #[serde(default)]
    pub reasoning: Vec<CapturedReasoning>,
    pub partial_text: String,
    /// Calls whose arguments completed and parse as JSON.
    pub completed_calls: Vec<CapturedCall>,
    /// The call whose arguments were still streaming.
    pub in_flight: Option<CapturedCall>,
    pub bytes_received: usize,
    /// A refusal had begun streaming.
    #[serde(default)]
    pub refused: bool,
    /// Calls the provider ran and answered, in the order their results came; a call still
    /// unanswered is not kept (the provider runs it again if it needs it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_calls: Vec<CapturedProviderCall>,
}

impl StreamSnapshot {
    /// Captures the usable content of the step so far.
    pub fn of(acc: &StepAccumulator) -> Self {
        let mut snapshot = StreamSnapshot {
            partial_text: acc.text(),
            ..Self::default()
        };
        for block in &acc.blocks {
            match block {
                Block::Reasoning { text, metadata } => {
                    snapshot.reasoning.push(CapturedReasoning {
                        text: text.clone(),
                        provider_metadata: metadata.clone(),
                    });
                }
                Block::Refusal(_) => snapshot.refused = true,
                _ => {}
            }
        }
        for block in &acc.blocks {
            let Block::ProviderResult(part) = block else {
                continue;
            };
            let PartKind::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } = &part.kind
            else {
                continue;
            };
            let call = acc
                .tool_calls()
                .find(|c| c.provider_executed && c.complete && c.tool_call_id == *tool_call_id);
            if let Some(call) = call {
                snapshot.provider_calls.push(CapturedProviderCall {
                    tool_call_id: call.tool_call_id.clone(),
                    tool_name: call.tool_name.clone(),
                    args: call.args.clone(),
                    result: result.clone(),
                    is_error: *is_error,
                });
            }
        }
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

    /// Whether the snapshot holds reasoning that can be sent back as the provider gave it:
    /// at least one block, each with its provider metadata (signature).
    pub fn has_signed_reasoning(&self) -> bool {
        !self.reasoning.is_empty()
            && self
                .reasoning
                .iter()
                .all(|r| r.provider_metadata.as_ref().is_some_and(|m| !m.is_null()))
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
