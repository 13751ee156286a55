//! Summaries of measured samples.

use std::time::Duration;

/// Percentiles of a set of samples, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub count: usize,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Spread {
    pub fn of(samples: &mut [u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            // Nearest-rank percentile: the smallest sample with at least q of them at or below.
            let rank = (q * samples.len() as f64).ceil() as usize;
            samples[rank.clamp(1, samples.len()) - 1]
        };
        Self {
            count: samples.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: samples[samples.len() - 1],
        }
    }

    /// `p50 / p99 / max` in milliseconds.
    pub fn millis(&self) -> String {
        if self.count == 0 {
            return "n/a".to_owned();
        }
        format!("{} / {} / {} ms", ms(self.p50), ms(self.p99), ms(self.max))
    }
}

fn ms(micros: u64) -> String {
    format!("{:.1}", micros as f64 / 1000.0)
}

pub fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<u64> = (1..=100).rev().collect();
        let spread = Spread::of(&mut samples);
        assert_eq!((spread.p50, spread.p99, spread.max), (50, 99, 100));
        assert_eq!(Spread::of(&mut [7]).p99, 7);
        assert_eq!(Spread::of(&mut []).count, 0);
    }
}
