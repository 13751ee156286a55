//! `run_command`: a shell command run in the workspace directory, in a process group of its
//! own, with a timeout and a bounded combined output.
//!
//! The whole process group is killed when the command times out, when the call is cancelled,
//! when the call's future is dropped, and also after the shell exits normally: background jobs
//! the command started (`server &`) would otherwise outlive the call with nobody to stop them.
//! A process that deliberately leaves the group (`setsid`) is out of this reach. A confined
//! command's group is the session its launcher starts.
//!
//! The command gets only the allowed environment variables (`env`), and, when the daemon has
//! a launcher for it, runs inside a Landlock sandbox confined to the workspace (`sandbox`).

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, ToolDefinition};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::args;
use crate::env;
use crate::limit::cut_marker;
use crate::sandbox::Launcher;
use crate::workspace::Workspace;

const NAME: &str = super::BuiltinTool::RunCommand.name();

/// Default time a command may run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest timeout a call may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Default cap on the combined output kept from a command.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;
/// How long output is still collected after the group was killed; a process that left the
/// group (`setsid`) could otherwise keep the pipes open forever.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The command line, run with `sh -c` in the workspace directory.
    command: String,
    /// Time limit in milliseconds (default 30000, at most the daemon's limit on a tool call).
    /// The command and every process it started are killed when it is reached.
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// Runs shell commands in the workspace.
#[derive(Debug, Clone)]
pub struct RunCommand {
    workspace: Workspace,
    default_timeout: Duration,
    max_timeout: Duration,
    max_output: usize,
    sandbox: Option<Launcher>,
}

impl RunCommand {
    pub fn new(workspace: Workspace) -> Self {
        Self {
            workspace,
            default_timeout: DEFAULT_TIMEOUT,
            max_timeout: MAX_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
            sandbox: None,
        }
    }

    /// The timeout of calls that do not give `timeout_ms`.
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout.min(self.max_timeout);
        self
    }

    /// The longest timeout a call may ask for (at most [`MAX_TIMEOUT`]); the daemon's
    /// per-tool limit, so the command's own timeout, which keeps the output so far, fires
    /// first.
    pub fn with_max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout = timeout.min(MAX_TIMEOUT);
        self.default_timeout = self.default_timeout.min(self.max_timeout);
        self
    }

    /// Starts every command through `launcher`, confined to the workspace (`sandbox`).
    pub fn with_sandbox(mut self, launcher: Launcher) -> Self {
        self.sandbox = Some(launcher);
        self
    }

    /// The cap on the combined stdout and stderr kept (head and tail).
    pub fn with_max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }
}

enum Outcome {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

#[async_trait]
impl Tool for RunCommand {
    fn definition(&self) -> ToolDefinition {
        args::tool_definition!(
            Args,
            NAME,
            "Run a shell command (sh -c) in the workspace directory. Returns the combined \
             stdout and stderr (long output keeps its beginning and end) and the exit code.",
        )
    }

    async fn call(&self, call: ToolCallRequest, cancel: Cancel) -> Result<ToolOutput, ToolError> {
        let args: Args = args::parse(NAME, &call.args)?;
        let timeout = args
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.default_timeout)
            .min(self.max_timeout);

        let mut command = match &self.sandbox {
            // The launcher makes a session of its own, whose group has the launcher's pid; a
            // group leader could not.
            Some(launcher) => launcher.command(self.workspace.root(), "sh"),
            None => {
                let mut command = tokio::process::Command::new("sh");
                command.process_group(0);
                command
            }
        };
        command
            .arg("-c")
            .arg(&args.command)
            .current_dir(self.workspace.root())
            .env_clear()
            .envs(env::allowed())
            .env("PWD", self.workspace.root())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // One pipe for both streams keeps their interleaving exactly as written, as on a
        // terminal.
        let pipe_error = |e| ToolError(format!("cannot create the output pipe: {e}"));
        let (reader, writer) = std::io::pipe().map_err(pipe_error)?;
        command
            .stdout(writer.try_clone().map_err(pipe_error)?)
            .stderr(writer);
        let spawned = command.spawn();
        // The command keeps the pipe's write end open until dropped, which would keep the
        // output from ever ending.
        drop(command);
        let mut child = spawned.map_err(|e| ToolError(format!("cannot start `sh`: {e}")))?;
        // The group id is the pid of the process started (shell or launcher).
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(|id| GroupKiller(Pid::from_raw(id)));
        let reader =
            tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into()).map_err(pipe_error)?;

        let output = Mutex::new(CappedOutput::new(self.max_output));
        let drain = pump(reader, &output);
        tokio::pin!(drain);
        let mut drained = false;

        let outcome = {
            let wait = child.wait();
            tokio::pin!(wait);
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    status = &mut wait => break Outcome::Exited(status),
                    _ = &mut drain, if !drained => drained = true,
                    _ = &mut deadline => break Outcome::TimedOut,
                    _ = cancel.cancelled() => break Outcome::Cancelled,
                }
            }
        };
        if !matches!(outcome, Outcome::Exited(_)) {
            // The process itself first (it is not reaped yet, so its pid is still its own): a
            // launcher killed before it made its session has started nothing.
            let _ = child.start_kill();
        }
        if let Some(group) = &group {
            group.kill();
        }
        if !matches!(outcome, Outcome::Exited(_)) {
            // Reap the shell; it was just sent SIGKILL, so this is immediate.
            let _ = child.wait().await;
        }
        if !drained {
            let _ = tokio::time::timeout(DRAIN_GRACE, &mut drain).await;
        }
        let text = output
            .lock()
            .map(|o| o.render())
            .unwrap_or_else(|poisoned| poisoned.into_inner().render());

        match outcome {
            Outcome::Exited(Ok(status)) => Ok(ToolOutput::Text(with_status(text, status))),
            Outcome::Exited(Err(e)) => {
                Err(ToolError(format!("waiting for the command failed: {e}")))
            }
            Outcome::TimedOut => Err(ToolError(format!(
                "command timed out after {} ms and was killed{}",
                timeout.as_millis(),
                if text.is_empty() {
                    String::new()
                } else {
                    format!("; output so far:\n{text}")
                }
            ))),
            Outcome::Cancelled => Err(ToolError("command was cancelled and killed".to_owned())),
        }
    }
}

fn with_status(mut text: String, status: ExitStatus) -> String {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => text.push_str(&format!("[exit code: {code}]")),
        (None, Some(signal)) => text.push_str(&format!("[killed by signal {signal}]")),
        (None, None) => text.push_str("[exit status unknown]"),
    }
    text
}

/// Kills a process group when asked, and when dropped (a cancelled or abandoned call).
struct GroupKiller(Pid);

impl GroupKiller {
    fn kill(&self) {
        // ESRCH (the group is already gone) is the expected case after a clean exit.
        let _ = killpg(self.0, Signal::SIGKILL);
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn pump<R: AsyncRead + Unpin>(mut reader: R, output: &Mutex<CappedOutput>) {
    let mut chunk = vec![0u8; 8192];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut out = match output.lock() {
                    Ok(out) => out,
                    Err(poisoned) => poisoned.into_inner(),
                };
                out.push(&chunk[..n]);
            }
        }
    }
}

/// Keeps the first two thirds and the last third of a byte stream up to a cap, counting what
/// falls in between, so memory stays bounded whatever the command prints.
struct CappedOutput {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    cut: u64,
}

impl CappedOutput {
    fn new(cap: usize) -> Self {
        let head_cap = cap - cap / 3;
        Self {
            head: Vec::new(),
            head_cap,
            tail: VecDeque::new(),
            tail_cap: cap - head_cap,
            cut: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let room = self.head_cap - self.head.len();
        let take = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.cut += (self.tail.len() + bytes.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            self.tail.extend(bytes);
            let excess = self.tail.len().saturating_sub(self.tail_cap);
            self.cut += excess as u64;
            self.tail.drain(..excess);
        }
    }

    fn render(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.cut > 0 {
            text.push_str(&cut_marker(self.cut));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Instant;

    use keel_core::CancelCause;
    use nix::sys::signal::kill;

    use super::*;
    use crate::builtin::test_support::{call, call_with, workspace};

    /// Gone, or a zombie waiting for an init process that may not reap it.
    fn is_gone(pid: i32) -> bool {
        if kill(Pid::from_raw(pid), None).is_err() {
            return true;
        }
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    }

    async fn wait_gone(pid: i32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !is_gone(pid) {
            assert!(Instant::now() < deadline, "process {pid} is still alive");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn read_pid(path: &Path) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(text) = std::fs::read_to_string(path)
                && let Ok(pid) = text.trim().parse()
            {
                return pid;
            }
            assert!(Instant::now() < deadline, "no pid file");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn reports_output_and_exit_code_from_the_workspace() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.root().join("marker.txt"), "").unwrap();
        let tool = RunCommand::new(ws);
        let out = call(&tool, r#"{"command":"ls; echo err >&2; exit 3"}"#)
            .await
            .unwrap();
        assert_eq!(
            out,
            ToolOutput::Text("marker.txt\nerr\n[exit code: 3]".into())
        );
        let out = call(&tool, r#"{"command":"true"}"#).await.unwrap();
        assert_eq!(out, ToolOutput::Text("[exit code: 0]".into()));
        assert!(!tool.idempotent());
    }

    #[tokio::test]
    async fn secrets_in_the_daemon_environment_are_not_passed() {
        let (_dir, ws) = workspace();
        let tool = RunCommand::new(ws);
        // Any variable of the test process the shell would not set by itself.
        let shell_own = [
            "PWD", "OLDPWD", "SHLVL", "_", "IFS", "PS1", "PS2", "PS4", "PPID",
        ];
        let (withheld, _) = std::env::vars()
            .find(|(k, _)| !env::ALLOWED.contains(&k.as_str()) && !shell_own.contains(&k.as_str()))
            .expect("the test process has some environment");
        let out = call(&tool, r#"{"command":"env"}"#).await.unwrap();
        let ToolOutput::Text(text) = out else {
            panic!()
        };
        assert!(!text.contains(&format!("{withheld}=")), "{text}");
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail() {
        let (_dir, ws) = workspace();
        let tool = RunCommand::new(ws).with_max_output(300);
        let out = call(
            &tool,
            r#"{"command":"echo START; seq 1 5000 >/dev/null; i=0; while [ $i -lt 400 ]; do echo line$i; i=$((i+1)); done; echo END"}"#,
        )
        .await
        .unwrap();
        let ToolOutput::Text(text) = out else {
            panic!()
        };
        assert!(text.starts_with("START\n"), "{text}");
        assert!(text.ends_with("END\n[exit code: 0]"), "{text}");
        assert!(text.contains(" bytes truncated ...]"), "{text}");
        assert!(text.len() < 500, "{}", text.len());
    }

    #[test]
    fn capped_output_counts_what_it_cuts() {
        let mut out = CappedOutput::new(9);
        out.push(b"abcdef");
        out.push(b"ghijklmnop");
        out.push(b"qr");
        // head 6 bytes, tail 3 bytes, 18 - 9 cut.
        assert_eq!(out.render(), format!("abcdef{}pqr", cut_marker(9)));
        let mut out = CappedOutput::new(9);
        out.push(b"abc");
        assert_eq!(out.render(), "abc");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (_dir, ws) = workspace();
        let pid_file = ws.root().join("child.pid");
        let tool = RunCommand::new(ws);
        let started = Instant::now();
        let err = call(
            &tool,
            r#"{"command":"sleep 1000 & echo $! > child.pid; echo started; wait","timeout_ms":1500}"#,
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(6));
        assert_eq!(
            err.0,
            "command timed out after 1500 ms and was killed; output so far:\nstarted\n"
        );
        wait_gone(read_pid(&pid_file).await).await;
    }

    #[tokio::test]
    async fn cancellation_kills_the_whole_group() {
        let (_dir, ws) = workspace();
        let pid_file = ws.root().join("child.pid");
        let tool = RunCommand::new(ws);
        let cancel = Cancel::new();
        let task = tokio::spawn({
            let cancel = cancel.clone();
            async move {
                call_with(
                    &tool,
                    r#"{"command":"sleep 1000 & echo $! > child.pid; wait"}"#,
                    cancel,
                )
                .await
            }
        });
        let pid = read_pid(&pid_file).await;
        assert!(!is_gone(pid));
        cancel.cancel(CancelCause::Interrupted);
        let err = task.await.unwrap().unwrap_err();
        assert_eq!(err.0, "command was cancelled and killed");
        wait_gone(pid).await;
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_whole_group() {
        let (_dir, ws) = workspace();
        let pid_file = ws.root().join("child.pid");
        let tool = RunCommand::new(ws);
        let fut = call(
            &tool,
            r#"{"command":"sleep 1000 & echo $! > child.pid; wait"}"#,
        );
        let pid = tokio::select! {
            _ = fut => panic!("finished"),
            pid = read_pid(&pid_file) => pid,
        };
        wait_gone(pid).await;
    }

    #[tokio::test]
    async fn background_jobs_do_not_outlive_a_finished_command() {
        let (_dir, ws) = workspace();
        let pid_file = ws.root().join("child.pid");
        let tool = RunCommand::new(ws);
        let started = Instant::now();
        let out = call(
            &tool,
            r#"{"command":"sleep 1000 & echo $! > child.pid; echo done"}"#,
        )
        .await
        .unwrap();
        assert_eq!(out, ToolOutput::Text("done\n[exit code: 0]".into()));
        assert!(started.elapsed() < Duration::from_secs(5));
        wait_gone(read_pid(&pid_file).await).await;
    }
}
