//! Reading the daemon's Prometheus counters.

use super::processes::Process;

/// The daemon's count of follower reads of the store.
pub(super) const CATCH_UPS: &str = "keel_sse_catch_ups_total";

/// The bytes in the daemon's live allocations, as its allocator counts them.
pub(super) const ALLOCATED: &str = "keel_allocated_bytes";

/// A counter or gauge of the daemon's `/metrics` (0 before it was first counted).
pub(super) async fn counter(daemon: &Process, name: &str) -> anyhow::Result<u64> {
    let metrics = reqwest::get(format!("{}/metrics", daemon.url))
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(parse_counter(&metrics, name))
}

/// A counter's value in a `/metrics` page (0 when it is absent).
pub(super) fn parse_counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_counter_by_its_exact_name() {
        let metrics = "# HELP keel_sse_catch_ups Store reads\n\
                       keel_sse_catch_ups_total 12\n\
                       keel_sse_catch_ups_total_other 3\n";
        assert_eq!(parse_counter(metrics, "keel_sse_catch_ups_total"), 12);
        assert_eq!(parse_counter(metrics, "keel_missing_total"), 0);
    }
}
