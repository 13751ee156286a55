//! The process's allocator, and its own account of its memory for `/metrics`.

use keel_server::metrics::AllocatorStats;

/// jemalloc rather than the system allocator: a streamed part allocates a few dozen small
/// buffers on one thread and frees many of them on another, which glibc's allocator serves
/// from shared bins under a lock and consolidates often (a tenth of the daemon's CPU at a
/// thousand chats); jemalloc's per-thread caches do not. Its settings are in
/// `.cargo/config.toml`; its statistics are on (`stats`) for [`stats`].
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's counts now: they are taken afresh only when the epoch advances.
pub(crate) fn stats() -> Option<AllocatorStats> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().ok()?;
    let resident = tikv_jemalloc_ctl::stats::resident::read().ok()?;
    Some(AllocatorStats {
        allocated: u64::try_from(allocated).ok()?,
        resident: u64::try_from(resident).ok()?,
    })
}
