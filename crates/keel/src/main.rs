//! `keel`: the command line of the Keel daemon. Each subcommand lives in its own module
//! under `cmd`.

mod allocator;
mod cmd;
mod telemetry;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    // The process's one TLS crypto provider (ring), before any HTTP client is built: model
    // providers, MCP servers over HTTP and `keel chat` all use it (`keel_providers::tls`).
    // It fails only when a provider is already installed, which then stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = cmd::Cli::parse();
    if let cmd::Command::SandboxExec(args) = cli.command {
        // Before any runtime thread exists: see `cmd::sandbox_exec`.
        return cmd::sandbox_exec::run(args);
    }
    // The daemon sets its log up from its configuration (`[log]`, `[telemetry]`).
    if !matches!(cli.command, cmd::Command::Serve(_)) {
        telemetry::init_text();
    }
    let runtime = cli.command.runtime()?;
    runtime.block_on(cli.command.run())
}
