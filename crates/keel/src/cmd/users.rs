//! `keel users add|remove|list`: the API's users, kept in the database.
//!
//! The daemon looks every token up in the database, so a change here takes effect on the
//! next request without a restart. Users listed in the config file are written to the
//! database at every start, so removing one of them needs the file edited too.

use anyhow::Context as _;
use keel_server::auth::new_token;
use keel_server::config::{Config, Overrides, ProcessEnv};
use keel_store::redact_url;

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
    Add {
        name: String,
        /// Replace the token of an existing user (the old token stops working at once).
        #[arg(long)]
        rotate: bool,
    },
    /// Remove a user: its token stops working at once, its chats stay stored.
    Remove { name: String },
    /// List the users, one name a line, with when each was added.
    List,
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
        .with_context(|| format!("cannot open database {}", redact_url(&config.database)))?;
    let in_file = |name: &str| config.users.iter().any(|u| u.name == name);
    match args.command {
        UsersCommand::Add { name, rotate } => {
            let name = name.trim().to_owned();
            anyhow::ensure!(!name.is_empty(), "the user name must not be empty");
            let users = store.list_users().await.context("cannot list the users")?;
            let exists = users.iter().any(|u| u.name == name);
            anyhow::ensure!(
                rotate || !exists,
                "there is already a user `{name}`; `keel users add {name} --rotate` gives it \
                 a new token (the old one stops working)"
            );
            let token = new_token();
            store
                .upsert_user(&name, &token)
                .await
                .context("cannot store the user")?;
            println!("{token}");
            if exists {
                eprintln!(
                    "user `{name}` has a new token, shown above only once; the old one no longer works"
                );
            } else {
                eprintln!("user `{name}` added; the token above is shown only once");
            }
        }
        UsersCommand::Remove { name } => {
            let name = name.trim();
            let removed = store
                .remove_user(name)
                .await
                .context("cannot remove the user")?;
            anyhow::ensure!(removed, "there is no user `{name}`");
            eprintln!("user `{name}` removed; its token no longer works");
            if in_file(name) {
                eprintln!(
                    "warning: `{name}` is also listed under [[users]] in the config file and \
                     comes back at the next start unless it is removed there"
                );
            }
        }
        UsersCommand::List => {
            let users = store.list_users().await.context("cannot list the users")?;
            for user in users {
                let source = if in_file(&user.name) {
                    "  (config file)"
                } else {
                    ""
                };
                println!(
                    "{}\t{}{source}",
                    user.name,
                    user.created_at.format("%Y-%m-%dT%H:%M:%SZ")
                );
            }
        }
    }
    Ok(())
}
