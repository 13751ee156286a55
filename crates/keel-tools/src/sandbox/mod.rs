//! Linux confinement of `run_command` children: Landlock for the file system and TCP, a
//! seccomp filter for sockets, a session of their own.
//!
//! The daemon cannot restrict a child between `fork` and `exec` without `unsafe`, so the
//! child is started through a small launcher: the `keel` binary itself in its
//! `sandbox-exec` mode, which calls [`exec_confined`] — leave the daemon's session, restrict
//! this process, then `exec` the command. The restrictions are inherited by every process the
//! command starts and can never be lifted.
//!
//! What the policy ([`policy`]) allows, and nothing else on the filesystem:
//!
//! | where | access |
//! |---|---|
//! | the user's workspace | read, write, create, remove, execute |
//! | system directories ([`SYSTEM_DIRS`]: programs, libraries, `/etc`) | read and execute |
//! | `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/random`, `/dev/urandom` | read and write, no `ioctl` |
//!
//! So the database, the configuration file, other users' workspaces, home directories, `/tmp`,
//! `/proc` (the daemon's environment and memory above all) and `/dev/tty` cannot be opened,
//! even by a command running as root. Signals to processes outside the sandbox and abstract
//! UNIX sockets are scoped too where the kernel supports it (Landlock ABI 6); [`seccomp`] denies
//! UNIX sockets and, unless the network is allowed, every socket; Landlock denies TCP `bind`
//! and `connect` as well where the kernel has it (ABI 4). [`abi`] decides whether the kernel
//! confines enough. Not confined: CPU and memory use, and reading a path the kernel does not
//! check by path (an inherited file descriptor; there is none but the output pipe).

pub mod abi;
pub mod seccomp;

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

/// The ABI whose rights the policy names; newer kernels enforce at least these.
const POLICY_ABI: ABI = ABI::V6;

/// Directories a confined command may read and execute from (those that exist).
pub const SYSTEM_DIRS: &[&str] = &[
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix",
];

/// Device files a confined command may read and write. Not `/dev/tty`: through the daemon's
/// controlling terminal a command could type into the operator's shell (`TIOCSTI`).
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// What a path of the policy grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Read files, list directories, execute programs.
    Read,
    /// Everything: the workspace.
    Full,
    /// Read and write an existing file, no `ioctl`: a harmless device.
    Device,
}

/// The paths a command confined to `workspace` may use, and how.
pub fn policy(workspace: &Path) -> Vec<(PathBuf, Grant)> {
    let mut rules: Vec<(PathBuf, Grant)> = SYSTEM_DIRS
        .iter()
        .map(|dir| (PathBuf::from(dir), Grant::Read))
        .collect();
    rules.extend(
        DEVICES
            .iter()
            .map(|dev| (PathBuf::from(dev), Grant::Device)),
    );
    rules.push((workspace.to_path_buf(), Grant::Full));
    rules
}

/// How a command is started confined: `launcher` with `args` before the workspace and the
/// command (`keel sandbox-exec`, with `--network` when commands may use it). The launcher
/// starts a session of its own, which is also the command's process group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl Launcher {
    /// The command line that runs `program args…` confined to `workspace`.
    pub fn command(&self, workspace: &Path, program: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .arg("--workspace")
            .arg(workspace)
            .arg("--")
            .arg(program);
        command
    }
}

/// Whether the running kernel confines enough ([`abi::REQUIRED_ABI`]) for [`exec_confined`].
pub fn available() -> bool {
    abi::kernel_abi() >= abi::REQUIRED_ABI
}

/// Why a command could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("Landlock is not available on this kernel")]
    Unavailable,
    #[error("cannot set up the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("cannot start a session of its own: {0}")]
    Session(nix::Error),
}

/// Restricts this process to [`policy`] for `workspace`, and, unless `network`, denies every
/// TCP `bind` and `connect` where the kernel can (ABI 4). Fails on a kernel that cannot deny
/// `truncate(2)` (before ABI 3) rather than confine by halves.
pub fn confine(workspace: &Path, network: bool) -> Result<(), SandboxError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V3))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(POLICY_ABI))?
        .scope(Scope::from_all(POLICY_ABI))?;
    if !network {
        // Handled and never granted: no port is allowed.
        ruleset = ruleset.handle_access(AccessNet::from_all(POLICY_ABI))?;
    }
    let mut ruleset = ruleset.create()?;
    for (path, grant) in policy(workspace) {
        let access = match grant {
            Grant::Read => AccessFs::from_read(POLICY_ABI),
            Grant::Full => AccessFs::from_all(POLICY_ABI),
            Grant::Device => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
        };
        // A path that does not exist on this system grants nothing; skipping it is safe.
        if path.exists() {
            ruleset = ruleset.add_rules(path_beneath_rules([&path], access))?;
        }
    }
    let status = ruleset.restrict_self()?;
    match status.ruleset {
        RulesetStatus::NotEnforced => Err(SandboxError::Unavailable),
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
    }
}

/// Starts a session of its own (no controlling terminal, out of the daemon's process group),
/// confines this process to `workspace` with Landlock and seccomp (sockets: [`seccomp`]; the
/// network only if `network`), and replaces it with `program args…`. Returns only when that
/// failed; then the command is not run at all.
pub fn exec_confined(
    workspace: &Path,
    network: bool,
    program: &OsStr,
    args: &[OsString],
) -> io::Error {
    let confined = nix::unistd::setsid()
        .map_err(SandboxError::Session)
        .and_then(|_| confine(workspace, network))
        .and_then(|()| Ok(seccomp::install(network)?));
    if let Err(error) = confined {
        return io::Error::other(error.to_string());
    }
    std::process::Command::new(program).args(args).exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_writes_only_to_the_workspace_and_never_reads_proc_tmp_or_home() {
        let ws = Path::new("/srv/keel/workspace/alice");
        let rules = policy(ws);
        let writable: Vec<&PathBuf> = rules
            .iter()
            .filter(|(_, grant)| *grant == Grant::Full)
            .map(|(path, _)| path)
            .collect();
        assert_eq!(writable, [ws]);
        for (path, grant) in &rules {
            for secret in [
                "/proc", "/tmp", "/root", "/home", "/var", "/srv", "/sys", "/run",
            ] {
                assert!(
                    path == ws || !Path::new(secret).starts_with(path) && !path.starts_with(secret),
                    "{path:?} ({grant:?}) reaches {secret}"
                );
            }
            if *grant == Grant::Device {
                assert!(path.starts_with("/dev/"), "{path:?}");
            }
            // The controlling terminal would let a command type into the operator's shell.
            assert!(
                !Path::new("/dev/tty").starts_with(path),
                "{path:?} reaches /dev/tty"
            );
        }
    }

    #[test]
    fn the_launcher_puts_the_workspace_before_the_command() {
        let launcher = Launcher {
            program: PathBuf::from("/usr/bin/keel"),
            args: vec!["sandbox-exec".into()],
        };
        let command = launcher.command(Path::new("/w"), "sh");
        let args: Vec<&OsStr> = command.as_std().get_args().collect();
        assert_eq!(command.as_std().get_program(), "/usr/bin/keel");
        assert_eq!(args, ["sandbox-exec", "--workspace", "/w", "--", "sh"]);
    }
}
