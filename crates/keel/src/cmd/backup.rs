//! `keel backup FILE` and `keel restore FILE`: a copy of the SQLite database a daemon is
//! using, and that copy put back. The database is found as `keel serve` finds it (flags,
//! `KEEL_CONFIG`, `KEEL_DATABASE_URL`, the configuration file). PostgreSQL is backed up with
//! its own tools (`pg_dump`), as docs/deploy.md describes.

use std::path::PathBuf;

use anyhow::Context as _;
use keel_server::config::{Config, Overrides, ProcessEnv};
use keel_store::redact_url;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file to write (backup: must not exist) or to read (restore).
    pub file: PathBuf,
    /// Configuration file (TOML); `KEEL_CONFIG` when absent.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://PATH (PostgreSQL: use pg_dump and pg_restore).
    #[arg(long)]
    pub database: Option<String>,
}

impl Args {
    fn database(&self) -> anyhow::Result<String> {
        let overrides = Overrides {
            config: self.config.clone(),
            database: self.database.clone(),
            ..Overrides::default()
        };
        Ok(Config::load(&overrides, &ProcessEnv)?.database)
    }
}

pub async fn backup(args: Args) -> anyhow::Result<()> {
    let database = args.database()?;
    keel_store::backup(&database, &args.file)
        .await
        .with_context(|| format!("backing up {} failed", redact_url(&database)))?;
    eprintln!(
        "backed up {} to {}",
        redact_url(&database),
        args.file.display()
    );
    Ok(())
}

pub async fn restore(args: Args) -> anyhow::Result<()> {
    let database = args.database()?;
    keel_store::restore(&database, &args.file)
        .await
        .with_context(|| format!("restoring {} failed", redact_url(&database)))?;
    eprintln!(
        "restored {} from {}",
        redact_url(&database),
        args.file.display()
    );
    Ok(())
}
