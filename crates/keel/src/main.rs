//! `keel`: the command line of the Keel daemon. Each subcommand lives in its own module
//! under `cmd`.

mod client;
mod cmd;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The process's one TLS crypto provider (ring), before any HTTP client is built: model
    // providers, MCP servers over HTTP and `keel chat` all use it (`keel_providers::tls`).
    // It fails only when a provider is already installed, which then stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = cmd::Cli::parse();
    cmd::init_logging();
    cli.command.run().await
}
