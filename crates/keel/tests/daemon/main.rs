//! `keel serve` end to end, as a process, through the public contract only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod basics;
mod branches;
mod chain;
mod chat_list;
mod chat_servers;
mod compaction;
mod compat;
mod compat_flood;
mod compat_input;
mod concurrency;
mod confinement;
mod continuation;
mod current_claude;
mod failures;
mod fidelity;
mod gemini;
mod harness;
mod isolation;
mod otlp;
mod panics;
#[path = "../support/postgres.rs"]
mod postgres;
mod provider_tools;
mod providers;
mod replicas;
mod rerun;
mod sandbox;
mod security;
mod telemetry;
mod thinking;
mod tools;
mod transfer;
mod usage;
