//! `keel sandbox-exec --workspace DIR [--network] -- PROGRAM ARGS…`: the launcher
//! `run_command` starts its commands through. It starts a session of its own, confines itself
//! to the workspace with Landlock and seccomp (see `keel_tools::sandbox`) and replaces itself
//! with the program, which inherits the confinement; when it cannot confine it refuses to run
//! the program at all. Not meant to be typed.

use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The only directory the program may write to.
    #[arg(long)]
    pub workspace: PathBuf,
    /// Let the program open network sockets (`[tools] run_command_network`).
    #[arg(long)]
    pub network: bool,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

/// Runs before any async runtime exists: the process must be single-threaded when it
/// restricts itself, so the whole process, not one thread, is confined.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Some((program, rest)) = args.command.split_first() else {
        anyhow::bail!("no program to run");
    };
    let error = keel_tools::sandbox::exec_confined(&args.workspace, args.network, program, rest);
    eprintln!(
        "keel sandbox-exec: cannot run {}: {error}",
        program.to_string_lossy()
    );
    // 126: the shell's "found but could not be executed".
    std::process::exit(126)
}
