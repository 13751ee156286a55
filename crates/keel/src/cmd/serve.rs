//! `keel serve`: the daemon.

use std::path::PathBuf;

use anyhow::Context as _;
use keel_server::config::{Config, Overrides, ProcessEnv};
use keel_tools::sandbox::Launcher;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML); `KEEL_CONFIG` when absent.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8700.
    #[arg(long)]
    pub listen: Option<String>,
    /// Database URL: sqlite://PATH or postgres://...
    #[arg(long)]
    pub database: Option<String>,
    /// Serve a non-loopback address even though no users are configured.
    #[arg(long)]
    pub allow_unauthenticated_public: bool,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let overrides = Overrides {
        config: args.config,
        listen: args.listen,
        database: args.database,
        allow_unauthenticated_public: args.allow_unauthenticated_public,
    };
    let config = Config::load(&overrides, &ProcessEnv)?;
    let pipeline = crate::telemetry::init_daemon(config.log_format, config.telemetry.as_ref())?;
    protect_memory();
    let served = serve(config).await;
    pipeline.shutdown().await;
    served
}

async fn serve(mut config: Config) -> anyhow::Result<()> {
    config.command_sandbox = command_sandbox(&config)?;
    keel_server::metrics::report_allocator(crate::allocator::stats);
    let running = keel_server::serve::start(config, keel_compat::doors())
        .await
        .context("keel could not start")?;
    super::shutdown_signal().await;
    tracing::info!("shutting down: releasing running chats");
    running.shutdown();
    running.wait().await.context("keel stopped with an error")?;
    tracing::info!("stopped");
    Ok(())
}

/// Makes the daemon non-dumpable: processes it starts (a model's commands, MCP servers) can
/// then neither read its memory nor `/proc/<pid>/environ`, where API keys live, unless they
/// run as root — against which the Landlock sandbox of `run_command` is the defence.
fn protect_memory() {
    if let Err(error) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(%error, "cannot make the daemon non-dumpable");
    }
}

/// How `run_command` starts commands confined to their workspace: this binary's
/// `sandbox-exec` mode, when the kernel confines enough (`sandbox::abi::plan`). An error stops
/// start-up; `None` runs commands unconfined, as the configuration allowed.
fn command_sandbox(config: &Config) -> anyhow::Result<Option<Launcher>> {
    use keel_tools::sandbox::abi::{Plan, kernel_abi, plan};
    if !config
        .tools
        .builtin
        .contains(&keel_tools::BuiltinTool::RunCommand)
    {
        return Ok(None);
    }
    let unconfined_allowed = config.tools.run_command_unconfined;
    match plan(kernel_abi(), unconfined_allowed) {
        Plan::Confine => {}
        Plan::Unconfined(warning) => {
            tracing::warn!("{warning}");
            return Ok(None);
        }
        Plan::Refuse(error) => anyhow::bail!("config key `tools.builtin`: {error}"),
    }
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(error) if unconfined_allowed => {
            tracing::warn!(%error, "cannot find the keel binary: run_command runs commands unconfined");
            return Ok(None);
        }
        Err(error) => anyhow::bail!(
            "cannot find the keel binary to confine run_command with ({error}); set `[tools] \
             run_command_unconfined = true` to run commands unconfined"
        ),
    };
    let mut args = vec!["sandbox-exec".into()];
    if config.tools.run_command_network {
        args.push("--network".into());
    }
    Ok(Some(Launcher { program, args }))
}
