//! `keel bench soak`: many chats with randomly chosen scripts (faults of every kind), random
//! user interrupts, random client disconnects, optionally users who edit, queue, promote,
//! compact and delete (`--actions`), on one daemon or several replicas of one PostgreSQL
//! database, and kill -9 of a daemon at random moments. At the end every chat is checked
//! against the invariants Keel promises; a failure prints the seed that reproduces it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::task::JoinSet;

use super::actions::{self, Program};
use super::actor;
use super::follower::{self, Behaviour};
use super::processes::{DaemonSetup, Process, TITLE_MODEL, check_replicas};
use super::scenario;
use super::stats::mib;
use super::target::{Replica, Restarts, Target};
use super::usage::{self, Counts, Reported, Watched};
use keel_client::Api;

#[derive(Debug, Clone, clap::Args)]
#[command(args_override_self = true)]
pub struct Args {
    /// Chats, all started at once.
    #[arg(long, default_value_t = 100)]
    pub chats: usize,
    /// Seed of every random choice; printed, so a failing soak can be rerun as it was.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Times the daemon is killed with SIGKILL (at random moments) and restarted.
    #[arg(long, default_value_t = 0)]
    pub kills: usize,
    /// Waves of `--chats` chats, one after another; the daemon's memory, file descriptors
    /// and threads are printed after each, so a leak shows as growth.
    #[arg(long, default_value_t = 1)]
    pub waves: usize,
    /// Share of chats whose user interrupts the reply.
    #[arg(long, default_value_t = 0.15)]
    pub interrupts: f64,
    /// Share of chats whose event stream is dropped and resumed at random points.
    #[arg(long, default_value_t = 0.3)]
    pub disconnects: f64,
    /// How long the whole soak may take before the chats still unsettled count as stuck.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Database URL; default: a fresh SQLite file in a temporary directory.
    #[arg(long)]
    pub database: Option<String>,
    /// Daemons sharing the `--database` (PostgreSQL); requests and kills go to any of them.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Share of chats whose user acts beyond reading: sends with `busy: "queue"`, promotes
    /// and deletes queued messages, edits mid-reply and mid-tool, interrupts, compacts (by
    /// request and by a small context limit), answers client-side tools late, never or
    /// after an interrupt, and deletes running chats.
    #[arg(long, default_value_t = 0.0)]
    pub actions: f64,
    /// Relay the daemon's and mock's logs.
    #[arg(long)]
    pub verbose: bool,
}

/// Short timeouts, so stalls and dead owners are noticed within the soak.
const RUNS: &str = "startup_timeout_ms = 2000
idle_timeout_ms = 1000
retry_max_attempts = 5
retry_initial_delay_ms = 20
retry_max_delay_ms = 200
lease_ms = 1500";

/// Runs settings for soaks with the user-action menu: a short deadline for client-side
/// tool answers, so answers that never come are noticed within the soak.
const ACTION_RUNS: &str = "pending_action_timeout_ms = 5000";

pub async fn run(args: Args) -> anyhow::Result<()> {
    ensure!(args.chats > 0, "--chats must be at least 1");
    check_replicas(args.replicas, args.database.as_deref())?;
    let seed = args.seed.unwrap_or_else(rand::random);
    println!(
        "keel bench soak: {} chats, {} kills, {} replica(s), user actions in {:.0}% of chats, seed {seed}",
        args.chats,
        args.kills,
        args.replicas,
        args.actions * 100.0
    );
    let outcome = soak(&args, seed).await;
    match &outcome {
        Ok(()) => println!("soak passed (seed {seed})"),
        Err(error) => println!(
            "soak FAILED: {error:#}\nreproduce with: keel bench soak --chats {} --waves {} --kills {} --replicas {} --actions {} --seed {seed}",
            args.chats, args.waves, args.kills, args.replicas, args.actions
        ),
    }
    outcome
}

/// A chat that met every invariant: a reading user's, watched by the usage check, or an
/// acting user's, with what was carried out.
enum Settled {
    Read(Watched),
    Acted(actor::Done),
}

/// One chat of the soak: a reading user, or one carrying out a program of actions.
enum User {
    Reads(Behaviour),
    Acts(Program, Option<usize>, Box<StdRng>),
}

async fn soak(args: &Args, seed: u64) -> anyhow::Result<()> {
    // The usage check reads the records committed from now on: a reused `--database` keeps
    // those of earlier soaks.
    let started = chrono::Utc::now();
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    // Paced unscripted replies (echoes and summaries), so edits, interrupts and kills can
    // land in the middle of them.
    let rate = if args.actions > 0.0 { 100.0 } else { 0.0 };
    let (setup, _mock) = DaemonSetup::with_mock(
        dir.path(),
        args.database.as_deref(),
        rate,
        args.chats.min(256),
        args.verbose,
    )?;
    let setup = Arc::new(setup);
    // Titles on a model of their own, which the usage check leaves out.
    let runs = format!("{RUNS}\ntitle_model = \"{TITLE_MODEL}\"");
    let runs = if args.actions > 0.0 {
        format!("{runs}\n{ACTION_RUNS}")
    } else {
        runs
    };
    let config = Arc::new(setup.write_config(&runs)?);
    let mut replicas = Vec::new();
    for (daemon, _) in setup.start_replicas(&config, args.replicas).await? {
        println!("wave 0: {}", vitals(&daemon)?);
        replicas.push(Replica {
            api: Api::new(&daemon.url, None)?,
            url: daemon.url.clone(),
            daemon: Mutex::new(daemon),
        });
    }
    let shared = Arc::new(Target {
        replicas,
        server_errors: AtomicUsize::new(0),
        compacting: AtomicUsize::new(0),
        stalls: AtomicUsize::new(0),
        resets: AtomicUsize::new(0),
        deadline: Instant::now() + Duration::from_secs(args.timeout_secs),
        restarts: Restarts::default(),
    });
    let mut rng = StdRng::seed_from_u64(seed);
    // Keys unique to this soak, so a reused database never answers with an earlier soak's
    // chats; they play no part in any random choice.
    let run: u64 = rand::random();
    let mut failures = Vec::new();
    let mut performed = BTreeMap::<String, usize>::new();
    let mut watched = Vec::new();
    for wave in 1..=args.waves.max(1) {
        let mut tasks = JoinSet::new();
        let mut chosen = BTreeMap::<&str, usize>::new();
        for index in (wave - 1) * args.chats..wave * args.chats {
            let mut scenario = scenario::choose(&mut rng, &format!("soak-{seed}-{index}"));
            let key = format!("soak-{run}-{index}");
            let disconnect_every = rng
                .random_bool(args.disconnects.clamp(0.0, 1.0))
                .then(|| rng.random_range(2..12));
            let acts = args.actions > 0.0 && rng.random_bool(args.actions.clamp(0.0, 1.0));
            // Users who act get client-side tools more often, so that every way of
            // answering them comes up.
            if acts && rng.random_bool(0.2) {
                scenario =
                    scenario::named(&mut rng, "client_tool", &format!("soak-{seed}-{index}"));
            }
            *chosen.entry(scenario.name).or_default() += 1;
            let user = if acts {
                let program = actions::choose(&mut rng);
                User::Acts(
                    program,
                    disconnect_every,
                    Box::new(StdRng::seed_from_u64(rng.random())),
                )
            } else {
                User::Reads(Behaviour {
                    interrupt_after: rng
                        .random_bool(args.interrupts.clamp(0.0, 1.0))
                        .then(|| rng.random_range(1..8)),
                    disconnect_every,
                    idempotency_key: key.clone(),
                })
            };
            let shared = shared.clone();
            tasks.spawn(async move {
                let kills = shared.restarts.kills();
                let verdict = match user {
                    User::Reads(behaviour) => follower::drive(&shared, &scenario, &behaviour)
                        .await
                        .map(|chat| {
                            // What may leave a response delivered whole uncommitted.
                            let exposures = shared.restarts.kills() - kills
                                + usize::from(behaviour.interrupt_after.is_some())
                                + usize::from(scenario.may_void_a_response());
                            Settled::Read(Watched {
                                key: scenario.id.clone(),
                                chat,
                                exposures,
                            })
                        }),
                    User::Acts(program, disconnect_every, rng) => {
                        actor::drive(shared, &scenario, &program, disconnect_every, &key, *rng)
                            .await
                            .map(Settled::Acted)
                    }
                };
                (index, scenario, verdict)
            });
        }
        if wave == 1 {
            println!("scenarios of wave 1: {chosen:?}");
        }
        let killer = (args.kills > 0).then(|| {
            let (shared, setup, config) = (shared.clone(), setup.clone(), config.clone());
            let (kills, mut rng) = (args.kills, StdRng::seed_from_u64(seed ^ wave as u64));
            tokio::spawn(
                async move { kill_repeatedly(&shared, &setup, &config, kills, &mut rng).await },
            )
        });
        let mut settled = 0;
        while let Some(joined) = tasks.join_next().await {
            let (index, scenario, verdict) = joined.context("a chat task panicked")?;
            match verdict {
                Ok(Settled::Read(chat)) => {
                    settled += 1;
                    watched.push(chat);
                }
                Ok(Settled::Acted(done)) => {
                    settled += 1;
                    for action in &done.actions {
                        *performed.entry(format!("{action:?}")).or_default() += 1;
                    }
                    if let Some(answers) = done.tool_answers {
                        *performed.entry(format!("tools {answers:?}")).or_default() += 1;
                    }
                }
                Err(error) => {
                    failures.push(format!("chat #{index} ({}): {error:#}", scenario.name))
                }
            }
        }
        if let Some(killer) = killer {
            killer.await.context("the kill task panicked")??;
        }
        for replica in &shared.replicas {
            let vitals = vitals(&Target::lock(replica))?;
            println!(
                "wave {wave}: {settled} of {} chats met every invariant; {vitals}",
                args.chats
            );
        }
    }
    if args.actions > 0.0 {
        println!("user actions carried out: {performed:?}");
    }
    if args.actions > 0.0 {
        let stalls = shared.stalls.load(Ordering::Relaxed);
        println!(
            "{stalls} event streams fell silent before their chat's last message (a reconnect delivered it)"
        );
    }
    let resets = shared.resets.load(Ordering::Relaxed);
    println!(
        "{resets} stream resets (a daemon answered a position it could not find with a reset and a replay of the step)"
    );
    let server_errors = shared.server_errors.load(Ordering::Relaxed);
    println!("{server_errors} 5xx answers");
    if server_errors > 0 {
        failures.push(format!("{server_errors} answers were 5xx"));
    }
    let verdict = check_usage(&shared, &setup.mock_url, started, &watched).await?;
    println!(
        "usage: Keel counted {:?}, the mock reported {:?} (input, cached input, output, \
         reasoning; titles left out); reading users' chats: {} exact, {} exposed within their \
         allowance ({} whole responses never committed); acting users' chats within what was \
         reported",
        verdict.keel, verdict.reported, verdict.exact, verdict.exposed, verdict.voided
    );
    for violation in &verdict.violations {
        failures.push(format!("usage: {violation}"));
    }
    if failures.is_empty() {
        return Ok(());
    }
    for failure in failures.iter().take(20) {
        println!("  {failure}");
    }
    bail!("{} invariant violations", failures.len())
}

/// Keel's usage records since `started` against what the mock reported (see [`usage`]).
/// Keel's are read first, so a response the mock finishes meanwhile can only add to the
/// mock's side.
async fn check_usage(
    shared: &Target,
    mock_url: &str,
    started: chrono::DateTime<chrono::Utc>,
    watched: &[Watched],
) -> anyhow::Result<usage::Verdict> {
    let from = started.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let path = format!("/usage?group_by=chat&from={from}");
    let answer = shared.call(reqwest::Method::GET, &path, None, None).await?;
    let mut keel = BTreeMap::<String, Counts>::new();
    for group in answer["groups"].as_array().into_iter().flatten() {
        let count = |field: &str| group[field].as_i64().unwrap_or(0);
        let chat = group["key"]["chat"].as_str().unwrap_or_default().to_owned();
        let counts = [
            count("input_tokens"),
            count("cached_input_tokens"),
            count("output_tokens"),
            count("reasoning_tokens"),
        ];
        keel.insert(chat, counts);
    }
    let stats: serde_json::Value = reqwest::get(format!("{mock_url}/stats"))
        .await
        .context("cannot reach the mock's /stats")?
        .json()
        .await
        .context("the mock's /stats is not JSON")?;
    let reported: Vec<Reported> = serde_json::from_value(stats["completed"].clone())
        .context("unexpected entries in the mock's /stats")?;
    Ok(usage::compare(&keel, &reported, watched, TITLE_MODEL))
}

/// The daemon's memory, file descriptors and threads: flat across waves, or leaking.
fn vitals(daemon: &Process) -> anyhow::Result<String> {
    Ok(format!(
        "daemon rss {:.1} MiB, {} open fds, {} threads",
        mib(daemon.rss()?),
        daemon.open_fds()?,
        daemon.threads()?
    ))
}

/// Kills a replica chosen at random with SIGKILL `kills` times at random moments,
/// restarting it on the same address each time.
async fn kill_repeatedly(
    shared: &Target,
    setup: &DaemonSetup,
    config: &std::path::Path,
    kills: usize,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    for kill in 1..=kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..3_000))).await;
        let which = rng.random_range(0..shared.replicas.len());
        let replica = &shared.replicas[which];
        let address = replica.url.trim_start_matches("http://").to_owned();
        let compacting = shared.compacting.load(Ordering::Relaxed);
        shared.restarts.begin();
        Target::lock(replica).kill();
        let started = setup.start(config, &address).await;
        shared.restarts.end();
        let (restarted, ready) = started?;
        println!(
            "kill {kill}: replica {which} restarted, ready in {:.0} ms; {compacting} chats were compacting on request",
            ready.as_secs_f64() * 1e3
        );
        *Target::lock(replica) = restarted;
    }
    Ok(())
}
