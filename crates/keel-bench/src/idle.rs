//! `keel bench idle`: N idle chats, each followed by one open live event stream, measuring
//! what the daemon holds per subscriber (RSS), what idle subscribers cost (CPU while
//! nothing happens) and how many followers one message wakes (the daemon's
//! `keel_sse_catch_ups_total`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use keel_mock::{Script, Step};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::live::Live;
use super::load::RUNS;
use super::metrics::{ALLOCATED, CATCH_UPS, counter};
use super::processes::{DaemonSetup, Process};
use super::stats::mib;
use keel_client::Api;

#[derive(Debug, Clone, clap::Args)]
#[command(args_override_self = true)]
pub struct Args {
    /// Idle chats, each with one open live event stream.
    #[arg(long, default_value_t = 1000)]
    pub subscribers: usize,
    /// Seconds the idle subscribers are watched for CPU use.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Database URL; default: a fresh SQLite file in a temporary directory.
    #[arg(long)]
    pub database: Option<String>,
    /// Relay the daemon's and mock's logs.
    #[arg(long)]
    pub verbose: bool,
}

/// Chats created, or streams opened, at once.
const CONCURRENCY: usize = 200;

/// How long a chat may stay silent before the benchmark gives up on it.
const PATIENCE: Duration = Duration::from_secs(120);

pub async fn run(args: Args) -> anyhow::Result<()> {
    ensure!(args.subscribers > 0, "--subscribers must be at least 1");
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let (setup, _mock) =
        DaemonSetup::with_mock(dir.path(), args.database.as_deref(), 0.0, 64, args.verbose)?;
    let config = setup.write_config(RUNS)?;
    let (daemon, _) = setup.start(&config, "127.0.0.1:0").await?;
    let api = Api::new(&daemon.url, None)?;
    println!(
        "keel bench idle: {} idle chats, one live event stream each; daemon pid {}",
        args.subscribers,
        daemon.pid()
    );
    let chats = create_chats(&api, args.subscribers).await?;
    settle().await;
    let without = daemon.rss()?;
    let allocated_without = counter(&daemon, ALLOCATED).await?;
    let (mut streams, opened) = subscribe(&api, &chats).await?;
    settle().await;
    let with = daemon.rss()?;
    let allocated_with = counter(&daemon, ALLOCATED).await?;
    let per_subscriber = with.saturating_sub(without) / chats.len() as u64;
    let allocated_per_subscriber =
        allocated_with.saturating_sub(allocated_without) / chats.len() as u64;
    println!(
        "streams opened          {} in {:.2} s",
        streams.len(),
        opened.as_secs_f64()
    );
    println!(
        "daemon RSS              {:.1} MiB before the streams, {:.1} MiB with them: {:.1} KiB per subscriber",
        mib(without),
        mib(with),
        per_subscriber as f64 / 1024.0
    );
    println!(
        "daemon allocations      {:.1} KiB per subscriber (live objects, as jemalloc counts them)",
        allocated_per_subscriber as f64 / 1024.0
    );

    let cpu_before = daemon.cpu()?;
    let catch_ups_before = counter(&daemon, CATCH_UPS).await?;
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let idle_cpu = daemon.cpu()?.saturating_sub(cpu_before);
    let idle_catch_ups = counter(&daemon, CATCH_UPS).await? - catch_ups_before;
    println!(
        "idle for {} s            daemon CPU {} ms, {} follower wake-ups",
        args.seconds,
        idle_cpu.as_millis(),
        idle_catch_ups
    );

    let (chat, live) = streams.first_mut().context("no stream is open")?;
    let woken = wake_one(&api, &daemon, chat, live).await?;
    println!(
        "one message to one chat {woken} follower wake-ups (of {} followers)",
        streams.len()
    );
    println!(
        "daemon at the end: rss {:.1} MiB, {} open fds, {} threads",
        mib(daemon.rss()?),
        daemon.open_fds()?,
        daemon.threads()?
    );
    drop(streams);
    Ok(())
}

/// Lets the allocator and the kernel's accounting catch up before RSS is read.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Creates `n` chats, each answered once, at most [`CONCURRENCY`] at a time.
async fn create_chats(api: &Api, n: usize) -> anyhow::Result<Vec<String>> {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let (api, permits) = (api.clone(), permits.clone());
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await?;
            let text = Script::new(Step::text("ready").rate(0.0)).message(&format!("chat {i}"));
            let chat = api.create_chat(&text, None).await?.id;
            let mut live = Live::open(&api, &chat, None).await?;
            while !live.next(PATIENCE).await?.is_assistant_message() {}
            anyhow::Ok(chat)
        });
    }
    let mut chats = Vec::with_capacity(n);
    while let Some(chat) = tasks.join_next().await {
        chats.push(chat??);
    }
    Ok(chats)
}

/// Opens one live event stream per chat and reads each through its history, so every
/// follower is caught up and idle. Returns the open streams and how long opening took.
async fn subscribe(api: &Api, chats: &[String]) -> anyhow::Result<(Vec<(String, Live)>, Duration)> {
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut tasks = JoinSet::new();
    for chat in chats {
        let (api, chat, permits) = (api.clone(), chat.clone(), permits.clone());
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await?;
            let mut live = Live::open(&api, &chat, None).await?;
            while !live.next(PATIENCE).await?.is_assistant_message() {}
            anyhow::Ok((chat, live))
        });
    }
    let mut streams = Vec::with_capacity(chats.len());
    while let Some(live) = tasks.join_next().await {
        streams.push(live??);
    }
    Ok((streams, started.elapsed()))
}

/// Sends one message to `chat` and waits for its reply on the chat's idle stream `live`;
/// returns the follower wake-ups the daemon counted meanwhile (every one of them is this
/// chat's follower: the others have nothing to read).
async fn wake_one(api: &Api, daemon: &Process, chat: &str, live: &mut Live) -> anyhow::Result<u64> {
    let before = counter(daemon, CATCH_UPS).await?;
    let text = Script::new(Step::text("awake").rate(0.0)).message("wake up");
    api.send_message(chat, &text, "queue").await?;
    while !live.next(PATIENCE).await?.is_assistant_message() {}
    // The run ends after its reply: wait until the chat is idle again.
    let deadline = Instant::now() + PATIENCE;
    while api.chat(chat).await?.status != "waiting" {
        if Instant::now() > deadline {
            bail!("chat {chat} never became idle again");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(counter(daemon, CATCH_UPS).await? - before)
}
