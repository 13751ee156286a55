//! `keel bench load`: N concurrent chats against a real daemon and mock provider, measuring
//! throughput, per-delta latency, CPU and memory, interrupt latency and kill -9 recovery.
//! With `--replicas N` the chats and their followers are spread over N daemons sharing one
//! PostgreSQL database, and CPU and memory are reported for each.
//!
//! Longer than most files: the load benchmark's phases (set-up, ramp, measured window,
//! interrupts, kills, report) in the order one run goes through them.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail, ensure};
use keel_mock::{Script, Step};
use serde_json::json;
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use super::live::Live;
use super::log_writes::LogWrites;
use super::metrics::{CATCH_UPS, parse_counter};
use super::processes::{DaemonSetup, Process, check_replicas, own_cpu};
use super::stats::{Spread, mib, micros};
use super::window::{ChatTimes, LiveWindow, Phases, live_window, phases};
use keel_client::Api;

#[derive(Debug, Clone, clap::Args)]
#[command(args_override_self = true)]
pub struct Args {
    /// Concurrent chats.
    #[arg(long, default_value_t = 100)]
    pub chats: usize,
    /// Text tokens in each chat's measured reply.
    #[arg(long, default_value_t = 200)]
    pub tokens: u32,
    /// Tokens per second the mock provider streams each reply at; 0: as fast as it can.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Chats interrupted mid-reply to measure interrupt → committed (0 skips).
    #[arg(long, default_value_t = 20)]
    pub interrupts: usize,
    /// Chats streaming when the daemon is killed with SIGKILL and restarted (0 skips).
    #[arg(long, default_value_t = 20)]
    pub kills: usize,
    /// Database URL; default: a fresh SQLite file in a temporary directory.
    #[arg(long)]
    pub database: Option<String>,
    /// Daemons sharing the `--database` (PostgreSQL); chat `i` is created, sent to and
    /// followed on replica `i mod N`, whichever replica runs it.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Each daemon's database pool (`runs.database_connections`); default: the daemon's
    /// own choice. Replicas on one PostgreSQL server share its connection limit.
    #[arg(long)]
    pub database_connections: Option<usize>,
    /// Each measured reply first calls the built-in `list_dir` in a step of its own, then
    /// streams its text in a second: what a step with a tool costs.
    #[arg(long)]
    pub tool_step: bool,
    /// Relay the daemon's and mock's logs, at the level `RUST_LOG` sets (default `info`).
    #[arg(long)]
    pub verbose: bool,
}

/// Timeouts for a benchmark: generous, since nothing here stalls on purpose. No titles:
/// naming each chat would add a model call per chat that is not the load being measured.
pub(super) const RUNS: &str =
    "startup_timeout_ms = 10000\nidle_timeout_ms = 10000\nlease_ms = 3000\ntitles = false";

/// Times one chat's stream may be resumed during the measured phase.
const MAX_RESUMES: usize = 100;

/// How long a chat may stay silent before the benchmark gives up on it.
const PATIENCE: Duration = Duration::from_secs(120);

pub async fn run(args: Args) -> anyhow::Result<()> {
    ensure!(args.chats > 0, "--chats must be at least 1");
    ensure!(args.tokens > 0, "--tokens must be at least 1");
    ensure!(
        args.rate.is_finite() && args.rate >= 0.0,
        "--rate must be >= 0"
    );
    check_replicas(args.replicas, args.database.as_deref())?;
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let (setup, mock) = DaemonSetup::with_mock(
        dir.path(),
        args.database.as_deref(),
        0.0,
        args.chats.max(args.kills).max(64),
        args.verbose,
    )?;
    let config = setup.write_config(&runs_config(args.database_connections))?;
    let started = setup.start_replicas(&config, args.replicas).await?;
    let cold_start = started.first().map(|(_, ready)| *ready).unwrap_or_default();
    let mut daemons: Vec<Process> = started.into_iter().map(|(daemon, _)| daemon).collect();
    let apis = daemons
        .iter()
        .map(|daemon| Api::new(&daemon.url, None))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pids: Vec<String> = daemons.iter().map(|d| d.pid().to_string()).collect();
    println!(
        "keel bench load: {} chats x {} tokens at {} tokens/s; daemon pid {}",
        args.chats,
        args.tokens,
        args.rate,
        pids.join(", ")
    );
    println!(
        "cold start to ready     {:.1} ms",
        cold_start.as_secs_f64() * 1e3
    );
    let idle_rss = daemons
        .iter()
        .map(Process::rss)
        .collect::<anyhow::Result<Vec<_>>>()?;

    let chats = create_chats(&apis, args.chats).await?;
    let writes_before = read_log_writes(&apis).await?;
    let catch_ups_before = read_catch_ups(&apis).await?;
    let throughput = measure_throughput(&daemons, &mock, &chats, &args).await?;
    let writes_after = read_log_writes(&apis).await?;
    let catch_ups_after = read_catch_ups(&apis).await?;
    throughput.print(
        &idle_rss,
        &chats_per_replica(args.chats, daemons.len()),
        args.rate,
    );
    for (replica, (after, before)) in writes_after.iter().zip(&writes_before).enumerate() {
        println!(
            "{} live-part log: {}",
            daemon_name(replica, daemons.len()),
            after.since(before).summary()
        );
    }
    for (replica, (after, before)) in catch_ups_after.iter().zip(&catch_ups_before).enumerate() {
        println!(
            "{} follower reads: {} (store reads of followers woken by a notice)",
            daemon_name(replica, daemons.len()),
            after.saturating_sub(*before)
        );
    }
    // Checked after the report, so that a run that fails still shows what it measured.
    let expected = u64::from(args.tokens) * chats.len() as u64;
    ensure!(
        throughput.parts == expected,
        "received {} stamped tokens live, expected {expected}",
        throughput.parts
    );

    if args.interrupts > 0 {
        let mut latencies =
            interrupt_latencies(&chats[..args.interrupts.min(chats.len())], args.rate).await?;
        println!(
            "interrupt -> committed  {} (p50 / p99 / max, n = {})",
            Spread::of(&mut latencies).millis(),
            latencies.len()
        );
    }
    if let [daemon] = daemons.as_mut_slice()
        && args.kills > 0
    {
        let sample = &chats[..args.kills.min(chats.len())];
        let recovery = kill_and_resume(&setup, &config, daemon, sample, args.rate).await?;
        recovery.print();
    } else if args.kills > 0 {
        // A follower on a replica that lives on sees no connection die: the recovery this
        // measures is that of clients of the killed daemon (see `keel bench soak --kills`).
        println!("kill -9                 not measured with --replicas above 1");
    }
    for (replica, daemon) in daemons.iter().enumerate() {
        println!(
            "{} at the end: rss {:.1} MiB, {} open fds, {} threads",
            daemon_name(replica, daemons.len()),
            mib(daemon.rss()?),
            daemon.open_fds()?,
            daemon.threads()?
        );
    }
    Ok(())
}

/// Every daemon's live-part log writes so far.
async fn read_log_writes(apis: &[Api]) -> anyhow::Result<Vec<LogWrites>> {
    let mut readings = Vec::with_capacity(apis.len());
    for api in apis {
        readings.push(LogWrites::read(api).await?);
    }
    Ok(readings)
}

/// Every daemon's follower reads of the store so far.
async fn read_catch_ups(apis: &[Api]) -> anyhow::Result<Vec<u64>> {
    let mut readings = Vec::with_capacity(apis.len());
    for api in apis {
        readings.push(parse_counter(&api.metrics().await?, CATCH_UPS));
    }
    Ok(readings)
}

/// The `[runs]` lines of the benchmark's daemons: [`RUNS`], and the pool size if given.
fn runs_config(database_connections: Option<usize>) -> String {
    match database_connections {
        Some(n) => format!("{RUNS}\ndatabase_connections = {n}"),
        None => RUNS.to_owned(),
    }
}

/// The replica chat `index` is created, sent to and followed on: round robin.
fn replica_of(index: usize, replicas: usize) -> usize {
    index % replicas.max(1)
}

/// How many of `chats` chats each of `replicas` replicas serves.
fn chats_per_replica(chats: usize, replicas: usize) -> Vec<usize> {
    let mut counts = vec![0; replicas.max(1)];
    for index in 0..chats {
        counts[replica_of(index, replicas)] += 1;
    }
    counts
}

/// How a report line names a daemon: "daemon" alone, "replica N" among several.
fn daemon_name(replica: usize, replicas: usize) -> String {
    if replicas > 1 {
        format!("replica {replica}")
    } else {
        "daemon".to_owned()
    }
}

/// A chat of the benchmark and the replica its client talks to.
struct Placed {
    api: Api,
    id: String,
}

/// Creates `n` chats, spread over the replicas of `apis`, and waits until each has
/// answered a short first message.
async fn create_chats(apis: &[Api], n: usize) -> anyhow::Result<Vec<Placed>> {
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let api = apis[replica_of(i, apis.len())].clone();
        tasks.spawn(async move {
            let text = Script::new(Step::text("ready").rate(0.0)).message(&format!("chat {i}"));
            let id = api.create_chat(&text, None).await?.id;
            wait_idle(&api, &id).await?;
            anyhow::Ok((i, Placed { api, id }))
        });
    }
    let mut chats = Vec::with_capacity(n);
    while let Some(chat) = tasks.join_next().await {
        chats.push(chat??);
    }
    // In creation order, so that chat `i` is on replica `i mod N` and any prefix of the
    // chats (the interrupt and kill samples) is spread over the replicas too.
    chats.sort_by_key(|(i, _)| *i);
    Ok(chats.into_iter().map(|(_, chat)| chat).collect())
}

/// Polls the chat until it is idle, every 20 ms at first and less often the longer it
/// takes: a thousand chats polled every 20 ms are 50,000 requests a second, which kept the
/// daemon from renewing the leases of the very runs they waited for.
async fn wait_idle(api: &Api, chat: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    let mut pause = Duration::from_millis(20);
    loop {
        let status = api.chat(chat).await?.status;
        match status.as_str() {
            "waiting" => return Ok(()),
            "running" | "interrupting" if Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            other => bail!("chat {chat} is {other}"),
        }
    }
}

struct Throughput {
    wall: Duration,
    parts: u64,
    /// Model calls answered: one per chat, two with `--tool-step`.
    steps: u64,
    latency: Spread,
    /// The p99 of the added latency of the parts the mock sent in each second of the phase:
    /// where in the run the tail is (the start of every stream at once, or throughout).
    p99_by_second: Vec<u64>,
    /// Each daemon's CPU time and peak RSS during the measurement.
    daemon_cpu: Vec<Duration>,
    mock_cpu: Duration,
    client_cpu: Duration,
    peak_rss: Vec<u64>,
    /// Streams that fell too far behind and resumed from their last id.
    resumes: usize,
    phases: Option<Phases>,
    window: Option<LiveWindow>,
}

impl Throughput {
    /// `idle_rss` and `chats` are per daemon, as `daemon_cpu` and `peak_rss`.
    fn print(&self, idle_rss: &[u64], chats: &[usize], rate: f64) {
        let per_thousand = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / self.parts.max(1) as f64;
        println!(
            "parts received          {} in {:.2} s = {:.0} parts/s",
            self.parts,
            self.wall.as_secs_f64(),
            self.parts as f64 / self.wall.as_secs_f64()
        );
        self.print_window(chats.iter().sum::<usize>() as f64 * rate);
        println!(
            "added latency per part  {} (p50 / p99 / max)",
            self.latency.millis()
        );
        let by_second: Vec<String> = self
            .p99_by_second
            .iter()
            .map(|p99| format!("{:.0}", *p99 as f64 / 1000.0))
            .collect();
        println!("  p99 by second sent    {} ms", by_second.join(" "));
        if self.resumes > 0 {
            println!(
                "streams resumed         {} (fell behind and reconnected with their last id)",
                self.resumes
            );
        }
        let total: Duration = self.daemon_cpu.iter().sum();
        println!(
            "daemon CPU per 1k parts {:.3} s (mock provider: {:.3} s, bench clients: {:.3} s)",
            per_thousand(total),
            per_thousand(self.mock_cpu),
            per_thousand(self.client_cpu)
        );
        println!(
            "daemon CPU per step     {:.3} ms over {} steps (parts included)",
            total.as_secs_f64() * 1000.0 / self.steps.max(1) as f64,
            self.steps
        );
        let replicas = self.daemon_cpu.len();
        for (replica, cpu) in self.daemon_cpu.iter().enumerate().filter(|_| replicas > 1) {
            println!(
                "  replica {replica} CPU       {:.2} s over the run = {:.0}% of a core",
                cpu.as_secs_f64(),
                100.0 * cpu.as_secs_f64() / self.wall.as_secs_f64()
            );
        }
        for (replica, (peak, idle)) in self.peak_rss.iter().zip(idle_rss).enumerate() {
            let chats = chats.get(replica).copied().unwrap_or(0).max(1) as u64;
            let per_chat = peak.saturating_sub(*idle) / chats;
            println!(
                "{:<24}idle {:.1} MiB, peak {:.1} MiB, {:.1} KiB per chat",
                format!("{} RSS", daemon_name(replica, replicas)),
                mib(*idle),
                mib(*peak),
                per_chat as f64 / 1024.0
            );
        }
    }
}

impl Throughput {
    /// Where the phase went, and what arrived while every stream was live against what the
    /// mock sent meanwhile (`nominal`: chats × rate).
    fn print_window(&self, nominal: f64) {
        let s = |micros: u64| micros as f64 / 1e6;
        if let Some(p) = &self.phases {
            println!(
                "phase (s from start)    last posted {:.2}, all streams live {:.2}, first stream done {:.2}, last token sent {:.2}, last reply committed {:.2}; stream p50 {:.2} s",
                s(p.last_posted),
                s(p.last_first_token),
                s(p.first_last_token),
                s(p.last_token),
                s(p.last_committed),
                s(p.stream_p50),
            );
        }
        match &self.window {
            Some(w) => println!(
                "while all streams live  {:.0} parts/s received, {:.0} sent by the mock ({:.1} %; nominal {:.0}) over {:.2} s",
                w.delivered_per_second(),
                w.offered_per_second(),
                w.share(),
                nominal,
                s(w.micros),
            ),
            None => println!(
                "while all streams live  n/a (the last stream started after the first ended)"
            ),
        }
    }
}

/// Every chat streams one stamped reply at once; each delta's latency is its receive time
/// minus the send time the mock stamped into it.
async fn measure_throughput(
    daemons: &[Process],
    mock: &Process,
    chats: &[Placed],
    args: &Args,
) -> anyhow::Result<Throughput> {
    let start = Arc::new(Barrier::new(chats.len() + 1));
    let mut tasks = JoinSet::new();
    let answer = Step::echo().tokens(args.tokens).rate(args.rate).stamped();
    let script = if args.tool_step {
        Script::new(Step::tool_call("list_dir", json!({"path": "."})).rate(args.rate)).then(answer)
    } else {
        Script::new(answer)
    };
    let text = script.message("measure");
    let steps = 1 + usize::from(args.tool_step);
    for placed in chats {
        let (api, chat) = (placed.api.clone(), placed.id.clone());
        let (start, text) = (start.clone(), text.clone());
        tasks.spawn(async move {
            let mut live = Live::open(&api, &chat, None).await?;
            // Skip the history: the first exchange.
            while !live.next(PATIENCE).await?.is_assistant_message() {}
            start.wait().await;
            let mut times = ChatTimes {
                posted: unix_micros(),
                ..ChatTimes::default()
            };
            api.send_message(&chat, &text, "queue").await?;
            let mut resumes = 0;
            let mut answered = 0;
            loop {
                let event = match live.next(PATIENCE).await {
                    Ok(event) => event,
                    // A client that falls too far behind (`--rate 0`) is disconnected and
                    // resumes from its last id, as the contract asks of every client.
                    Err(error) if resumes < MAX_RESUMES => {
                        resumes += 1;
                        live = Live::open(&api, &chat, live.last_id)
                            .await
                            .with_context(|| format!("resuming after: {error:#}"))?;
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                if let Some(delta) = event.text_delta() {
                    let now = unix_micros();
                    times.parts.extend(stamps(&delta).map(|sent| (sent, now)));
                } else if event.is_assistant_message() {
                    answered += 1;
                    if answered == steps {
                        times.committed = unix_micros();
                        return anyhow::Ok((times, resumes));
                    }
                }
            }
        });
    }
    start.wait().await;
    // On standard error, so that a profiler can be attached to the measured phase alone.
    eprintln!("measured phase started: every chat sends its message");
    let began = Instant::now();
    let began_unix = unix_micros();
    let client_before = own_cpu()?;
    let cpu_before = daemons
        .iter()
        .map(Process::cpu)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mock_before = mock.cpu()?;
    let rss = || {
        daemons
            .iter()
            .map(Process::rss)
            .collect::<anyhow::Result<Vec<_>>>()
    };
    let mut peak_rss = rss()?;
    let mut received = Vec::with_capacity(chats.len());
    let mut resumes = 0;
    let mut sampler = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(result) => {
                    let (times, resumed) = result??;
                    received.push(times);
                    resumes += resumed;
                }
                None => break,
            },
            _ = sampler.tick() => peak_rss = higher(&peak_rss, &rss()?),
        }
    }
    let wall = began.elapsed();
    let client_cpu = own_cpu()?.saturating_sub(client_before);
    let mut latencies: Vec<u64> = received
        .iter()
        .flat_map(|c| &c.parts)
        .map(|&(sent, at)| at.saturating_sub(sent))
        .collect();
    let parts = latencies.len() as u64;
    let p99_by_second = p99_by_second(
        received.iter().flat_map(|c| c.parts.iter().copied()),
        began_unix,
    );
    Ok(Throughput {
        wall,
        parts,
        steps: (chats.len() * steps) as u64,
        latency: Spread::of(&mut latencies),
        p99_by_second,
        daemon_cpu: daemons
            .iter()
            .zip(cpu_before)
            .map(|(daemon, before)| Ok(daemon.cpu()?.saturating_sub(before)))
            .collect::<anyhow::Result<_>>()?,
        mock_cpu: mock.cpu()?.saturating_sub(mock_before),
        client_cpu,
        peak_rss: higher(&peak_rss, &rss()?),
        resumes,
        phases: phases(began_unix, &received),
        window: live_window(&received),
    })
}

/// The p99 added latency (µs) of the parts sent in each second after `began_unix`, from
/// each part's `(sent, received)` unix times.
fn p99_by_second(parts: impl Iterator<Item = (u64, u64)>, began_unix: u64) -> Vec<u64> {
    let mut seconds: Vec<Vec<u64>> = Vec::new();
    for (sent, at) in parts {
        let second = usize::try_from(sent.saturating_sub(began_unix) / 1_000_000).unwrap_or(0);
        if seconds.len() <= second {
            seconds.resize_with(second + 1, Vec::new);
        }
        seconds[second].push(at.saturating_sub(sent));
    }
    seconds
        .iter_mut()
        .map(|latencies| Spread::of(latencies).p99)
        .collect()
}

/// The higher of each pair of samples of the same daemons.
fn higher(peaks: &[u64], now: &[u64]) -> Vec<u64> {
    peaks.iter().zip(now).map(|(a, b)| *a.max(b)).collect()
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(micros)
        .unwrap_or(0)
}

/// The send times stamped into a delta (it may hold several tokens).
fn stamps(delta: &str) -> impl Iterator<Item = u64> + '_ {
    delta
        .split_whitespace()
        .filter_map(|token| token.rsplit_once('@'))
        .filter_map(|(_, micros)| micros.parse().ok())
}

/// Each sample chat starts a long reply; after a few deltas the client interrupts and times
/// how long until the partial reply arrives committed.
async fn interrupt_latencies(chats: &[Placed], rate: f64) -> anyhow::Result<Vec<u64>> {
    let mut tasks = JoinSet::new();
    let text =
        Script::new(Step::echo().tokens(1_000_000).rate(rate.max(20.0))).message("interrupt me");
    for placed in chats {
        let (api, chat, text) = (placed.api.clone(), placed.id.clone(), text.clone());
        tasks.spawn(async move {
            let mut live = Live::open(&api, &chat, None).await?;
            let mut committed = 0;
            while committed < 2 {
                committed += usize::from(live.next(PATIENCE).await?.is_assistant_message());
            }
            api.send_message(&chat, &text, "queue").await?;
            let mut deltas = 0;
            while deltas < 3 {
                deltas += usize::from(live.next(PATIENCE).await?.text_delta().is_some());
            }
            let asked = Instant::now();
            api.interrupt(&chat).await?;
            loop {
                let event = live.next(PATIENCE).await?;
                if event.is_assistant_message() {
                    ensure!(
                        event.data()["interrupted"] == true,
                        "the reply was not marked interrupted"
                    );
                    return anyhow::Ok(micros(asked.elapsed()));
                }
            }
        });
    }
    let mut latencies = Vec::new();
    while let Some(result) = tasks.join_next().await {
        latencies.push(result??);
    }
    Ok(latencies)
}

struct Recovery {
    restart_to_ready: Duration,
    resumed: Spread,
    chats: usize,
}

impl Recovery {
    fn print(&self) {
        println!(
            "kill -9: restart ready  {:.1} ms",
            self.restart_to_ready.as_secs_f64() * 1e3
        );
        println!(
            "kill -9 -> resumed      {} (kill to the resumed step's first event; n = {})",
            self.resumed.millis(),
            self.chats
        );
        println!(
            "kill -9 outcome         {} of {} replies complete, nothing lost or doubled",
            self.chats, self.chats
        );
    }
}

/// The sample chats stream a known reply; the daemon is killed with SIGKILL mid-reply and
/// restarted on the same address and database. Each client reads until the connection
/// dies, reconnects where it was, and times the first event of the resumed step; every
/// reply must end up committed exactly as scripted.
async fn kill_and_resume(
    setup: &DaemonSetup,
    config: &std::path::Path,
    daemon: &mut Process,
    chats: &[Placed],
    rate: f64,
) -> anyhow::Result<Recovery> {
    let rate = rate.max(20.0);
    let reply_tokens = (rate * 4.0) as u32;
    let expected = (1..=reply_tokens)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let api = Api::new(&daemon.url, None)?;
    let killed_at = Arc::new(std::sync::OnceLock::<Instant>::new());
    let streaming = Arc::new(Barrier::new(chats.len() + 1));
    let mut tasks = JoinSet::new();
    for chat in chats.iter().map(|placed| placed.id.clone()) {
        let (api, expected) = (api.clone(), expected.clone());
        let (killed_at, streaming) = (killed_at.clone(), streaming.clone());
        tasks.spawn(async move {
            let text = Script::new(Step::text(expected.clone()).rate(rate)).message("survive");
            api.send_message(&chat, &text, "queue").await?;
            let mut live = Live::open(&api, &chat, None).await?;
            // Skip the history up to this reply's first deltas.
            let mut deltas = 0;
            let mut asked = false;
            while deltas < 3 {
                let event = live.next(PATIENCE).await?;
                if event.kind == "message" && event.data()["role"] == "user" {
                    asked = event.data().to_string().contains("survive");
                } else if asked && event.text_delta().is_some() {
                    deltas += 1;
                }
            }
            streaming.wait().await;
            // Read on until the daemon dies under us.
            while live.next(PATIENCE).await.is_ok() {}
            let after = live.last_id;
            let mut live = loop {
                match Live::open(&api, &chat, after).await {
                    Ok(live) => break live,
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            };
            let first = live.next(PATIENCE).await?;
            let resumed = killed_at.get().map(Instant::elapsed).unwrap_or_default();
            let mut event = first;
            while !event.is_assistant_message() {
                event = live.next(PATIENCE).await?;
            }
            let messages = api.messages(&chat).await?;
            let last = messages.last().map(|m| m.text()).unwrap_or_default();
            ensure!(
                last == expected,
                "chat {chat}: the resumed reply differs from the script:\n{last}"
            );
            anyhow::Ok(micros(resumed))
        });
    }
    streaming.wait().await;
    let address = daemon.url.trim_start_matches("http://").to_owned();
    killed_at.get_or_init(Instant::now);
    daemon.kill();
    let (restarted, _) = setup.start(config, &address).await?;
    *daemon = restarted;
    let restart_to_ready = killed_at.get().map(Instant::elapsed).unwrap_or_default();

    let mut resumed = Vec::new();
    while let Some(result) = tasks.join_next().await {
        resumed.push(result??);
    }
    Ok(Recovery {
        restart_to_ready,
        chats: resumed.len(),
        resumed: Spread::of(&mut resumed),
    })
}

#[cfg(test)]
mod tests;
