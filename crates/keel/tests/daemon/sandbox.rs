//! The ways out of a `run_command` sandbox that stay closed: UNIX sockets, the network, the
//! controlling terminal, writes to the database, and kernels too old to confine.

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::confinement::{landlock_or_skip, run_tools, tool_results};
use crate::harness::*;

/// A shell command that connects to the UNIX socket at `path` and prints whether it could.
/// Perl is in every Debian system (`perl-base` is essential) and in the system directories a
/// confined command may execute from.
fn connect_unix(path: &Path) -> String {
    format!(
        "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ARGV[0]) or die \"unix: $!\\n\"; \
         print \"unix-connected\\n\"' {}",
        path.display()
    )
}

/// A shell command that opens a TCP connection to 127.0.0.1:`port`.
fn connect_tcp(port: u16) -> String {
    format!(
        "perl -MIO::Socket::INET -e 'IO::Socket::INET->new(PeerAddr => \"127.0.0.1:$ARGV[0]\") \
         or die \"tcp: $!\\n\"; print \"tcp-connected\\n\"' {port}"
    )
}

/// Runs `command` with `sh -c` outside any sandbox: the same command the model runs reaches
/// the target when nothing stops it.
fn unconfined(command: &str) -> String {
    let output = std::process::Command::new("sh")
        .args(["-c", command])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// The output of one `run_command` call a model makes in a new chat.
async fn command_output(client: &Client, daemon: &Daemon, command: &str) -> String {
    let id = run_tools(
        client,
        daemon,
        json!([{"tool_calls": [{"name": "run_command", "args": {"command": command}}]}]),
    )
    .await;
    let results = tool_results(client, daemon, &id).await;
    assert_eq!(results.len(), 1, "{results:?}");
    results[0].1.clone()
}

#[tokio::test]
async fn a_model_command_cannot_reach_a_unix_socket_the_terminal_the_network_or_the_database() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("data").join("keel.db");
    let socket = dir.path().join("outside.sock");
    let _unix = UnixListener::bind(&socket).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let reach = format!("{}; {}", connect_unix(&socket), connect_tcp(port));
    let outside = unconfined(&reach);
    assert!(
        outside.contains("unix-connected") && outside.contains("tcp-connected"),
        "the probes do not work even unconfined: {outside}"
    );

    let daemon = Daemon::start(
        dir.path(),
        &format!("sqlite://{}", database.display()),
        "[tools]\nbuiltin = [\"run_command\"]\n",
    );
    let client = Client::new();
    let marker = "still-here-5d1e";
    let kept = client
        .create_chat(&daemon, json!({"text": scripted(marker, 0.0)}))
        .await;
    client.wait_status(&daemon, &kept, "waiting").await;
    let before = std::fs::read(&database).unwrap();

    let db = database.display();
    let command = format!(
        "{reach}; cat /dev/tty; echo typed > /dev/tty; truncate -s 0 {db}; echo x >> {db}; \
         echo x > {db}-wal; rm -f {db}; echo ran-to-the-end"
    );
    let output = command_output(&client, &daemon, &command).await;
    assert!(output.contains("ran-to-the-end"), "{output}");
    for reached in ["unix-connected", "tcp-connected", "typed"] {
        assert!(!output.contains(reached), "{reached}: {output}");
    }
    for refused in [
        "unix: Permission denied",
        "tcp: Permission denied",
        "/dev/tty: Permission denied",
        "truncate: cannot open",
    ] {
        assert!(output.contains(refused), "no `{refused}`: {output}");
    }
    assert_eq!(
        std::fs::read(&database).unwrap(),
        before,
        "the database changed"
    );
    let messages = client.messages(&daemon, &kept).await;
    assert_eq!(text_of(messages.last().unwrap()), marker);
}

#[tokio::test]
async fn a_model_command_reaches_a_tcp_listener_only_once_the_network_is_allowed() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("outside.sock");
    let _unix = UnixListener::bind(&socket).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let daemon = Daemon::start(
        dir.path(),
        &sqlite(dir.path()),
        "[tools]\nbuiltin = [\"run_command\"]\nrun_command_network = true\n",
    );
    let command = format!("{}; {}", connect_tcp(port), connect_unix(&socket));
    let output = command_output(&Client::new(), &daemon, &command).await;
    assert!(output.contains("tcp-connected"), "{output}");
    // UNIX sockets stay closed with the network open.
    assert!(output.contains("unix: Permission denied"), "{output}");
}

#[tokio::test]
async fn a_confined_command_runs_in_a_session_of_its_own_without_a_terminal() {
    if !landlock_or_skip() {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let mut launcher = std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg("sandbox-exec")
        .arg("--workspace")
        .arg(workspace.path())
        .args(["--", "sleep", "30"])
        .spawn()
        .unwrap();
    let pid = launcher.id();
    // Read from outside the sandbox once the launcher has become `sleep`.
    let deadline = Instant::now() + WAIT;
    let stat = loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        if stat.contains("(sleep)") {
            break stat;
        }
        assert!(
            Instant::now() < deadline,
            "the launcher never ran the command"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    // pid (comm) state ppid pgrp session tty_nr …
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let (group, session, tty) = (fields[2], fields[3], fields[4]);
    assert_eq!(session, pid.to_string(), "not a session of its own: {stat}");
    assert_eq!(group, pid.to_string(), "{stat}");
    assert_eq!(tty, "0", "a controlling terminal: {stat}");
}

#[tokio::test]
async fn a_kernel_without_landlock_abi_3_refuses_run_command_unless_unconfined_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    for abi in ["0", "2"] {
        let stderr = Daemon::refused_with_env(
            dir.path(),
            &database,
            "[tools]\nbuiltin = [\"run_command\"]\n",
            &[("KEEL_TEST_LANDLOCK_ABI", abi)],
        );
        assert!(
            stderr.contains("run_command needs Landlock ABI 3 or later")
                && stderr.contains("run_command_unconfined = true"),
            "ABI {abi}: {stderr}"
        );
    }
    // Without run_command there is nothing to confine: the daemon starts.
    let daemon = Daemon::start_with_env(
        dir.path(),
        &database,
        "",
        &[("KEEL_TEST_LANDLOCK_ABI", "2")],
    );
    drop(daemon);
    // Allowed unconfined, it starts, says so, and a command reaches outside the workspace.
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "outside-7c2a").unwrap();
    let daemon = Daemon::start_with_env(
        dir.path(),
        &database,
        "[tools]\nbuiltin = [\"run_command\"]\nrun_command_unconfined = true\n",
        &[("KEEL_TEST_LANDLOCK_ABI", "2")],
    );
    assert!(
        daemon
            .logged()
            .contains("run_command runs commands unconfined"),
        "{}",
        daemon.logged()
    );
    let output = command_output(
        &Client::new(),
        &daemon,
        &format!("cat {}", outside.display()),
    )
    .await;
    assert!(output.contains("outside-7c2a"), "{output}");
}
