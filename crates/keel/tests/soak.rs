//! The short fault soak: `keel bench soak` as a process, 100 chats with random faults,
//! interrupts, reconnects and two kill -9 restarts, every chat checked at the end. The long
//! soak (`scripts/soak`) runs the same code with 2,000 chats and more kills.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn a_hundred_chats_with_random_faults_and_two_kills_keep_every_promise() {
    // A fixed seed keeps the choice of scenarios reproducible; KEEL_SOAK_SEED tries others.
    let seed = std::env::var("KEEL_SOAK_SEED").unwrap_or_else(|_| "20261126".to_owned());
    let output = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args([
            "bench", "soak", "--chats", "100", "--kills", "2", "--seed", &seed,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("100 of 100 chats met every invariant"),
        "{stdout}"
    );
    assert!(stdout.contains("0 5xx answers"), "{stdout}");
}
