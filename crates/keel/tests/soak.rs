//! The short soaks: `keel bench soak` as a process, every chat checked at the end. The fault
//! soak runs 100 chats with random faults, interrupts, reconnects and two kill -9 restarts;
//! the user-action soak runs chats whose users also queue, promote, delete queued messages,
//! edit mid-reply and mid-tool, compact, regenerate replies, switch back to the branches
//! they left, answer client-side tools late, never or after an interrupt, and delete
//! running chats — on SQLite, and on two PostgreSQL replicas sharing a fresh database on
//! the server `KEEL_TEST_DATABASE_URL` names (which `scripts/test` sets). Each also checks the
//! usage records against the usage the mock provider reported (`docs/observability.md`). The
//! long soak (`scripts/soak`) runs the same code with 2,000 chats and more kills.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::{Mutex, PoisonError};

#[path = "support/postgres.rs"]
mod postgres;

/// One soak at a time: each loads both cores on its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A fixed seed keeps the choices reproducible; KEEL_SOAK_SEED tries others.
fn seed() -> String {
    std::env::var("KEEL_SOAK_SEED").unwrap_or_else(|_| "20261126".to_owned())
}

/// Runs `keel bench soak ARGS` and returns its output, asserting that every chat of
/// `chats` kept every invariant without a 5xx, and that the usage check ran (a mismatch
/// fails the soak).
fn soak(chats: usize, args: &[&str]) -> String {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let output = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args([
            "bench",
            "soak",
            "--chats",
            &chats.to_string(),
            "--seed",
            &seed(),
        ])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{chats} of {chats} chats met every invariant")),
        "{stdout}"
    );
    assert!(stdout.contains("0 5xx answers"), "{stdout}");
    assert!(stdout.contains("\nusage: Keel counted ["), "{stdout}");
    stdout
}

/// How many reading users' chats the usage check found exact.
fn exact_usage(stdout: &str) -> usize {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("usage: Keel counted"))
        .unwrap_or_else(|| panic!("no usage check in {stdout}"));
    let (_, after) = line.split_once("reading users' chats: ").unwrap();
    after.split(' ').next().unwrap().parse().unwrap()
}

/// Every action of the user menu was carried out at least once. Promotions and deletes of
/// queued messages are left out: whether anything is still queued when the user gets to
/// them depends on timing, so at this size a seed does not always reach them.
fn assert_every_action_ran(stdout: &str) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("user actions carried out:"))
        .unwrap_or_else(|| panic!("no action summary in {stdout}"));
    for action in [
        "\"Send\"",
        "\"EditMidReply\"",
        "\"EditMidTool\"",
        "\"Interrupt\"",
        "\"Compact\"",
        "\"Regenerate\"",
        "\"SwitchBranch\"",
        "\"DeleteChat\"",
        "\"tools ",
    ] {
        assert!(line.contains(action), "{action} never ran: {line}");
    }
}

#[test]
fn a_hundred_chats_with_random_faults_and_two_kills_keep_every_promise() {
    let stdout = soak(100, &["--kills", "2"]);
    // Every chat that neither a kill nor a fault could rob of a whole response was counted
    // exactly; there are such chats whatever the seed.
    assert!(exact_usage(&stdout) > 0, "{stdout}");
}

#[test]
fn users_who_edit_queue_promote_compact_and_delete_lose_nothing_across_a_kill() {
    let stdout = soak(50, &["--actions", "1", "--kills", "1"]);
    assert_every_action_ran(&stdout);
}

#[test]
fn two_postgres_replicas_with_acting_users_and_a_kill_lose_nothing() {
    let Some(database) = postgres::fresh_database() else {
        return;
    };
    let stdout = soak(
        40,
        &[
            "--actions",
            "1",
            "--kills",
            "1",
            "--replicas",
            "2",
            "--database",
            &database.url,
        ],
    );
    assert_every_action_ran(&stdout);
}
