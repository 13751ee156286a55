//! `keel`: the command line of the Keel daemon. Each subcommand lives in its own module
//! under `cmd`.

mod client;
mod cmd;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cmd::Cli::parse();
    if let cmd::Command::SandboxExec(args) = cli.command {
        // Before any runtime thread exists: see `cmd::sandbox_exec`.
        return cmd::sandbox_exec::run(args);
    }
    cmd::init_logging();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(cli.command.run())
}
