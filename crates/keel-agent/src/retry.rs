//! When to try a provider call again, and how long to wait first.
//!
//! Exponential backoff with full jitter: the n-th retry waits a random time in
//! `[0, min(max_delay, initial_delay × 2^(n-1))]`, and a longer Retry-After from the provider
//! wins, up to `max_delay`: a provider that asks for a longer wait fails the attempt (see
//! [`RetryPolicy::refuses`]) rather than parking a worker for hours. Pure functions over an
//! injected random source, so tests are exact.

use std::time::Duration;

use rand::{Rng, RngExt};

/// Retry limits, from the `[runs]` configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub initial_delay: Duration,
    pub max_delay: Duration,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Mid-stream recoveries after the first attempt.
    pub max_recoveries: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_attempts: 5,
            max_recoveries: 2,
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the jitter window before retry number `retry` (1-based).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        self.initial_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// Whether a provider's Retry-After asks for a longer wait than `max_delay`: such an
    /// attempt is not retried but fails with the provider's error.
    pub fn refuses(&self, retry_after: Option<Duration>) -> bool {
        retry_after.is_some_and(|wait| wait > self.max_delay)
    }

    /// The wait before retry number `retry`, honouring a provider's Retry-After.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(retry);
        let jittered = if ceiling.is_zero() {
            Duration::ZERO
        } else {
            let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(rng.random_range(0..=nanos))
        };
        match retry_after {
            Some(wait) if wait > jittered => wait.min(self.max_delay),
            _ => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn ceiling_doubles_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.ceiling(1), Duration::from_secs(1));
        assert_eq!(policy.ceiling(2), Duration::from_secs(2));
        assert_eq!(policy.ceiling(4), Duration::from_secs(8));
        assert_eq!(policy.ceiling(7), Duration::from_secs(60));
        assert_eq!(policy.ceiling(200), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_within_the_window() {
        let policy = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(7);
        for retry in 1..10 {
            for _ in 0..100 {
                assert!(policy.delay(retry, None, &mut rng) <= policy.ceiling(retry));
            }
        }
    }

    #[test]
    fn a_longer_retry_after_wins() {
        let policy = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        let wait = Duration::from_secs(30);
        assert_eq!(policy.delay(1, Some(wait), &mut rng), wait);
        let short = Duration::from_nanos(1);
        assert!(policy.delay(3, Some(short), &mut rng) <= policy.ceiling(3));
    }

    #[test]
    fn a_retry_after_beyond_the_cap_is_refused_not_waited() {
        let policy = RetryPolicy::default();
        assert!(!policy.refuses(None));
        assert!(!policy.refuses(Some(policy.max_delay)));
        assert!(policy.refuses(Some(policy.max_delay + Duration::from_millis(1))));
        assert!(policy.refuses(Some(Duration::MAX)));
        let mut rng = StdRng::seed_from_u64(3);
        assert!(policy.delay(1, Some(Duration::MAX), &mut rng) <= policy.max_delay);
    }
}
