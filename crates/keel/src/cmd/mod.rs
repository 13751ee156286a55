//! The subcommands and what they share: argument parsing, shutdown signals.

pub mod backup;
pub mod chat;
pub mod migrate;
pub mod mock_provider;
pub mod sandbox_exec;
pub mod serve;
pub mod users;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "keel", version, about = "A durable agent-chat daemon")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the daemon (HTTP API, live events, workers).
    Serve(serve::Args),
    /// Measure a daemon under load, or soak it with random faults (starts its own daemon and
    /// mock provider). Built with the `bench` feature only.
    #[cfg(feature = "bench")]
    Bench(keel_bench::Args),
    /// A terminal client of a running daemon: streams replies, Ctrl-C interrupts.
    Chat(chat::Args),
    /// Manage API users.
    Users(users::Args),
    /// Bring the database schema up to date.
    Migrate(migrate::Args),
    /// Copy the SQLite database of a running daemon to FILE (which must not exist).
    Backup(backup::Args),
    /// Put a backup in place of the SQLite database; no daemon may be using it.
    Restore(backup::Args),
    /// Run a local OpenAI- and Anthropic-compatible streaming server for demos, tests and
    /// benchmarks.
    MockProvider(mock_provider::Args),
    /// Run a program confined to a workspace (how the daemon starts `run_command` commands).
    #[command(hide = true)]
    SandboxExec(sandbox_exec::Args),
}

impl Command {
    /// The tokio runtime the command runs on. The mock provider and the benchmarks run on
    /// one thread: they share the machine's cores with the daemon they measure, and a
    /// single thread that waits in epoll wakes no sibling worker for each event that
    /// arrives, which is most of what a multi-threaded runtime costs them per part.
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = match self {
            Command::MockProvider(_) => tokio::runtime::Builder::new_current_thread(),
            #[cfg(feature = "bench")]
            Command::Bench(_) => tokio::runtime::Builder::new_current_thread(),
            _ => tokio::runtime::Builder::new_multi_thread(),
        };
        builder.enable_all().build()
    }

    pub async fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Serve(args) => serve::run(args).await,
            #[cfg(feature = "bench")]
            Command::Bench(args) => keel_bench::run(args).await,
            Command::Chat(args) => chat::run(args).await,
            Command::Users(args) => users::run(args).await,
            Command::Migrate(args) => migrate::run(args).await,
            Command::Backup(args) => backup::backup(args).await,
            Command::Restore(args) => backup::restore(args).await,
            Command::MockProvider(args) => mock_provider::run(args).await,
            Command::SandboxExec(args) => sandbox_exec::run(args),
        }
    }
}

/// Completes on Ctrl-C, or on SIGTERM where there is one.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
