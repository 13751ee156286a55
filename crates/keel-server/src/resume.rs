//! Rebuilding the step in progress from its live-part log after a crash.
//!
//! The log holds exactly what clients were sent. Replaying it gives the partial text and the
//! tool calls of the step, which the loop resumes with its recovery plans: the final reply
//! then contains what was streamed before the crash exactly once.

use keel_agent::snapshot::{CapturedCall, CapturedProviderCall, CapturedReasoning, args_are_json};
use keel_agent::{NextStep, StreamSnapshot, next_step};
use keel_core::PendingToolCall;
use keel_core::{FinishReason, Part, PartKind, Role};
use serde_json::Value;

use crate::live::from_log;

/// Replays logged payloads (in sequence order) into a snapshot of the step.
pub(crate) fn snapshot_from_log<'a>(
    payloads: impl IntoIterator<Item = &'a Value>,
) -> StreamSnapshot {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<(CapturedCall, bool)> = Vec::new();
    let mut provider: Vec<CapturedProviderCall> = Vec::new();
    let mut refused = false;
    for value in payloads {
        let Some((event, data)) = from_log(value) else {
            continue;
        };
        match event {
            "stream_reset" => {
                text.clear();
                reasoning.clear();
                calls.clear();
                provider.clear();
                refused = false;
            }
            _ if data["role"] == "assistant" && data["part"]["provider_executed"] == true => {
                provider_part(&data["part"], &mut calls, &mut provider);
            }
            _ if data["role"] == "assistant" && data["part"]["type"] == "reasoning" => {
                reasoning.push_str(data["part"]["text"].as_str().unwrap_or_default());
            }
            _ if data["role"] == "assistant" && data["part"]["type"] == "refusal" => {
                refused = true;
            }
            "tool_call_cancel" => {
                let id = data["tool_call_id"].as_str().unwrap_or_default();
                calls.retain(|(c, _)| c.tool_call_id != id);
            }
            _ => apply_part(&data, &mut text, &mut calls),
        }
    }
    // A call the provider had not answered is left out, as the loop leaves it out.
    provider.retain(|call| !call.result.is_null());
    let mut snapshot = StreamSnapshot {
        bytes_received: text.len(),
        partial_text: text,
        refused,
        provider_calls: provider,
        ..StreamSnapshot::default()
    };
    // What clients were sent of the reasoning carries no signature.
    if !reasoning.is_empty() {
        snapshot.reasoning.push(CapturedReasoning {
            text: reasoning,
            provider_metadata: None,
        });
    }
    for (call, complete) in calls {
        snapshot.bytes_received += call.args.len();
        if complete && args_are_json(&call.args) {
            snapshot.completed_calls.push(call);
        } else {
            snapshot.in_flight = Some(call);
        }
    }
    snapshot
}

/// The reasoning a step resumed from the log continues with: the loop's own checkpoint
/// keeps it with its provider metadata (signatures), the log only as text. The
/// checkpoint's is taken when it is the same reasoning, so signed thinking survives a crash;
/// otherwise the log's unsigned text stands, and the recovery plan knows it cannot be sent
/// back as signed.
pub(crate) fn signed_reasoning(
    from_log: &[CapturedReasoning],
    checkpoint: &[CapturedReasoning],
) -> Vec<CapturedReasoning> {
    let text =
        |blocks: &[CapturedReasoning]| blocks.iter().map(|r| r.text.as_str()).collect::<String>();
    if !checkpoint.is_empty() && text(checkpoint) == text(from_log) {
        checkpoint.to_vec()
    } else {
        from_log.to_vec()
    }
}

/// The event a log holds while a compaction summary streams into it (never sent to
/// clients). A log that has it is the summary's, not a step's.
pub(crate) const SUMMARY_MARK: &str = "summary_started";

/// Whether the log is a compaction summary's: a resumed run must not take that text for
/// the assistant's reply.
pub(crate) fn is_summary_log<'a>(payloads: impl IntoIterator<Item = &'a Value>) -> bool {
    payloads
        .into_iter()
        .any(|p| p["event"].as_str() == Some(SUMMARY_MARK))
}

/// What a claimed chat's live-part log holds, which decides what the run resumes from.
///
/// | log | resumes from |
/// | --- | --- |
/// | empty | the committed history ([`last_step`]) |
/// | a compaction summary (the mark at its start) | the committed history: the summary is void (clients get a `stream_reset`), and whatever its text, it is never a reply |
/// | a step in progress | the log's snapshot of that step |
#[derive(Debug)]
pub(crate) enum LogHolds {
    Nothing,
    Summary,
    Step(StreamSnapshot),
}

impl LogHolds {
    /// Reads the log's payloads (in sequence order).
    pub(crate) fn of(payloads: &[&Value]) -> Self {
        if payloads.is_empty() {
            Self::Nothing
        } else if is_summary_log(payloads.iter().copied()) {
            Self::Summary
        } else {
            Self::Step(snapshot_from_log(payloads.iter().copied()))
        }
    }
}

/// What a run that claims a chat with no step in its live-part log finds at the end of the
/// committed history.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LastStep {
    /// The step called client-side tools that have no result and were never handed over
    /// (the owner died between committing the step and `requires_action`).
    Unhanded(Vec<PendingToolCall>),
    /// The step was the model's final reply (the owner died between committing it and
    /// finishing the run): the run only finishes, it does not call the model again.
    Final,
    /// The step was a turn the provider paused (Anthropic `pause_turn`; the owner died
    /// before the next step): the run carries it on, sending it back as the last message.
    Paused,
    /// Anything else: the run calls the model.
    Continue,
}

/// A committed message as the resume decision sees it: its role, its parts and why the
/// model stopped at its step (assistant messages; `None` when not recorded).
pub(crate) type Committed<'a> = (Role, &'a [Part], Option<FinishReason>);

/// Decides from the last two committed messages (oldest first). The client-side calls of
/// a step that also ran local tools sit in the assistant message before the tool message
/// holding the local results.
pub(crate) fn last_step(recent: &[Committed<'_>], client_tools: &[String]) -> LastStep {
    let (assistant, results, finish): (&[Part], &[Part], _) = match recent {
        [
            ..,
            (Role::Assistant, parts, finish),
            (Role::Tool, results, _),
        ] => (parts, results, *finish),
        [.., (Role::Assistant, parts, finish)] => (parts, &[], *finish),
        _ => return LastStep::Continue,
    };
    let answered = |id: &str| {
        results.iter().any(
            |p| matches!(&p.kind, PartKind::ToolResult { tool_call_id, .. } if tool_call_id == id),
        )
    };
    let unhanded: Vec<PendingToolCall> = assistant
        .iter()
        .filter_map(|part| match &part.kind {
            PartKind::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_executed: false,
                ..
            } if client_tools.contains(tool_name) && !answered(tool_call_id) => {
                Some(PendingToolCall {
                    tool_call_id: tool_call_id.clone(),
                    tool_name: tool_name.clone(),
                    args: args.clone(),
                })
            }
            _ => None,
        })
        .collect();
    let answered_client_call = assistant.iter().any(|part| {
        matches!(&part.kind, PartKind::ToolCall { tool_call_id, tool_name, provider_executed: false, .. }
            if client_tools.contains(tool_name) && answered(tool_call_id))
    });
    if !unhanded.is_empty() {
        return LastStep::Unhanded(unhanded);
    }
    if answered_client_call {
        // The client answered its calls: those answers go to the model, whatever the
        // provider said the step finished with (the loop hands client calls over on any).
        return LastStep::Continue;
    }
    match next_step(finish, !results.is_empty()) {
        NextStep::Call => LastStep::Continue,
        NextStep::CarryOn => LastStep::Paused,
        NextStep::End => LastStep::Final,
    }
}

/// A part of a call the provider ran: the complete call (whose argument deltas went into
/// `calls`, unmarked, and leave it now), or its result.
fn provider_part(
    part: &Value,
    calls: &mut Vec<(CapturedCall, bool)>,
    provider: &mut Vec<CapturedProviderCall>,
) {
    let id = part["tool_call_id"].as_str().unwrap_or_default();
    match part["type"].as_str() {
        Some("tool_call") if part["complete"] == true => {
            calls.retain(|(c, _)| c.tool_call_id != id);
            provider.push(CapturedProviderCall {
                tool_call_id: id.to_owned(),
                tool_name: part["tool_name"].as_str().unwrap_or_default().to_owned(),
                args: part["args"].as_str().unwrap_or_default().to_owned(),
                result: Value::Null,
                is_error: false,
            });
        }
        Some("tool_result") => {
            if let Some(call) = provider.iter_mut().find(|c| c.tool_call_id == id) {
                call.result = part.get("result").cloned().unwrap_or(Value::Null);
                call.is_error = part["is_error"] == true;
            }
        }
        _ => {}
    }
}

fn apply_part(data: &Value, text: &mut String, calls: &mut Vec<(CapturedCall, bool)>) {
    if data["role"] != "assistant" {
        return;
    }
    let part = &data["part"];
    match part["type"].as_str() {
        Some("text") => text.push_str(part["text"].as_str().unwrap_or_default()),
        Some("tool_call") if part["provider_executed"] != true => {
            let id = part["tool_call_id"].as_str().unwrap_or_default();
            let position = calls.iter().position(|(c, _)| c.tool_call_id == id);
            let index = position.unwrap_or_else(|| {
                calls.push((
                    CapturedCall {
                        tool_call_id: id.to_owned(),
                        tool_name: part["tool_name"].as_str().unwrap_or_default().to_owned(),
                        args: String::new(),
                    },
                    false,
                ));
                calls.len() - 1
            });
            let (call, complete) = &mut calls[index];
            if part["complete"] == true {
                call.args = part["args"].as_str().unwrap_or_default().to_owned();
                *complete = true;
            } else {
                call.args
                    .push_str(part["args_delta"].as_str().unwrap_or_default());
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::payload;
    use keel_agent::LiveEvent;

    fn log(events: &[LiveEvent]) -> Vec<Value> {
        events
            .iter()
            .map(|e| serde_json::from_str(payload(e).logged.unwrap().as_str()).unwrap())
            .collect()
    }

    #[test]
    fn text_deltas_and_tool_calls_are_rebuilt() {
        let entries = log(&[
            LiveEvent::ReasoningDelta {
                delta: "hmm".into(),
            },
            LiveEvent::TextDelta {
                delta: "Hello ".into(),
            },
            LiveEvent::TextDelta {
                delta: "world".into(),
            },
            LiveEvent::ToolCallDelta {
                tool_call_id: "a".into(),
                tool_name: "read_file".into(),
                args_delta: "{\"path\":".into(),
            },
            LiveEvent::ToolCall {
                tool_call_id: "a".into(),
                tool_name: "read_file".into(),
                args: "{\"path\":\"x\"}".into(),
                provider_executed: false,
            },
            LiveEvent::ToolCallDelta {
                tool_call_id: "b".into(),
                tool_name: "write_file".into(),
                args_delta: "{\"pa".into(),
            },
        ]);
        let snapshot = snapshot_from_log(&entries);
        assert_eq!(snapshot.partial_text, "Hello world");
        assert_eq!(snapshot.completed_calls.len(), 1);
        assert_eq!(snapshot.completed_calls[0].args, "{\"path\":\"x\"}");
        assert_eq!(snapshot.in_flight.as_ref().unwrap().tool_call_id, "b");
    }

    #[test]
    fn a_provider_run_search_is_kept_with_its_result_and_never_as_a_call_to_run() {
        let search = |id: &str| LiveEvent::ToolCall {
            tool_call_id: id.into(),
            tool_name: "web_search".into(),
            args: "{\"query\":\"q\"}".into(),
            provider_executed: true,
        };
        let entries = log(&[
            LiveEvent::ToolCallDelta {
                tool_call_id: "s1".into(),
                tool_name: "web_search".into(),
                args_delta: "{\"query\":".into(),
            },
            search("s1"),
            LiveEvent::ToolResult {
                part: Part::tool_result("s1", "web_search", serde_json::json!([1]), false, true),
            },
            search("s2"),
            LiveEvent::TextDelta {
                delta: "Keel is".into(),
            },
        ]);
        let snapshot = snapshot_from_log(&entries);
        assert_eq!(snapshot.partial_text, "Keel is");
        assert!(snapshot.completed_calls.is_empty() && snapshot.in_flight.is_none());
        let kept: Vec<_> = snapshot
            .provider_calls
            .iter()
            .map(|c| (c.tool_call_id.as_str(), c.result.clone()))
            .collect();
        assert_eq!(
            kept,
            [("s1", serde_json::json!([1]))],
            "s2 was never answered"
        );
    }

    #[test]
    fn resets_and_cancels_void_what_came_before() {
        let entries = log(&[
            LiveEvent::TextDelta {
                delta: "void".into(),
            },
            LiveEvent::StreamReset,
            LiveEvent::TextDelta {
                delta: "kept".into(),
            },
            LiveEvent::ToolCallDelta {
                tool_call_id: "b".into(),
                tool_name: "t".into(),
                args_delta: "{".into(),
            },
            LiveEvent::ToolCallCancel {
                tool_call_id: "b".into(),
                tool_name: "t".into(),
                reason: "cut".into(),
            },
        ]);
        let snapshot = snapshot_from_log(&entries);
        assert_eq!(snapshot.partial_text, "kept");
        assert!(snapshot.in_flight.is_none());
        assert!(snapshot.completed_calls.is_empty());
    }

    #[test]
    fn client_calls_left_without_results_are_handed_over() {
        let tools = vec!["ask".to_owned()];
        let parts = vec![
            Part::text("let me ask"),
            Part::tool_call("c1", "ask", "{}", false),
            Part::tool_call("c3", "ask", "{}", true),
        ];
        let LastStep::Unhanded(calls) = last_step(&[(Role::Assistant, &parts, None)], &tools)
        else {
            panic!("the call is handed over");
        };
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].tool_call_id.as_str(), calls[0].tool_name.as_str()),
            ("c1", "ask")
        );
        assert_eq!(last_step(&[], &tools), LastStep::Continue);
    }

    #[test]
    fn client_calls_of_a_step_that_also_ran_local_tools_are_handed_over() {
        let tools = vec!["ask".to_owned()];
        let calls = [
            Part::tool_call("c1", "ask", "{}", false),
            Part::tool_call("c2", "read_file", "{}", false),
        ];
        let results = vec![Part::tool_result(
            "c2",
            "read_file",
            Value::String("ok".into()),
            false,
            false,
        )];
        let step = [
            (Role::Assistant, &calls[..], Some(FinishReason::ToolCalls)),
            (Role::Tool, &results[..], None),
        ];
        let LastStep::Unhanded(pending) = last_step(&step, &tools) else {
            panic!("the client call is handed over");
        };
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].tool_call_id, "c1");
        // Every call answered (the client's results arrived): the model carries on.
        let mut all = results.clone();
        all.push(Part::tool_result("c1", "ask", Value::Null, false, false));
        let step = [
            (Role::Assistant, &calls[..], Some(FinishReason::ToolCalls)),
            (Role::Tool, &all[..], None),
        ];
        assert_eq!(last_step(&step, &tools), LastStep::Continue);
    }

    #[test]
    fn a_committed_final_reply_only_finishes() {
        let tools: Vec<String> = Vec::new();
        let question = [Part::text("q")];
        let reply = [Part::text("the answer")];
        let stop = Some(FinishReason::Stop);
        let step = [
            (Role::User, &question[..], None),
            (Role::Assistant, &reply[..], stop),
        ];
        assert_eq!(last_step(&step, &tools), LastStep::Final);
        // A user message after it (the queue head started) is answered.
        let step = [
            (Role::Assistant, &reply[..], stop),
            (Role::User, &question[..], None),
        ];
        assert_eq!(last_step(&step, &tools), LastStep::Continue);
        // A step that ran local tools continues.
        let call = [Part::tool_call("c1", "read_file", "{}", false)];
        let result = [Part::tool_result(
            "c1",
            "read_file",
            Value::Null,
            false,
            false,
        )];
        let step = [
            (Role::Assistant, &call[..], None),
            (Role::Tool, &result[..], None),
        ];
        assert_eq!(last_step(&step, &tools), LastStep::Continue);
        // Local results with the model saying it is done (or cut at its output limit): the
        // loop ended the run after this step, and so does a takeover.
        for finish in [FinishReason::Stop, FinishReason::Length] {
            let step = [
                (Role::Assistant, &call[..], Some(finish)),
                (Role::Tool, &result[..], None),
            ];
            assert_eq!(last_step(&step, &tools), LastStep::Final, "{finish:?}");
        }
    }

    #[test]
    fn a_committed_paused_turn_is_carried_on_not_taken_for_the_reply() {
        let tools = vec!["ask".to_owned()];
        let question = [Part::text("look it up")];
        let paused = [
            Part::text("Searching the web."),
            Part::tool_call("s1", "web_search", "{}", true),
        ];
        let pause = Some(FinishReason::PauseTurn);
        let step = [
            (Role::User, &question[..], None),
            (Role::Assistant, &paused[..], pause),
        ];
        assert_eq!(last_step(&step, &tools), LastStep::Paused);
        // The same reply stored without its finish reason (before it was recorded) stays
        // what it was taken for.
        let step = [
            (Role::User, &question[..], None),
            (Role::Assistant, &paused[..], None),
        ];
        assert_eq!(last_step(&step, &tools), LastStep::Final);
        // Client calls of a paused step are still handed over first.
        let with_call = [Part::text("x"), Part::tool_call("c1", "ask", "{}", false)];
        let step = [(Role::Assistant, &with_call[..], pause)];
        assert!(matches!(last_step(&step, &tools), LastStep::Unhanded(_)));
    }

    #[test]
    fn a_summary_log_is_recognised() {
        let step = log(&[LiveEvent::TextDelta { delta: "a".into() }]);
        assert!(!is_summary_log(&step));
        let mut summary = vec![serde_json::json!({"event": SUMMARY_MARK, "data": {}})];
        summary.extend(step);
        assert!(is_summary_log(&summary));
    }

    #[test]
    fn only_a_steps_log_is_resumed_from_and_a_summarys_never() {
        fn refs(values: &[Value]) -> Vec<&Value> {
            values.iter().collect()
        }
        assert!(matches!(LogHolds::of(&[]), LogHolds::Nothing));
        let step = log(&[LiveEvent::TextDelta {
            delta: "The conversation so far".into(),
        }]);
        assert!(
            matches!(LogHolds::of(&refs(&step)), LogHolds::Step(s) if s.partial_text == "The conversation so far")
        );
        // A whole summary, and one a resumed run already voided with a reset: neither is
        // a reply to continue.
        let mut summary = vec![serde_json::json!({"event": SUMMARY_MARK, "data": {}})];
        summary.extend(step);
        assert!(matches!(LogHolds::of(&refs(&summary)), LogHolds::Summary));
        summary.extend(log(&[LiveEvent::StreamReset]));
        assert!(matches!(LogHolds::of(&refs(&summary)), LogHolds::Summary));
    }

    fn reasoning(text: &str, signed: bool) -> CapturedReasoning {
        CapturedReasoning {
            text: text.into(),
            provider_metadata: signed.then(|| serde_json::json!({"anthropic": {"signature": "s"}})),
        }
    }

    #[test]
    fn logged_reasoning_is_captured_without_a_signature() {
        let snapshot = snapshot_from_log(&log(&[
            LiveEvent::ReasoningDelta {
                delta: "let me ".into(),
            },
            LiveEvent::ReasoningDelta {
                delta: "think".into(),
            },
            LiveEvent::TextDelta { delta: "Hi".into() },
        ]));
        assert_eq!(snapshot.reasoning, vec![reasoning("let me think", false)]);
        assert_eq!(snapshot.partial_text, "Hi");
    }

    #[test]
    fn the_checkpoint_signs_the_same_reasoning_and_only_that() {
        let logged = [reasoning("let me think", false)];
        let checkpoint = [reasoning("let me ", true), reasoning("think", true)];
        assert_eq!(signed_reasoning(&logged, &checkpoint), checkpoint.to_vec());
        let stale = [reasoning("let me", true)];
        assert_eq!(signed_reasoning(&logged, &stale), logged.to_vec());
        assert_eq!(signed_reasoning(&logged, &[]), logged.to_vec());
    }
}
