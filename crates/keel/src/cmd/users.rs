//! `keel users add NAME`: creates a user (or replaces its token) and prints the token once.

use anyhow::Context as _;
use keel_server::auth::new_token;
use keel_server::config::{Config, Overrides, ProcessEnv};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: UsersCommand,
    /// Configuration file (TOML); `KEEL_CONFIG` when absent.
    #[arg(long, global = true)]
    pub config: Option<std::path::PathBuf>,
    /// Database URL: sqlite://PATH or postgres://...
    #[arg(long, global = true)]
    pub database: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum UsersCommand {
    /// Add a user and print its bearer token (shown only this once).
    Add { name: String },
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let overrides = Overrides {
        config: args.config,
        database: args.database,
        ..Overrides::default()
    };
    let config = Config::load(&overrides, &ProcessEnv)?;
    let store = keel_store::open(&config.database)
        .await
        .with_context(|| format!("cannot open database {}", config.database))?;
    match args.command {
        UsersCommand::Add { name } => {
            let name = name.trim().to_owned();
            anyhow::ensure!(!name.is_empty(), "the user name must not be empty");
            let token = new_token();
            store
                .upsert_user(&name, &token)
                .await
                .context("cannot store the user")?;
            println!("{token}");
            eprintln!("user `{name}` added; the token above is shown only once");
        }
    }
    Ok(())
}
