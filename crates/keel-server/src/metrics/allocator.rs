//! The process allocator's own account of its memory, exported when the binary names an
//! allocator that keeps one (`keel` runs on jemalloc). The resident set counts pages; these
//! say how much of it live objects take, which is what a stream or a chat costs.

use std::sync::OnceLock;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What the allocator holds, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Live allocations.
    pub allocated: u64,
    /// Pages the allocator keeps resident: live objects, its own bookkeeping and freed
    /// memory not yet given back to the system.
    pub resident: u64,
}

/// Reads the allocator's statistics; `None` when it cannot tell.
pub type AllocatorProbe = fn() -> Option<AllocatorStats>;

/// Process-wide, as the allocator is.
static PROBE: OnceLock<AllocatorProbe> = OnceLock::new();

/// Names the process's allocator probe, before the daemon starts; the first call wins.
pub fn report_allocator(probe: AllocatorProbe) {
    let _ = PROBE.set(probe);
}

/// The allocator's gauges, set each time the metrics are read.
pub(crate) struct AllocatorGauges {
    probe: AllocatorProbe,
    allocated: Gauge,
    resident: Gauge,
}

impl AllocatorGauges {
    /// Registers the gauges when a probe was named: a process without one exports none,
    /// rather than zeros.
    pub(crate) fn register(registry: &mut Registry) -> Option<Self> {
        let probe = *PROBE.get()?;
        let allocated = Gauge::default();
        registry.register(
            "keel_allocated_bytes",
            "Bytes in live allocations, as the process's allocator counts them",
            allocated.clone(),
        );
        let resident = Gauge::default();
        registry.register(
            "keel_allocator_resident_bytes",
            "Bytes of pages the process's allocator keeps resident",
            resident.clone(),
        );
        Some(Self {
            probe,
            allocated,
            resident,
        })
    }

    pub(crate) fn refresh(&self) {
        if let Some(stats) = (self.probe)() {
            self.allocated
                .set(i64::try_from(stats.allocated).unwrap_or(i64::MAX));
            self.resident
                .set(i64::try_from(stats.resident).unwrap_or(i64::MAX));
        }
    }
}
