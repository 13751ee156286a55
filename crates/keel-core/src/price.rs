//! What a model's tokens cost, and the cost of one step's [`Usage`].
//!
//! Costs are counted in nano-dollars (10⁻⁹ USD) as integers, so sums over many steps are
//! exact and the same on every database. A price per million tokens times a count of
//! tokens is `count × price × 1000` nano-dollars.
//!
//! | counted | priced at |
//! | --- | --- |
//! | `input_tokens` (without cache reads and writes) | `input` |
//! | `cache_read_tokens` | `cached_input`, else `input` |
//! | `cache_write_tokens` | `cache_write`, else `input` |
//! | `output_tokens − reasoning_tokens` | `output` |
//! | `reasoning_tokens` (a part of the output) | `reasoning`, else `output` |

use serde::{Deserialize, Serialize};

use crate::usage::Usage;

/// Nano-dollars in one US dollar.
pub const NANOS_PER_USD: f64 = 1e9;

/// A model's prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    #[serde(default)]
    pub cached_input: Option<f64>,
    #[serde(default)]
    pub cache_write: Option<f64>,
    pub output: f64,
    #[serde(default)]
    pub reasoning: Option<f64>,
}

impl Price {
    /// The cost of `usage` in nano-dollars, rounded to the nearest one.
    pub fn cost_nanos(&self, usage: &Usage) -> i64 {
        let reasoning = usage.reasoning_tokens.min(usage.output_tokens);
        let terms = [
            (usage.input_tokens, self.input),
            (
                usage.cache_read_tokens,
                self.cached_input.unwrap_or(self.input),
            ),
            (
                usage.cache_write_tokens,
                self.cache_write.unwrap_or(self.input),
            ),
            (usage.output_tokens - reasoning, self.output),
            (reasoning, self.reasoning.unwrap_or(self.output)),
        ];
        // Per million tokens → per token in nano-dollars is a factor of 1000.
        let nanos: f64 = terms.iter().map(|&(n, p)| n as f64 * p * 1000.0).sum();
        // `as` saturates; a price is validated finite and non-negative at start-up.
        nanos.round() as i64
    }

    /// The first price that is negative, infinite or not a number, by its key.
    pub fn invalid_field(&self) -> Option<&'static str> {
        let fields = [
            ("input", Some(self.input)),
            ("cached_input", self.cached_input),
            ("cache_write", self.cache_write),
            ("output", Some(self.output)),
            ("reasoning", self.reasoning),
        ];
        fields
            .into_iter()
            .find(|(_, v)| v.is_some_and(|v| !v.is_finite() || v < 0.0))
            .map(|(name, _)| name)
    }
}

/// Nano-dollars as US dollars.
pub fn usd(nanos: i64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, read: u64, write: u64, output: u64, reasoning: u64) -> Usage {
        Usage {
            input_tokens: input,
            cache_read_tokens: read,
            cache_write_tokens: write,
            output_tokens: output,
            reasoning_tokens: reasoning,
        }
    }

    #[test]
    fn each_kind_of_token_is_priced_at_its_own_rate() {
        let price = Price {
            input: 2.5,
            cached_input: Some(1.25),
            cache_write: Some(3.0),
            output: 10.0,
            reasoning: Some(20.0),
        };
        // 1M input = $2.50, 1M cached = $1.25, 1M written = $3, 1M plain output = $10,
        // 1M reasoning = $20.
        let cost = price.cost_nanos(&usage(
            1_000_000, 1_000_000, 1_000_000, 2_000_000, 1_000_000,
        ));
        assert_eq!(cost, 36_750_000_000);
        assert!((usd(cost) - 36.75).abs() < 1e-9);
    }

    #[test]
    fn missing_rates_fall_back_to_input_and_output() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            ..Price::default()
        };
        // 100 × 3 + 10 × 3 + 5 × 3 (per million) + 40 × 15 → nano-dollars.
        assert_eq!(
            price.cost_nanos(&usage(100, 10, 5, 40, 8)),
            345_000 + 600_000
        );
    }

    #[test]
    fn a_cheap_token_is_counted_exactly() {
        let price = Price {
            input: 0.075,
            output: 0.3,
            ..Price::default()
        };
        assert_eq!(price.cost_nanos(&usage(1, 0, 0, 1, 0)), 375);
    }

    #[test]
    fn reasoning_beyond_the_output_is_not_charged_twice() {
        let price = Price {
            input: 0.0,
            output: 1.0,
            reasoning: Some(2.0),
            ..Price::default()
        };
        assert_eq!(price.cost_nanos(&usage(0, 0, 0, 10, 50)), 20_000);
    }

    #[test]
    fn a_negative_or_infinite_price_is_named() {
        let bad = Price {
            input: 1.0,
            cached_input: Some(-1.0),
            output: 1.0,
            ..Price::default()
        };
        assert_eq!(bad.invalid_field(), Some("cached_input"));
        let inf = Price {
            input: f64::INFINITY,
            ..Price::default()
        };
        assert_eq!(inf.invalid_field(), Some("input"));
        assert_eq!(Price::default().invalid_field(), None);
    }
}
