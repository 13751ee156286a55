//! PostgreSQL for the tests that run daemons on it: a database of their own on the test
//! server. Included by more than one test crate (`#[path]`).

use std::process::Command;

/// A database of one test on the test server, dropped when the test is done with it (the
/// server is shared by every run of the suite).
pub struct FreshDatabase {
    pub url: String,
    base: String,
    name: String,
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        // Best effort: a daemon still connected is disconnected by `FORCE`; a failure
        // leaves one database behind, which is no reason to fail the test.
        let _ = Command::new("psql")
            .args([
                self.base.as_str(),
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .status();
    }
}

/// A fresh database on the test server (`KEEL_TEST_DATABASE_URL`, which scripts/test sets
/// up), or `None` when no server is configured — which fails the test when `CI` is set: there
/// a skipped test would be a test that cannot fail.
pub fn fresh_database() -> Option<FreshDatabase> {
    let base = match std::env::var("KEEL_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var_os("CI").is_some_and(|ci| !ci.is_empty()) => panic!(
            "KEEL_TEST_DATABASE_URL is unset and CI is set: the PostgreSQL tests must run \
             (scripts/test starts a server when none is given)"
        ),
        _ => {
            eprintln!("KEEL_TEST_DATABASE_URL is not set: skipping this PostgreSQL test");
            return None;
        }
    };
    let name = format!("keel_e2e_{:016x}", rand::random::<u64>());
    let status = Command::new("psql")
        .args([
            base.as_str(),
            "-q",
            "-c",
            &format!("CREATE DATABASE {name}"),
        ])
        .status()
        .expect("psql runs");
    assert!(status.success(), "creating the test database failed");
    let (prefix, _) = base.rsplit_once('/').expect("a database URL with a path");
    Some(FreshDatabase {
        url: format!("{prefix}/{name}"),
        base,
        name,
    })
}
