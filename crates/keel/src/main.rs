//! `keel`: the command line of the Keel daemon. Each subcommand lives in its own module
//! under `cmd`.

mod client;
mod cmd;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cmd::Cli::parse();
    cmd::init_logging();
    cli.command.run().await
}
