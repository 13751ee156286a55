//! Token usage and finish reasons.

use serde::{Deserialize, Serialize};

/// Token counts of one model step. Every field is optional in the sense that providers report
/// different subsets; a count that was not reported is zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds another report into this one. Providers report usage more than once per stream
    /// (a start figure, then a final one); each count keeps the largest value seen.
    pub fn merge_max(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.max(other.input_tokens);
        self.output_tokens = self.output_tokens.max(other.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.max(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.max(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.max(other.reasoning_tokens);
    }

    /// Sums two usages, e.g. of several attempts or steps.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }

    /// Converts a provider's signed count (some report negative sentinels) to a count.
    pub fn count(raw: i64) -> u64 {
        u64::try_from(raw).unwrap_or(0)
    }

    /// Tokens the prompt occupied in the context window.
    pub fn context_tokens(&self) -> u64 {
        self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its turn.
    Stop,
    /// The output token limit was reached.
    Length,
    /// The model asked for tools to be run.
    ToolCalls,
    /// The provider filtered the content.
    ContentFilter,
    /// The provider paused a long turn of its own tools (Anthropic `pause_turn`): the turn
    /// goes on when its content is sent back as the last assistant message.
    PauseTurn,
    /// The provider stopped for an error.
    Error,
    /// Something else, or nothing was reported.
    #[default]
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_counts_become_zero() {
        assert_eq!(Usage::count(-5), 0);
        assert_eq!(Usage::count(7), 7);
    }

    #[test]
    fn merge_keeps_largest_report() {
        let mut a = Usage {
            input_tokens: 10,
            ..Usage::default()
        };
        a.merge_max(&Usage {
            output_tokens: 4,
            input_tokens: 3,
            ..Usage::default()
        });
        assert_eq!((a.input_tokens, a.output_tokens), (10, 4));
    }
}
