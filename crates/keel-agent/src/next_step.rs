//! Whether a run goes on after a committed step: one rule for the loop and for a daemon
//! that takes over a chat whose owner died after committing a step.
//!
//! | the step | finish reason | next |
//! | --- | --- | --- |
//! | its calls were answered (local results, refusals) | `tool_calls` (or not recorded) | [`NextStep::Call`]: the model reads the results |
//! | no answered calls | `pause_turn` | [`NextStep::CarryOn`]: the paused turn goes back as it is |
//! | anything else (a final reply, cut or not) | any | [`NextStep::End`] |
//!
//! A compaction never changes the answer: a summary of a final reply is not a request, and
//! calling the model after it would answer the same question twice. Client-side calls are
//! not in this table: they end the run until the client answers them.

use keel_core::FinishReason;

/// What follows a committed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// The step's tool results go back to the model.
    Call,
    /// The provider paused the turn; the next call carries it on.
    CarryOn,
    /// The model is done: the run ends.
    End,
}

/// Decides from why the model stopped (`None`: not recorded, as in rows older than the
/// record) and whether the step's tool message answers any of its calls.
pub fn next_step(finish: Option<FinishReason>, answered_calls: bool) -> NextStep {
    match (finish, answered_calls) {
        (Some(FinishReason::ToolCalls) | None, true) => NextStep::Call,
        (Some(FinishReason::PauseTurn), false) => NextStep::CarryOn,
        _ => NextStep::End,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_calls_go_back_to_the_model_only_when_it_asked_for_them() {
        assert_eq!(
            next_step(Some(FinishReason::ToolCalls), true),
            NextStep::Call
        );
        assert_eq!(next_step(None, true), NextStep::Call);
        // A call refused because the output limit cut it: the reply is over.
        assert_eq!(next_step(Some(FinishReason::Length), true), NextStep::End);
        assert_eq!(next_step(Some(FinishReason::Stop), true), NextStep::End);
    }

    #[test]
    fn a_paused_turn_is_carried_on() {
        assert_eq!(
            next_step(Some(FinishReason::PauseTurn), false),
            NextStep::CarryOn
        );
    }

    #[test]
    fn a_final_reply_ends_the_run_whatever_cut_it() {
        for finish in [
            Some(FinishReason::Stop),
            Some(FinishReason::Length),
            Some(FinishReason::ContentFilter),
            Some(FinishReason::Unknown),
            Some(FinishReason::ToolCalls),
            None,
        ] {
            assert_eq!(next_step(finish, false), NextStep::End, "{finish:?}");
        }
    }
}
