//! Prometheus metrics of the contract, plus Keel's own operational ones.

mod allocator;

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use allocator::AllocatorGauges;
pub use allocator::{AllocatorProbe, AllocatorStats, report_allocator};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabels {
    pub provider: String,
    pub model: String,
    pub kind: String,
    pub chain_broken: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub provider: String,
    pub model: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    pub tool: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// `foreign_host`, `foreign_origin`, `cross_site`, `missing_host`, `sse_user_cap`,
    /// `sse_total_cap` or `overloaded`.
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    pub server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub model: String,
    /// `input`, `cached_input`, `output` or `reasoning`, as the usage API counts them.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    pub model: String,
}

/// Every metric the daemon exports.
pub struct Metrics {
    registry: Registry,
    pub stream_retries: Family<RetryLabels, Counter>,
    pub steps: Family<StepLabels, Counter>,
    pub active_runs: Gauge,
    /// Chats with an in-process live channel (set when metrics are read).
    pub live_channels: Gauge,
    pub time_to_first_part: Histogram,
    /// One write of the live-part log: every chat's pending parts in one transaction. On
    /// several replicas, followers of another replica's run wait for it.
    pub live_log_writes: Histogram,
    pub tool_calls: Family<ToolLabels, Counter>,
    pub lease_renewals: Counter,
    pub lost_leases: Counter,
    pub recovered_runs: Counter,
    pub sse_connections: Counter,
    pub sse_reconnects: Counter,
    pub replayed_events: Counter,
    pub sse_lagged_disconnects: Counter,
    pub sse_catch_ups: Counter,
    /// Live event streams open now.
    pub sse_open: Gauge,
    /// Requests refused before a handler ran, by reason.
    pub http_refused: Family<RefusedLabels, Counter>,
    pub mcp_server_failures: Family<ServerLabels, Counter>,
    /// Tokens of committed steps, by model and kind.
    pub tokens: Family<TokenLabels, Counter>,
    /// The cost of committed steps in US dollars, by model (priced models only).
    pub cost_usd: Family<ModelLabels, Counter<f64, AtomicU64>>,
    /// The allocator's statistics, when the binary named a probe ([`report_allocator`]).
    allocator: Option<AllocatorGauges>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let stream_retries = Family::<RetryLabels, Counter>::default();
        registry.register(
            "keel_stream_retries",
            "Provider stream attempts that were retried",
            stream_retries.clone(),
        );
        let steps = Family::<StepLabels, Counter>::default();
        registry.register("keel_steps", "Model steps by outcome", steps.clone());
        let active_runs = Gauge::default();
        registry.register(
            "keel_active_runs",
            "Runs executing now",
            active_runs.clone(),
        );
        let live_channels = Gauge::default();
        registry.register(
            "keel_live_channels",
            "Chats with live subscribers or a run streaming in this process",
            live_channels.clone(),
        );
        let time_to_first_part =
            Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]);
        registry.register(
            "keel_time_to_first_part_seconds",
            "Time from the start of a step to its first live part",
            time_to_first_part.clone(),
        );
        let live_log_writes = Histogram::new([
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        ]);
        registry.register(
            "keel_live_log_write_seconds",
            "Time of one write of the live-part log (the pending parts of every chat)",
            live_log_writes.clone(),
        );
        let tool_calls = Family::<ToolLabels, Counter>::default();
        registry.register(
            "keel_tool_calls",
            "Tool calls by outcome",
            tool_calls.clone(),
        );
        let lease_renewals = Counter::default();
        registry.register(
            "keel_lease_renewals",
            "Chat lease renewals",
            lease_renewals.clone(),
        );
        let lost_leases = Counter::default();
        registry.register(
            "keel_lost_leases",
            "Runs stopped because their lease was lost",
            lost_leases.clone(),
        );
        let recovered_runs = Counter::default();
        registry.register(
            "keel_recovered_runs",
            "Runs resumed after a crash or an expired lease",
            recovered_runs.clone(),
        );
        let sse_connections = Counter::default();
        registry.register(
            "keel_sse_connections",
            "Live event connections",
            sse_connections.clone(),
        );
        let sse_reconnects = Counter::default();
        registry.register(
            "keel_sse_reconnects",
            "Live event connections that resumed from an event id",
            sse_reconnects.clone(),
        );
        let replayed_events = Counter::default();
        registry.register(
            "keel_sse_replayed_events",
            "Events replayed to connecting clients",
            replayed_events.clone(),
        );
        let sse_catch_ups = Counter::default();
        registry.register(
            "keel_sse_catch_ups",
            "Store reads of live event followers woken by a change notice",
            sse_catch_ups.clone(),
        );
        let sse_lagged_disconnects = Counter::default();
        registry.register(
            "keel_sse_lagged_disconnects",
            "Live event clients disconnected for falling behind",
            sse_lagged_disconnects.clone(),
        );
        let sse_open = Gauge::default();
        registry.register(
            "keel_sse_open",
            "Live event streams open now",
            sse_open.clone(),
        );
        let http_refused = Family::<RefusedLabels, Counter>::default();
        registry.register(
            "keel_http_refused",
            "Requests refused before reaching a handler (foreign host or origin, caps, overload)",
            http_refused.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "keel_tokens",
            "Tokens of committed model steps, by model and kind",
            tokens.clone(),
        );
        let cost_usd = Family::<ModelLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "keel_cost_usd",
            "Cost of committed model steps in US dollars, by model",
            cost_usd.clone(),
        );
        let mcp_server_failures = Family::<ServerLabels, Counter>::default();
        registry.register(
            "keel_mcp_server_failures",
            "MCP servers that failed to start or crashed",
            mcp_server_failures.clone(),
        );
        let allocator = AllocatorGauges::register(&mut registry);
        Self {
            registry,
            stream_retries,
            steps,
            active_runs,
            live_channels,
            time_to_first_part,
            live_log_writes,
            tool_calls,
            lease_renewals,
            lost_leases,
            recovered_runs,
            sse_connections,
            sse_reconnects,
            replayed_events,
            sse_lagged_disconnects,
            sse_catch_ups,
            sse_open,
            http_refused,
            mcp_server_failures,
            tokens,
            cost_usd,
            allocator,
        }
    }

    /// Reads the allocator's statistics into their gauges, when it keeps any.
    pub fn refresh_allocator(&self) {
        if let Some(allocator) = &self.allocator {
            allocator.refresh();
        }
    }

    /// Counts a committed step's usage: `counts` are input, cached input, output and
    /// reasoning tokens as the usage API shows them.
    pub fn usage(&self, model: &str, counts: [u64; 4], cost_nanos: Option<i64>) {
        let kinds = ["input", "cached_input", "output", "reasoning"];
        for (kind, n) in kinds.into_iter().zip(counts) {
            let labels = TokenLabels {
                model: model.to_owned(),
                kind: kind.to_owned(),
            };
            self.tokens.get_or_create(&labels).inc_by(n);
        }
        if let Some(nanos) = cost_nanos {
            let labels = ModelLabels {
                model: model.to_owned(),
            };
            let usd = keel_core::price::usd(nanos);
            self.cost_usd.get_or_create(&labels).inc_by(usd);
        }
    }

    /// The Prometheus text exposition.
    /// Counts a request refused before a handler ran.
    pub fn refused(&self, reason: &str) {
        self.http_refused
            .get_or_create(&RefusedLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            // Encoding into a String cannot fail; keep the partial text rather than panic.
            tracing::error!("encoding metrics failed");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_metric_names_are_exported() {
        let metrics = Metrics::new();
        metrics
            .stream_retries
            .get_or_create(&RetryLabels {
                provider: "p".into(),
                model: "m".into(),
                kind: "rate_limit".into(),
                chain_broken: "false".into(),
            })
            .inc();
        metrics
            .steps
            .get_or_create(&StepLabels {
                provider: "p".into(),
                model: "m".into(),
                outcome: "completed".into(),
            })
            .inc();
        metrics
            .tool_calls
            .get_or_create(&ToolLabels {
                tool: "read_file".into(),
                outcome: "ok".into(),
            })
            .inc();
        let text = metrics.render();
        for name in [
            "keel_stream_retries_total{provider=\"p\",model=\"m\",kind=\"rate_limit\",chain_broken=\"false\"} 1",
            "keel_steps_total{provider=\"p\",model=\"m\",outcome=\"completed\"} 1",
            "keel_active_runs 0",
            "keel_time_to_first_part_seconds_bucket",
            "keel_tool_calls_total{tool=\"read_file\",outcome=\"ok\"} 1",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }
}
