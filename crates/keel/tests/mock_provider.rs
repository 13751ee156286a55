//! `keel mock-provider` as a process: it reports its address, serves, and stops on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[tokio::test]
async fn serves_until_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["mock-provider", "--listen", "127.0.0.1:0", "--rate", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let base_url = loop {
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };

    // reqwest needs the process's rustls crypto provider, which `keel` installs in `main`.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let models: serde_json::Value = reqwest::get(format!("{base_url}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn rejects_a_negative_rate() {
    let output = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["mock-provider", "--listen", "127.0.0.1:0", "--rate=-1"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--rate"));
}
