//! The daemon's live-part log writes during a measurement, from its
//! `keel_live_log_write_seconds` histogram: how many, and how long they took.

use anyhow::Context as _;

use keel_client::Api;

const METRIC: &str = "keel_live_log_write_seconds";

/// A reading of the histogram: cumulative counts by upper bound, the sum and the count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogWrites {
    buckets: Vec<(f64, u64)>,
    sum: f64,
    count: u64,
}

impl LogWrites {
    /// Reads the daemon's histogram now.
    pub async fn read(api: &Api) -> anyhow::Result<Self> {
        let text = api.metrics().await?;
        Self::parse(&text).with_context(|| format!("{} has no {METRIC}", api.url()))
    }

    /// The histogram in Prometheus' text format, if `text` has it.
    fn parse(text: &str) -> Option<Self> {
        let mut found = Self::default();
        let mut seen = false;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(METRIC) else {
                continue;
            };
            let value = rest.rsplit(' ').next()?;
            if let Some(bucket) = rest.strip_prefix("_bucket{le=\"") {
                let bound = bucket.split('"').next()?;
                let bound = if bound == "+Inf" {
                    f64::INFINITY
                } else {
                    bound.parse().ok()?
                };
                found.buckets.push((bound, value.parse().ok()?));
            } else if rest.starts_with("_sum") {
                found.sum = value.parse().ok()?;
                seen = true;
            } else if rest.starts_with("_count") {
                found.count = value.parse().ok()?;
            }
        }
        seen.then_some(found)
    }

    /// What was observed between `before` and `self`.
    pub fn since(&self, before: &Self) -> Self {
        let earlier = |bound: f64| {
            before
                .buckets
                .iter()
                .find(|(b, _)| *b == bound)
                .map_or(0, |(_, n)| *n)
        };
        Self {
            buckets: self
                .buckets
                .iter()
                .map(|&(bound, n)| (bound, n.saturating_sub(earlier(bound))))
                .collect(),
            sum: self.sum - before.sum,
            count: self.count.saturating_sub(before.count),
        }
    }

    /// The upper bound of the bucket that holds quantile `q` (seconds).
    fn quantile_bound(&self, q: f64) -> Option<f64> {
        let wanted = (q * self.count as f64).ceil() as u64;
        self.buckets
            .iter()
            .find(|(_, n)| *n >= wanted.max(1))
            .map(|(bound, _)| *bound)
    }

    /// `N writes, mean M ms, p50 <= A ms, p99 <= B ms`.
    pub fn summary(&self) -> String {
        if self.count == 0 {
            return "no writes".to_owned();
        }
        let bound = |q| match self.quantile_bound(q) {
            Some(b) if b.is_finite() => format!("<= {:.1} ms", b * 1e3),
            _ => "above the largest bucket".to_owned(),
        };
        format!(
            "{} writes, mean {:.1} ms, p50 {}, p99 {}",
            self.count,
            self.sum / self.count as f64 * 1e3,
            bound(0.5),
            bound(0.99)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP keel_live_log_write_seconds Time\n\
        keel_live_log_write_seconds_sum 0.5\n\
        keel_live_log_write_seconds_count 10\n\
        keel_live_log_write_seconds_bucket{le=\"0.01\"} 8\n\
        keel_live_log_write_seconds_bucket{le=\"0.1\"} 10\n\
        keel_live_log_write_seconds_bucket{le=\"+Inf\"} 10\n\
        keel_steps_total{outcome=\"ok\"} 3\n";
    const AFTER: &str = "keel_live_log_write_seconds_sum 2.5\n\
        keel_live_log_write_seconds_count 110\n\
        keel_live_log_write_seconds_bucket{le=\"0.01\"} 58\n\
        keel_live_log_write_seconds_bucket{le=\"0.1\"} 109\n\
        keel_live_log_write_seconds_bucket{le=\"+Inf\"} 110\n";

    #[test]
    fn the_writes_of_a_phase_are_the_difference_of_two_readings() {
        let before = LogWrites::parse(BEFORE).unwrap();
        let phase = LogWrites::parse(AFTER).unwrap().since(&before);
        assert_eq!(phase.count, 100);
        assert_eq!(phase.quantile_bound(0.5), Some(0.01));
        assert_eq!(phase.quantile_bound(0.99), Some(0.1));
        assert_eq!(
            phase.summary(),
            "100 writes, mean 20.0 ms, p50 <= 10.0 ms, p99 <= 100.0 ms"
        );
    }

    #[test]
    fn a_daemon_without_the_histogram_is_told_apart() {
        assert_eq!(LogWrites::parse("keel_steps_total 3\n"), None);
        assert_eq!(LogWrites::default().summary(), "no writes");
    }
}
