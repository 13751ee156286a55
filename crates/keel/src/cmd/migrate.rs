//! `keel migrate`: brings the database schema up to date (start-up does this too).

use anyhow::Context as _;
use keel_server::config::{Config, Overrides, ProcessEnv};
use keel_store::redact_url;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML); `KEEL_CONFIG` when absent.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Database URL: sqlite://PATH or postgres://...
    #[arg(long)]
    pub database: Option<String>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let overrides = Overrides {
        config: args.config,
        database: args.database,
        ..Overrides::default()
    };
    let config = Config::load(&overrides, &ProcessEnv)?;
    keel_store::migrate(&config.database)
        .await
        .with_context(|| format!("migrating {} failed", redact_url(&config.database)))?;
    eprintln!("database {} is up to date", redact_url(&config.database));
    Ok(())
}
