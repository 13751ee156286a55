//! `keel users add|remove|list|budget`: the API's users, kept in the database.
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
    /// List the users, one name a line, with when each was added and their budget.
    List,
    /// Set a user's budget: tokens, dollars or both per day or month (UTC); `--clear`
    /// removes it. A request that would start a run beyond it is refused with 429.
    Budget {
        name: String,
        /// Input (cached or not) plus output tokens per period.
        #[arg(long)]
        tokens: Option<u64>,
        /// US dollars per period, at the configured `[[models]] price`s.
        #[arg(long)]
        cost: Option<f64>,
        /// The period: `day` or `month`.
        #[arg(long, value_parser = ["day", "month"], default_value = "day")]
        per: String,
        /// Remove the user's budget.
        #[arg(long, conflicts_with_all = ["tokens", "cost"])]
        clear: bool,
    },
}

/// A budget as the command line gives it; `None` for `--clear`.
fn budget_of(
    tokens: Option<u64>,
    cost: Option<f64>,
    per: &str,
    clear: bool,
) -> anyhow::Result<Option<keel_store::Budget>> {
    if clear {
        return Ok(None);
    }
    let per = match per {
        "month" => keel_store::Period::Month,
        _ => keel_store::Period::Day,
    };
    let budget = keel_store::Budget { tokens, cost, per };
    if let Some(why) = budget.invalid() {
        anyhow::bail!("{why} (or `--clear` to remove the budget)");
    }
    Ok(Some(budget))
}

/// A budget as `keel users list` shows it.
fn shown(budget: &keel_store::Budget) -> String {
    let per = match budget.per {
        keel_store::Period::Day => "day",
        keel_store::Period::Month => "month",
    };
    let limits: Vec<String> = budget
        .tokens
        .map(|t| format!("{t} tokens"))
        .into_iter()
        .chain(budget.cost.map(|c| format!("${c}")))
        .collect();
    format!("{} per {per}", limits.join(" or "))
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
                let budget = store
                    .user_budget(&user.name)
                    .await
                    .context("cannot read the budgets")?
                    .map(|b| format!("\tbudget: {}", shown(&b)))
                    .unwrap_or_default();
                println!(
                    "{}\t{}{budget}{source}",
                    user.name,
                    user.created_at.format("%Y-%m-%dT%H:%M:%SZ")
                );
            }
        }
        UsersCommand::Budget {
            name,
            tokens,
            cost,
            per,
            clear,
        } => {
            let name = name.trim();
            let budget = budget_of(tokens, cost, &per, clear)?;
            let found = store
                .set_budget(name, budget)
                .await
                .context("cannot store the budget")?;
            anyhow::ensure!(found, "there is no user `{name}`");
            match budget {
                Some(b) => eprintln!("user `{name}` has a budget of {}", shown(&b)),
                None => eprintln!("user `{name}` has no budget"),
            }
            if in_file(name)
                && config
                    .users
                    .iter()
                    .any(|u| u.name == name && u.budget.is_some())
            {
                eprintln!(
                    "warning: `{name}` has a budget under [[users]] in the config file, which \
                     replaces this one at the next start"
                );
            }
        }
    }
    Ok(())
}
