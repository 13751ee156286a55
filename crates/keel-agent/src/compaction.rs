//! Context compaction: when a chat's context nears the model's limit, the model writes a
//! dense working summary of the conversation, the store records it as a boundary, and later
//! prompts start from the summary instead of the full history.
//!
//! The decisions are pure functions ([`context_tokens`], [`should_compact`]); the interface
//! the daemon implements is [`CompactionHooks`]. Where in the loop compaction runs lives in
//! `run.rs`; how the summary is streamed lives in `summarize.rs`.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Message, Usage};

use crate::persist::PersistError;

/// The share of the context limit at which compaction starts, unless configured.
pub const DEFAULT_THRESHOLD: f64 = 0.8;

pub use keel_core::SUMMARY_PREFIX;

/// The instruction appended to the history to ask for the summary.
pub const SUMMARY_INSTRUCTION: &str = "The conversation is about to exceed the context window. \
Write a dense working summary of everything so far, so that the work can continue from the \
summary alone. Include: the goal and the current task; decisions made and why; concrete \
details (file paths, names, identifiers, commands, values); errors met and how they were \
fixed; what is done, what is in progress and what is left; and the action under way right \
now. Do not call tools. Reply with the summary only.";

/// A summary ready to be stored as the chat's new starting point.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRecord {
    /// The summary text, without [`SUMMARY_PREFIX`].
    pub text: String,
    /// What the summarising call consumed and produced.
    pub usage: Usage,
    /// The context limit that applied to the summarising call.
    pub context_limit: Option<u64>,
}

/// Makes a summary durable. The daemon implements it over the store.
#[async_trait]
pub trait CompactionHooks: Send + Sync {
    /// Records the summary boundary and returns the prompt history that now applies: the
    /// summary as a user message followed by every message after the boundary (including
    /// user messages that were not answered yet).
    async fn commit_summary(&self, summary: SummaryRecord) -> Result<Vec<Message>, PersistError>;

    /// A summary is about to stream through the run's sink. A daemon that resumes runs from
    /// what was streamed records it, so that a crash mid-summary is not resumed as a reply.
    fn summary_started(&self) {}
}

/// Compaction settings of a run.
#[derive(Clone)]
pub struct Compaction {
    /// Compact when the context reaches this share of the limit; ≥ 1.0 disables automatic
    /// compaction (a requested one still runs).
    pub threshold: f64,
    pub hooks: Arc<dyn CompactionHooks>,
}

/// The tokens a step's prompt occupied: input plus cache reads and writes; providers that
/// report none of those are judged by their total instead.
pub fn context_tokens(usage: &Usage) -> u64 {
    let prompt = usage
        .input_tokens
        .saturating_add(usage.cache_read_tokens)
        .saturating_add(usage.cache_write_tokens);
    if prompt > 0 {
        prompt
    } else {
        usage.input_tokens.saturating_add(usage.output_tokens)
    }
}

/// Whether a step that used `tokens` of a `limit`-token context calls for compaction. An
/// unknown limit never does: guessing could summarise a chat that had plenty of room.
pub fn should_compact(tokens: u64, limit: Option<u64>, threshold: f64) -> bool {
    let Some(limit) = limit.filter(|l| *l > 0) else {
        return false;
    };
    if !threshold.is_finite() || threshold <= 0.0 || threshold >= 1.0 {
        return false;
    }
    tokens as f64 >= threshold * limit as f64
}

/// The user message that carries a stored summary into a prompt.
pub fn summary_message(text: &str) -> Message {
    Message::summary(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
            ..Usage::default()
        }
    }

    #[test]
    fn context_tokens_count_input_and_cache() {
        assert_eq!(context_tokens(&usage(100, 50, 20, 5)), 125);
        assert_eq!(context_tokens(&usage(0, 0, 70, 0)), 70);
    }

    #[test]
    fn context_tokens_fall_back_to_the_total() {
        assert_eq!(context_tokens(&usage(0, 40, 0, 0)), 40);
        assert_eq!(context_tokens(&Usage::default()), 0);
    }

    #[test]
    fn compacts_at_the_threshold() {
        assert!(should_compact(80, Some(100), 0.8));
        assert!(should_compact(120, Some(100), 0.8));
        assert!(!should_compact(79, Some(100), 0.8));
    }

    #[test]
    fn unknown_limit_or_disabled_threshold_never_compacts() {
        assert!(!should_compact(1_000_000, None, 0.8));
        assert!(!should_compact(1_000_000, Some(0), 0.8));
        assert!(!should_compact(100, Some(100), 1.0));
        assert!(!should_compact(100, Some(100), 1.5));
        assert!(!should_compact(100, Some(100), f64::NAN));
        assert!(!should_compact(100, Some(100), 0.0));
    }

    #[test]
    fn summary_message_is_a_prefixed_user_message() {
        let message = summary_message("goal: ship");
        assert_eq!(message.role, keel_core::Role::User);
        assert!(message.text().starts_with(SUMMARY_PREFIX));
        assert!(message.text().ends_with("goal: ship"));
    }
}
