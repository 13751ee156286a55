//! `keel bench`: measurements of a real daemon, started from the running `keel` executable
//! (built with its `bench` feature) together with a mock provider: `load` (throughput,
//! latency, CPU, memory, interrupt and kill -9 recovery), `soak` (random faults, interrupts,
//! reconnects and kills, with every chat's outcome checked) and `idle` (memory and CPU of
//! idle live event streams).
//!
//! The crate's one door is [`Args`] and [`run`]: what the `keel bench` subcommand parses
//! and runs. It lives apart from the daemon so that the product's build carries no
//! load-generation code.

mod actions;
mod actor;
mod check;
mod follower;
mod idle;
mod live;
mod load;
mod log_writes;
mod metrics;
mod model;
mod processes;
mod reader;
mod scenario;
mod soak;
mod stats;
mod target;
mod usage;
mod window;

/// The arguments of `keel bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// N concurrent chats at a set token rate: parts/s, added latency, CPU, RSS per chat,
    /// interrupt → committed, kill -9 → resumed.
    Load(load::Args),
    /// Chats with random faults, interrupts, reconnects and kill -9s; checks every chat's
    /// end state and exits non-zero (printing the seed) on any violation.
    Soak(soak::Args),
    /// N idle chats with one open live event stream each: RSS per subscriber, CPU while
    /// idle, and the followers one message wakes.
    Idle(idle::Args),
}

/// Runs the benchmark `args` names, printing its report to stdout.
pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Load(args) => load::run(args).await,
        Command::Soak(args) => soak::run(args).await,
        Command::Idle(args) => idle::run(args).await,
    }
}
