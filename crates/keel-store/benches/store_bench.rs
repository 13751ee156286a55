//! Throughput of the two hot worker writes, step commits and live-part appends, on SQLite
//! and (when `KEEL_TEST_DATABASE_URL` is set) PostgreSQL.
//!
//! Run: `cargo bench -p keel-store --bench store_bench`. Sizes can be scaled with
//! `KEEL_BENCH_SCALE` (default 1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use keel_core::{Part, Role};
use keel_store::{Lease, NewChat, NewMessage, Store, StoreOptions};
use serde_json::json;
use sqlx::Connection;

fn scale() -> usize {
    std::env::var("KEEL_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

async fn chat_and_lease(store: &Arc<dyn Store>, worker: &str) -> Lease {
    let chat = store
        .create_chat(NewChat {
            owner: "bench".into(),
            model: "m".into(),
            parts: vec![Part::text("go")],
            ..NewChat::default()
        })
        .await
        .unwrap();
    store
        .acquire(worker, 1000)
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.chat_id == chat.id)
        .unwrap()
}

/// Sequential step commits of one assistant message each, on `chats` chats in parallel.
async fn step_commits(store: &Arc<dyn Store>, chats: usize, per_chat: usize) -> f64 {
    let mut leases = Vec::new();
    for i in 0..chats {
        leases.push(chat_and_lease(store, &format!("w{i}")).await);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for lease in leases {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_chat {
                let msg = NewMessage::new(
                    Role::Assistant,
                    vec![Part::text(format!(
                        "step {i}: a short reply of a few words"
                    ))],
                );
                store.commit_step(&lease, vec![msg]).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (chats * per_chat) as f64 / start.elapsed().as_secs_f64()
}

/// Step commits of one assistant message each on `chats` chats, all chats' steps of a
/// round in one `commit_steps` transaction, as the daemon's log writer groups them.
async fn grouped_step_commits(store: &Arc<dyn Store>, chats: usize, rounds: usize) -> f64 {
    let mut leases = Vec::new();
    for i in 0..chats {
        leases.push(chat_and_lease(store, &format!("g{chats}-{i}")).await);
    }
    let start = Instant::now();
    for round in 0..rounds {
        let steps = leases
            .iter()
            .map(|lease| {
                let msg = NewMessage::new(
                    Role::Assistant,
                    vec![Part::text(format!(
                        "step {round}: a short reply of a few words"
                    ))],
                );
                (lease.clone(), vec![msg])
            })
            .collect();
        for outcome in store.commit_steps(steps).await.unwrap() {
            outcome.unwrap();
        }
    }
    (chats * rounds) as f64 / start.elapsed().as_secs_f64()
}

/// Live-part appends in batches of `batch`, on `chats` chats in parallel.
async fn part_appends(store: &Arc<dyn Store>, chats: usize, batches: usize, batch: usize) -> f64 {
    let payloads: Vec<_> = (0..batch)
        .map(|i| json!({"role": "assistant", "part": {"type": "text", "text": format!("tok{i} ")}}))
        .collect();
    let payloads = Arc::new(payloads);
    let mut leases = Vec::new();
    for i in 0..chats {
        leases.push(chat_and_lease(store, &format!("p{i}")).await);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for lease in leases {
        let store = store.clone();
        let payloads = payloads.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..batches {
                store.append_live_parts(&lease, &payloads).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (chats * batches * batch) as f64 / start.elapsed().as_secs_f64()
}

async fn run(name: &str, store: Arc<dyn Store>) {
    let n = scale();
    let commits = step_commits(&store, 1, 3000 * n).await;
    println!("{name:8} step commits, 1 chat:            {commits:>10.0} /s");
    let commits4 = step_commits(&store, 4, 1000 * n).await;
    println!("{name:8} step commits, 4 chats parallel:  {commits4:>10.0} /s");
    for chats in [16, 64] {
        let grouped = grouped_step_commits(&store, chats, 3000 * n / chats).await;
        println!("{name:8} step commits, {chats:>2} chats grouped:  {grouped:>10.0} /s");
    }
    for batch in [50, 200] {
        let parts = part_appends(&store, 1, 20_000 * n / batch * 10, batch).await;
        println!("{name:8} live parts, batch {batch:>3}, 1 chat: {parts:>10.0} /s");
    }
    let parts4 = part_appends(&store, 4, 500 * n, 200).await;
    println!("{name:8} live parts, batch 200, 4 chats: {parts4:>10.0} /s");
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/bench.db", dir.path().display());
        let store = keel_store::open_with(&url, StoreOptions::default())
            .await
            .unwrap();
        run("sqlite", store).await;

        match std::env::var("KEEL_TEST_DATABASE_URL") {
            Ok(base) => {
                let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
                let mut conn = sqlx::PgConnection::connect(&base).await.unwrap();
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let sep = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{sep}options[search_path]={schema}");
                let store = keel_store::open_with(&url, StoreOptions::default())
                    .await
                    .unwrap();
                run("postgres", store).await;
                sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            Err(_) => println!("KEEL_TEST_DATABASE_URL is unset: PostgreSQL skipped"),
        }
    });
}
