//! `keel bench soak`: many chats with randomly chosen scripts (faults of every kind), random
//! user interrupts, random client disconnects and, optionally, kill -9 of the daemon at
//! random moments. At the end every chat is checked against the invariants Keel promises;
//! a failure prints the seed that reproduces the soak.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::live::Live;
use super::processes::{DaemonSetup, Process, start_mock};
use super::scenario::{self, Expect, Scenario};
use super::stats::mib;
use crate::client::Api;

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

/// Everything the chat tasks share.
struct Soak {
    /// The daemon's API; a restarted daemon listens on the same address.
    api: Api,
    url: String,
    /// The daemon process; the kill task replaces it with each restart.
    daemon: Mutex<Process>,
    server_errors: AtomicUsize,
    deadline: Instant,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    ensure!(args.chats > 0, "--chats must be at least 1");
    let seed = args.seed.unwrap_or_else(rand::random);
    println!(
        "keel bench soak: {} chats, {} kills, seed {seed}",
        args.chats, args.kills
    );
    let outcome = soak(&args, seed).await;
    match &outcome {
        Ok(()) => println!("soak passed (seed {seed})"),
        Err(error) => println!(
            "soak FAILED: {error:#}\nreproduce with: keel bench soak --chats {} --waves {} --kills {} --seed {seed}",
            args.chats, args.waves, args.kills
        ),
    }
    outcome
}

async fn soak(args: &Args, seed: u64) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let mock = start_mock(dir.path(), args.verbose)?;
    let setup = Arc::new(DaemonSetup {
        dir: dir.path().to_owned(),
        database: args
            .database
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}/keel.db", dir.path().display())),
        mock_url: mock.url.clone(),
        workers: args.chats.min(256),
        verbose: args.verbose,
    });
    let config = Arc::new(setup.write_config(RUNS)?);
    let (daemon, _) = setup.start(&config, "127.0.0.1:0").await?;
    println!("wave 0: {}", vitals(&daemon)?);
    let shared = Arc::new(Soak {
        api: Api::new(&daemon.url, None)?,
        url: daemon.url.clone(),
        daemon: Mutex::new(daemon),
        server_errors: AtomicUsize::new(0),
        deadline: Instant::now() + Duration::from_secs(args.timeout_secs),
    });
    let mut rng = StdRng::seed_from_u64(seed);
    // Keys unique to this soak, so a reused database never answers with an earlier soak's
    // chats; they play no part in any random choice.
    let run: u64 = rand::random();
    let mut failures = Vec::new();
    for wave in 1..=args.waves.max(1) {
        let mut tasks = JoinSet::new();
        let mut chosen = BTreeMap::<&str, usize>::new();
        for index in (wave - 1) * args.chats..wave * args.chats {
            let scenario = scenario::choose(&mut rng, &format!("soak-{seed}-{index}"));
            *chosen.entry(scenario.name).or_default() += 1;
            let behaviour = Behaviour {
                interrupt_after: rng
                    .random_bool(args.interrupts.clamp(0.0, 1.0))
                    .then(|| rng.random_range(1..8)),
                disconnect_every: rng
                    .random_bool(args.disconnects.clamp(0.0, 1.0))
                    .then(|| rng.random_range(2..12)),
                idempotency_key: format!("soak-{run}-{index}"),
            };
            let shared = shared.clone();
            tasks.spawn(async move {
                let verdict = drive(&shared, &scenario, &behaviour).await;
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
                Ok(()) => settled += 1,
                Err(error) => {
                    failures.push(format!("chat #{index} ({}): {error:#}", scenario.name))
                }
            }
        }
        if let Some(killer) = killer {
            killer.await.context("the kill task panicked")??;
        }
        let vitals = vitals(&shared.daemon.lock().unwrap_or_else(PoisonError::into_inner))?;
        println!(
            "wave {wave}: {settled} of {} chats met every invariant; {vitals}",
            args.chats
        );
    }
    let server_errors = shared.server_errors.load(Ordering::Relaxed);
    println!("{server_errors} 5xx answers");
    if server_errors > 0 {
        failures.push(format!("{server_errors} answers were 5xx"));
    }
    if failures.is_empty() {
        return Ok(());
    }
    for failure in failures.iter().take(20) {
        println!("  {failure}");
    }
    bail!("{} invariant violations", failures.len())
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

/// What the simulated user does besides reading.
struct Behaviour {
    /// Interrupt after this many live deltas.
    interrupt_after: Option<usize>,
    /// Drop the event stream after every this many events, and resume it.
    disconnect_every: Option<usize>,
    idempotency_key: String,
}

/// What one client saw and did.
#[derive(Default)]
struct Seen {
    /// Committed messages by id, as the live events delivered them.
    messages: BTreeMap<i64, Value>,
    duplicates: Vec<i64>,
    interrupted: bool,
    /// The event id the client had reached when it last (re)connected.
    position: Option<i64>,
}

impl Seen {
    /// A committed message as a `message` event delivered it; a second delivery is noted.
    fn record_message(&mut self, data: &Value) -> anyhow::Result<()> {
        let id = data["id"]
            .as_i64()
            .context("a message event without an id")?;
        if self.messages.insert(id, data.clone()).is_some() {
            self.duplicates.push(id);
        }
        Ok(())
    }
}

/// Creates the chat, follows it to the end like a client would (resuming across dropped
/// connections and daemon restarts), then checks it.
async fn drive(shared: &Soak, scenario: &Scenario, behaviour: &Behaviour) -> anyhow::Result<()> {
    let mut body = json!({"text": scenario.text, "model": scenario.model.id()});
    if !scenario.client_tools.is_empty() {
        body["tools"] = json!(scenario.client_tools);
    }
    let created = call(
        shared,
        reqwest::Method::POST,
        "/chats",
        Some(&body),
        Some(&behaviour.idempotency_key),
    )
    .await?;
    let chat = created["id"]
        .as_str()
        .context("the created chat has no id")?
        .to_owned();

    let mut seen = Seen::default();
    let mut live: Option<Live> = None;
    let mut last_id = None;
    let mut deltas = 0;
    let mut events_on_connection = 0;
    loop {
        ensure!(
            Instant::now() < shared.deadline,
            "chat {chat} never settled"
        );
        let connection = match &mut live {
            Some(connection) => connection,
            None => {
                let api = shared.api.clone();
                match Live::open(&api, &chat, last_id).await {
                    Ok(connection) => {
                        events_on_connection = 0;
                        live.insert(connection)
                    }
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        let event = match connection.next(Duration::from_secs(2)).await {
            Ok(event) => event,
            Err(_) => {
                // A broken or silent stream: resume it, and look at the chat meanwhile.
                last_id = connection.last_id;
                live = None;
                if settle(shared, &chat, scenario).await? {
                    break;
                }
                continue;
            }
        };
        last_id = connection.last_id;
        events_on_connection += 1;
        match event.kind.as_str() {
            "message" => seen.record_message(&event.data)?,
            "part" => {
                deltas += 1;
                if behaviour.interrupt_after == Some(deltas) && !seen.interrupted {
                    seen.interrupted = true;
                    call(
                        shared,
                        reqwest::Method::POST,
                        &format!("/chats/{chat}/interrupt"),
                        Some(&json!({})),
                        None,
                    )
                    .await?;
                }
            }
            "status" => {
                let status = event.data["status"].as_str().unwrap_or_default();
                if matches!(status, "waiting" | "error" | "requires_action")
                    && settle(shared, &chat, scenario).await?
                {
                    break;
                }
            }
            _ => {}
        }
        if behaviour
            .disconnect_every
            .is_some_and(|every| events_on_connection % every == 0)
        {
            live = None;
        }
    }
    // Read what is left of the stream so the client's view is complete, then compare.
    seen.position = last_id;
    catch_up(shared, &chat, &mut seen, last_id).await?;
    verify(shared, &chat, scenario, &seen)
        .await
        .with_context(|| format!("chat {chat}"))
}

/// Whether the chat has reached its end state; answers client-side tool calls on the way.
async fn settle(shared: &Soak, chat: &str, scenario: &Scenario) -> anyhow::Result<bool> {
    let state = call(
        shared,
        reqwest::Method::GET,
        &format!("/chats/{chat}"),
        None,
        None,
    )
    .await?;
    match state["status"].as_str().unwrap_or_default() {
        "waiting" | "error" => Ok(true),
        "requires_action" if !scenario.client_tools.is_empty() => {
            let results: Vec<Value> = state["pending_tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|call| json!({"tool_call_id": call["tool_call_id"], "result": {"meaning": 42}, "is_error": false}))
                .collect();
            call(
                shared,
                reqwest::Method::POST,
                &format!("/chats/{chat}/tool-results"),
                Some(&json!({"results": results})),
                None,
            )
            .await?;
            Ok(false)
        }
        "requires_action" => Ok(true),
        _ => Ok(false),
    }
}

/// Reads the events after `after` until the stream falls silent: the committed messages the
/// client has not seen yet.
async fn catch_up(
    shared: &Soak,
    chat: &str,
    seen: &mut Seen,
    after: Option<i64>,
) -> anyhow::Result<()> {
    // The chat is settled: its history is final. Read until the stream has delivered all of
    // it, resuming across broken connections (the daemon may be killed meanwhile), or until
    // nothing new arrives for long: then the comparison in `verify` reports what is missing.
    let listed = call(
        shared,
        reqwest::Method::GET,
        &format!("/chats/{chat}/messages"),
        None,
        None,
    )
    .await?;
    let committed: Vec<i64> = listed["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_i64())
        .collect();
    let mut position = after;
    let mut last_progress = Instant::now();
    let patience = Duration::from_secs(10);
    while !committed.iter().all(|id| seen.messages.contains_key(id))
        && last_progress.elapsed() < patience
        && Instant::now() < shared.deadline
    {
        let api = shared.api.clone();
        let Ok(mut live) = Live::open(&api, chat, position).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while let Ok(event) = live.next(patience).await {
            position = live.last_id;
            if event.kind == "message" {
                last_progress = Instant::now();
                seen.record_message(&event.data)?;
            }
            if committed.iter().all(|id| seen.messages.contains_key(id)) {
                break;
            }
        }
    }
    Ok(())
}

/// The invariants of one settled chat.
async fn verify(shared: &Soak, chat: &str, scenario: &Scenario, seen: &Seen) -> anyhow::Result<()> {
    let state = call(
        shared,
        reqwest::Method::GET,
        &format!("/chats/{chat}"),
        None,
        None,
    )
    .await?;
    let listed = call(
        shared,
        reqwest::Method::GET,
        &format!("/chats/{chat}/messages"),
        None,
        None,
    )
    .await?;
    let messages = listed["messages"].as_array().cloned().unwrap_or_default();
    let status = state["status"].as_str().unwrap_or_default();

    ensure!(
        seen.duplicates.is_empty(),
        "messages delivered twice: {:?}",
        seen.duplicates
    );
    let committed: BTreeMap<i64, &Value> = messages
        .iter()
        .filter_map(|m| Some((m["id"].as_i64()?, m)))
        .collect();
    if !committed.keys().eq(seen.messages.keys()) {
        bail!(
            "the client saw messages {:?}, the chat has {:?} (client at event {:?}; the messages' event ids: {:?})",
            seen.messages.keys().collect::<Vec<_>>(),
            committed.keys().collect::<Vec<_>>(),
            seen.position,
            message_event_ids(shared, chat).await
        );
    }
    for (id, message) in &committed {
        let delivered = &seen.messages[id];
        ensure!(
            delivered["parts"] == message["parts"]
                && delivered["interrupted"] == message["interrupted"],
            "message {id} was delivered as {delivered} but committed as {message}"
        );
    }
    well_formed(&messages)?;

    let last_assistant = messages.iter().rev().find(|m| m["role"] == "assistant");
    match &scenario.expect {
        Expect::Failure => ensure!(status == "error", "expected status error, found {status}"),
        Expect::Reply(expected) => {
            ensure!(
                status == "waiting",
                "expected status waiting, found {status} ({})",
                state["last_error"]
            );
            let Some(last) = last_assistant else {
                // An interrupt that lands before the first delta leaves nothing to keep.
                ensure!(seen.interrupted, "no assistant reply");
                return Ok(());
            };
            let text = text_of(last);
            if last["interrupted"] == true {
                ensure!(
                    seen.interrupted,
                    "a reply was marked interrupted that nobody interrupted"
                );
                ensure!(
                    expected.starts_with(&text) || scenario.name.contains("tool"),
                    "interrupted reply {text:?} is not a prefix of {expected:?}"
                );
            } else if !seen.interrupted || text == *expected {
                ensure!(
                    text == *expected,
                    "final reply {text:?}, expected {expected:?}"
                );
            }
        }
    }
    Ok(())
}

/// Message id → event id, read from a fresh connection, to explain a miss.
async fn message_event_ids(shared: &Soak, chat: &str) -> Vec<(i64, Option<i64>)> {
    let api = shared.api.clone();
    let Ok(mut live) = Live::open(&api, chat, None).await else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    while let Ok(event) = live.next(Duration::from_secs(1)).await {
        if event.kind == "message" {
            ids.push((event.data["id"].as_i64().unwrap_or(-1), live.last_id));
        }
    }
    ids
}

/// Every tool call has exactly one result, and every result answers a call.
fn well_formed(messages: &[Value]) -> anyhow::Result<()> {
    let mut calls = BTreeMap::<String, usize>::new();
    let mut results = BTreeMap::<String, usize>::new();
    for part in messages
        .iter()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
    {
        let id = part["tool_call_id"].as_str().unwrap_or_default().to_owned();
        match part["type"].as_str() {
            Some("tool_call") => *calls.entry(id).or_default() += 1,
            Some("tool_result") => *results.entry(id).or_default() += 1,
            _ => {}
        }
    }
    ensure!(
        calls.values().all(|n| *n == 1),
        "a tool call id appears twice: {calls:?}"
    );
    ensure!(
        calls == results,
        "tool calls {calls:?} and results {results:?} do not pair up"
    );
    Ok(())
}

fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// One API call, retried across connection failures (the daemon may be restarting); 5xx
/// answers are counted, and any other non-success answer is an error.
async fn call(
    shared: &Soak,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
    idempotency_key: Option<&str>,
) -> anyhow::Result<Value> {
    loop {
        ensure!(
            Instant::now() < shared.deadline,
            "out of time calling {method} {path}"
        );
        let url = format!("{}/api/v1{path}", shared.url);
        let mut request = reqwest::Client::new()
            .request(method.clone(), url)
            .timeout(Duration::from_secs(30));
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if status.is_server_error() {
            shared.server_errors.fetch_add(1, Ordering::Relaxed);
            bail!("{method} {path} answered {status}: {text}");
        }
        ensure!(
            status.is_success(),
            "{method} {path} answered {status}: {text}"
        );
        return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
    }
}

/// Kills the daemon with SIGKILL `kills` times at random moments, restarting it on the same
/// address each time.
async fn kill_repeatedly(
    shared: &Soak,
    setup: &DaemonSetup,
    config: &std::path::Path,
    kills: usize,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    for kill in 1..=kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..3_000))).await;
        let address = shared.url.trim_start_matches("http://").to_owned();
        shared
            .daemon
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kill();
        let (restarted, ready) = setup.start(config, &address).await?;
        println!(
            "kill {kill}: restarted, ready in {:.0} ms",
            ready.as_secs_f64() * 1e3
        );
        *shared.daemon.lock().unwrap_or_else(PoisonError::into_inner) = restarted;
    }
    Ok(())
}
