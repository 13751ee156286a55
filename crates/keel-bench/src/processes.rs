//! The processes a benchmark drives: a `keel serve` and a `keel mock-provider`, started from
//! this very executable, and what `/proc` says about them.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};

/// How long a process may take to print the address it listens on.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A child process of this benchmark, killed when dropped.
pub struct Process {
    child: Child,
    /// The `http://ADDR` the process reported.
    pub url: String,
}

/// The children's log filter. Keel's own `info` lines stay on: the bench reads the
/// addresses the children listen on from them. With `verbose`, the bench's own `RUST_LOG`
/// is added when set (say, `sqlx::query=debug` to see every statement).
fn log_filter(verbose: bool) -> String {
    const KEEL: &str = "keel=info,keel_mock=info,keel_server=info";
    match std::env::var("RUST_LOG") {
        Ok(user) if verbose => format!("{user},{KEEL}"),
        _ if verbose => "info".to_owned(),
        _ => format!("warn,{KEEL}"),
    }
}

impl Process {
    /// Starts `keel ARGS...` and waits for the log line carrying `marker` followed by its
    /// address. Later log lines are relayed to our stderr only when `verbose`.
    fn start(args: &[String], dir: &Path, marker: &str, verbose: bool) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the keel executable")?;
        let mut child = Command::new(exe)
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", log_filter(verbose))
            .env_remove("KEEL_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start keel {}", args.join(" ")))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("the child's stderr was not captured"))?;
        let (tx, rx) = mpsc::channel();
        let marker = marker.to_owned();
        std::thread::spawn(move || {
            let mut found = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !found && let Some(rest) = line.split(&marker).nth(1) {
                    found = true;
                    let url: String = rest
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != ';')
                        .collect();
                    let _ = tx.send(url.trim_end_matches("/v1").to_owned());
                    continue;
                }
                if verbose || line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("    [{}] {line}", child_name(&marker));
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(url) => Ok(Self { child, url }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                bail!("keel {} did not start (exit: {status:?})", args.join(" "))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// kill -9, then reaps the process.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// CPU time (user + system) used so far.
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        cpu_time(self.pid())
    }

    /// Resident set size now, in bytes.
    pub fn rss(&self) -> anyhow::Result<u64> {
        resident_bytes(self.pid())
    }

    /// Open file descriptors.
    pub fn open_fds(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/fd", self.pid()))?.count())
    }

    /// Threads of the process.
    pub fn threads(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/task", self.pid()))?.count())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

fn child_name(marker: &str) -> &'static str {
    if marker.contains("mock") {
        "mock"
    } else {
        "keel"
    }
}

/// `keel mock-provider` on a free loopback port, streaming unscripted replies at `rate`
/// tokens per second (0: as fast as possible).
fn start_mock(dir: &Path, verbose: bool, rate: f64) -> anyhow::Result<Process> {
    let args = [
        "mock-provider".to_owned(),
        "--listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--rate".to_owned(),
        rate.to_string(),
    ];
    Process::start(&args, dir, "mock provider listening on ", verbose)
}

/// The context limit of `mock-small`, in tokens: a scripted first message and a couple of
/// replies pass its compaction threshold.
const SMALL_CONTEXT: u64 = 600;

/// The model that writes titles in the soak: a name of its own, so the mock's tally tells
/// title calls (which are not steps and record no usage) from the chats' own.
pub const TITLE_MODEL: &str = "mock-title";

/// What a benchmark's daemon runs against.
pub struct DaemonSetup {
    pub dir: PathBuf,
    pub database: String,
    pub mock_url: String,
    pub workers: usize,
    pub verbose: bool,
}

impl DaemonSetup {
    /// A setup in `dir`, on `database` or else a SQLite file in `dir`, with the mock
    /// provider it runs against (started here, at `rate` as in [`start_mock`]; dropping it
    /// stops it).
    pub fn with_mock(
        dir: &Path,
        database: Option<&str>,
        rate: f64,
        workers: usize,
        verbose: bool,
    ) -> anyhow::Result<(Self, Process)> {
        let mock = start_mock(dir, verbose, rate)?;
        let setup = Self {
            dir: dir.to_owned(),
            database: database.map_or_else(
                || format!("sqlite://{}/keel.db", dir.display()),
                str::to_owned,
            ),
            mock_url: mock.url.clone(),
            workers,
            verbose,
        };
        Ok((setup, mock))
    }

    /// Writes the daemon's configuration: the mock behind each of the three protocols
    /// (`mock`: OpenAI chat, the default; `mock-chain`: OpenAI Responses in chain mode;
    /// `mock-anthropic`: Anthropic Messages; `mock-claude-4-6`: the same under a model name
    /// that refuses prefill, configured to prefill; `mock-small`: OpenAI chat with a context
    /// limit small enough that a few turns compact it), two read-only built-ins, and `runs`
    /// (lines of the `[runs]` table).
    pub fn write_config(&self, runs: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join("keel.toml");
        let workspace = self.dir.join("workspace");
        let config = format!(
            r#"[[providers]]
name = "chat"
kind = "openai-chat"
base_url = "{mock}/v1"

[[providers]]
name = "responses"
kind = "openai-responses"
base_url = "{mock}/v1"

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "{mock}"

[[models]]
id = "mock"
provider = "chat"
model = "mock"
context_limit = 1000000
default = true

[[models]]
id = "mock-chain"
provider = "responses"
model = "mock"
context_limit = 1000000
store = true

[[models]]
id = "mock-small"
provider = "chat"
model = "mock"
context_limit = {small_context}

[[models]]
id = "{title_model}"
provider = "chat"
model = "{title_model}"
context_limit = 1000000

[[models]]
id = "mock-anthropic"
provider = "anthropic"
model = "mock"
context_limit = 1000000

[[models]]
id = "mock-claude-4-6"
provider = "anthropic"
model = "claude-sonnet-4-6"
context_limit = 1000000
continuation = "prefill"

[runs]
workers = {workers}
{runs}

# The load is the point: no cap may turn it away.
[server]
sse_max_per_user = 1000000
sse_max_total = 1000000
max_requests_in_flight = 1000000

[tools]
builtin = ["read_file", "list_dir"]
workspace = "{workspace}"
"#,
            mock = self.mock_url,
            workers = self.workers,
            small_context = SMALL_CONTEXT,
            title_model = TITLE_MODEL,
            workspace = workspace.display(),
        );
        std::fs::create_dir_all(&workspace)?;
        std::fs::write(&path, config)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Starts `n` daemons (at least one) on free ports, one after another, all on this
    /// setup's database: replicas of one another when it is PostgreSQL (see
    /// [`check_replicas`]). Each comes with how long it took to become ready.
    pub async fn start_replicas(
        &self,
        config: &Path,
        n: usize,
    ) -> anyhow::Result<Vec<(Process, Duration)>> {
        let mut started = Vec::with_capacity(n.max(1));
        for _ in 0..n.max(1) {
            started.push(self.start(config, "127.0.0.1:0").await?);
        }
        Ok(started)
    }

    /// `listen` is `127.0.0.1:0` for a free port, or the address of a daemon being restarted.
    pub async fn start(&self, config: &Path, listen: &str) -> anyhow::Result<(Process, Duration)> {
        let started = Instant::now();
        let args = [
            "serve".to_owned(),
            "--listen".to_owned(),
            listen.to_owned(),
            "--database".to_owned(),
            self.database.clone(),
            "--config".to_owned(),
            config.display().to_string(),
        ];
        let daemon = Process::start(&args, &self.dir, "listening on ", self.verbose)?;
        let http = reqwest::Client::new();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = http
                .get(format!("{}/readyz", daemon.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok((daemon, started.elapsed()));
            }
            if Instant::now() > deadline {
                bail!("keel serve never became ready");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Several daemons share one database only on PostgreSQL: a SQLite file belongs to one
/// process.
pub fn check_replicas(replicas: usize, database: Option<&str>) -> anyhow::Result<()> {
    let shared = database.is_some_and(|d| d.starts_with("postgres"));
    if replicas > 1 && !shared {
        bail!("--replicas above 1 needs a shared PostgreSQL --database");
    }
    Ok(())
}

/// Linux reports CPU times in clock ticks of `USER_HZ`, which is 100 on every architecture
/// Linux supports (it is part of the kernel ABI, independent of the kernel's own HZ).
const TICKS_PER_SECOND: u64 = 100;

/// CPU time (user + system) this benchmark process has used so far: its clients share the
/// machine with the daemon and the mock.
pub fn own_cpu() -> anyhow::Result<Duration> {
    cpu_time(std::process::id())
}

fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces; the fields after it are space separated.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat"))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line; 12 and 13 after the name.
    let ticks = |i: usize| -> anyhow::Result<u64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow!("short /proc/{pid}/stat"))?
            .parse()?)
    };
    let total = ticks(11)? + ticks(12)?;
    Ok(Duration::from_millis(total * 1000 / TICKS_PER_SECOND))
}

fn resident_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("bad VmRSS line"))?
        .parse()?;
    Ok(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_postgres_takes_several_replicas() {
        let pg = Some("postgres://u@127.0.0.1/keel");
        assert!(check_replicas(1, None).is_ok());
        assert!(check_replicas(1, Some("sqlite:///tmp/keel.db")).is_ok());
        assert!(check_replicas(2, pg).is_ok());
        assert!(check_replicas(2, None).is_err());
        assert!(check_replicas(2, Some("sqlite:///tmp/keel.db")).is_err());
    }

    #[test]
    fn reads_our_own_cpu_and_memory() {
        let pid = std::process::id();
        let mut spin = 0u64;
        for i in 0..5_000_000u64 {
            spin = spin.wrapping_add(i * i);
        }
        assert!(spin > 0);
        assert!(cpu_time(pid).is_ok());
        assert!(resident_bytes(pid).unwrap() > 1024 * 1024);
    }
}
