//! Live-event fan-out through the [`Hub`]: one run publishes N durable `part` frames to a
//! chat, and every subscriber receives all of them, with 1, 10 and 100 subscribers.
//! Throughput counts parts published (each delivered to every subscriber).
//!
//! The hub drops a subscriber that falls [`SUBSCRIBER_BUFFER`] frames behind rather than
//! wait for it. On two cores, 100 subscriber tasks cannot keep up with a publisher that
//! never yields, so the publisher works in windows of half the buffer and waits for every
//! subscriber to drain each window: the figure is the rate at which all subscribers are
//! served, not the rate of a publisher outrunning them. A lagged subscriber fails the bench.
//!
//! Run: `cargo bench -p keel-server --bench fanout`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel_server::hub::{Frame, Hub, SUBSCRIBER_BUFFER};
use tokio::sync::Semaphore;

/// Parts published per iteration.
const PARTS: u64 = 10_000;
/// Frames published before the publisher waits for the subscribers.
const WINDOW: u64 = (SUBSCRIBER_BUFFER / 2) as u64;
const CHAT: &str = "bench-chat";

/// The payload of a typical text-delta part, as the live sink serialises it.
const PART_DATA: &str = r#"{"part":{"text":"tok ","type":"text"},"role":"assistant"}"#;

/// Publishes `PARTS` frames to `subscribers` subscribers and waits until each has them all.
async fn fan_out(hub: &Arc<Hub>, subscribers: usize) -> Duration {
    hub.begin_run(CHAT);
    // One permit per subscriber per window drained.
    let drained = Arc::new(Semaphore::new(0));
    let mut tasks = Vec::with_capacity(subscribers);
    for _ in 0..subscribers {
        let subscription = hub.subscribe(CHAT);
        assert!(
            subscription.live.backlog.is_empty(),
            "a fresh run has no backlog"
        );
        let mut rx = subscription.live.frames.expect("a run streams");
        let drained = drained.clone();
        tasks.push(tokio::spawn(async move {
            for seq in 0..PARTS {
                let frame = rx.recv().await.expect("subscriber kept up");
                assert_eq!(frame.seq, seq, "frames arrive in order");
                if (seq + 1) % WINDOW == 0 || seq + 1 == PARTS {
                    drained.add_permits(1);
                }
            }
        }));
    }
    let permits = u32::try_from(subscribers).expect("subscriber count fits u32");

    let start = Instant::now();
    for seq in 0..PARTS {
        hub.publish(CHAT, Frame::new(seq, "part", PART_DATA, true, 1));
        if (seq + 1) % WINDOW == 0 || seq + 1 == PARTS {
            drained
                .acquire_many(permits)
                .await
                .expect("semaphore open")
                .forget();
        }
    }
    for task in tasks {
        task.await.expect("subscriber task");
    }
    let elapsed = start.elapsed();

    // As the worker does when the step commits and the run ends.
    hub.commit(CHAT);
    hub.end_run(CHAT);
    elapsed
}

fn fanout(c: &mut Criterion) {
    // Two workers, as on the machine the daemon is measured on.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("tokio runtime");
    let hub = Arc::new(Hub::new());
    let mut group = c.benchmark_group("hub_fanout");
    group
        .throughput(Throughput::Elements(PARTS))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for subscribers in [1usize, 10, 100] {
        group.bench_with_input(
            BenchmarkId::new("subscribers", subscribers),
            &subscribers,
            |b, &subscribers| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let hub = hub.clone();
                        // Publish from a runtime task, as the worker's live sink does.
                        total += runtime
                            .block_on(async move {
                                tokio::spawn(async move { fan_out(&hub, subscribers).await }).await
                            })
                            .expect("publisher task");
                    }
                    total
                });
            },
        );
    }
    group.finish();
    assert_eq!(hub.channel_count(), 0, "every channel was released");
}

criterion_group!(benches, fanout);
criterion_main!(benches);
