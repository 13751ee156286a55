//! The seccomp filter of a confined command: the sockets Landlock does not see.
//!
//! Landlock checks paths when files are opened, not when a socket connects to a socket file,
//! so a command could otherwise reach the session bus, a container engine or a database's
//! UNIX socket outside the workspace. The filter makes `socket(AF_UNIX, …)` fail, and a
//! datagram `socketpair` (a datagram socket can `sendto` any socket path). Without the network
//! allowed every `socket` fails, whatever its family. `io_uring_setup` fails too: an io_uring
//! opens and connects sockets without the system calls the filter sees. Denied calls fail with
//! `EACCES`, as a refused open does.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// Why the filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the seccomp filter: {0}")]
pub struct SeccompError(String);

/// The filter for a command that may (`network`) or may not open network sockets.
pub fn filter(network: bool) -> Result<BpfProgram, SeccompError> {
    let error = |e: seccompiler::BackendError| SeccompError(e.to_string());
    let argument = |index, mask: Option<u64>, value: u64| {
        let op = match mask {
            Some(mask) => SeccompCmpOp::MaskedEq(mask),
            None => SeccompCmpOp::Eq,
        };
        SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value)
            .and_then(|condition| SeccompRule::new(vec![condition]))
            .map_err(error)
    };
    // An empty list of rules denies every call of that system call.
    let sockets = if network {
        vec![argument(0, None, libc::AF_UNIX as u64)?]
    } else {
        Vec::new()
    };
    // The type may carry SOCK_CLOEXEC and SOCK_NONBLOCK; the low bits name the kind.
    let datagram_pairs = vec![argument(1, Some(0xf), libc::SOCK_DGRAM as u64)?];
    let mut rules = BTreeMap::new();
    for (call, chain) in [
        (libc::SYS_socket, sockets),
        (libc::SYS_socketpair, datagram_pairs),
        (libc::SYS_io_uring_setup, Vec::new()),
    ] {
        // x32 system calls share the x86_64 architecture tag under numbers with this bit
        // set; they are denied alike.
        #[cfg(target_arch = "x86_64")]
        rules.insert(call | 0x4000_0000, chain.clone());
        rules.insert(call, chain);
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| SeccompError(e.to_string()))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(error)?;
    filter.try_into().map_err(error)
}

/// Installs the filter on this thread (and so on what it `exec`s). Sets `no_new_privs`,
/// which the Landlock restriction sets anyway.
pub fn install(network: bool) -> Result<(), SeccompError> {
    let program = filter(network)?;
    seccompiler::apply_filter(&program).map_err(|e| SeccompError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};

    use super::*;

    /// Runs `probe` on a thread of its own under the filter; the filter ends with the thread.
    fn under_filter<T: Send + 'static>(
        network: bool,
        probe: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        std::thread::spawn(move || {
            install(network).unwrap();
            probe()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_filtered_command_cannot_reach_a_unix_socket_and_reaches_tcp_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("socket");
        let _unix = UnixListener::bind(&path).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        // Reachable without the filter, so the refusals below are the filter's.
        assert!(UnixStream::connect(&path).is_ok());
        for network in [false, true] {
            let path = path.clone();
            let (unix, datagram, pair, tcp) = under_filter(network, move || {
                (
                    UnixStream::connect(&path).map(drop),
                    UnixDatagram::unbound().map(drop),
                    UnixDatagram::pair().map(drop),
                    TcpStream::connect(("127.0.0.1", port)).map(drop),
                )
            });
            for (what, result) in [("connect", unix), ("datagram", datagram), ("pair", pair)] {
                let kind = result.map_err(|e| e.kind());
                assert_eq!(kind, Err(ErrorKind::PermissionDenied), "{what} ({network})");
            }
            if network {
                assert!(tcp.is_ok(), "{tcp:?}");
            } else {
                assert_eq!(tcp.map_err(|e| e.kind()), Err(ErrorKind::PermissionDenied));
            }
        }
        // A stream pair (what pipes between processes use) still works.
        assert!(under_filter(false, || UnixStream::pair().is_ok()));
    }
}
