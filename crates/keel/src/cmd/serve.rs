//! `keel serve`: the daemon.

use std::path::PathBuf;

use anyhow::Context as _;
use keel_server::config::{Config, Overrides, ProcessEnv};

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
    let running = keel_server::serve::start(config)
        .await
        .context("keel could not start")?;
    super::shutdown_signal().await;
    tracing::info!("shutting down: releasing running chats");
    running.shutdown();
    running.wait().await.context("keel stopped with an error")?;
    tracing::info!("stopped");
    Ok(())
}
