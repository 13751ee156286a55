//! keel-store's tests, one binary: each module covers one part of the store on both
//! backends (SQLite always; PostgreSQL when `KEEL_TEST_DATABASE_URL` names a server).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

mod aliases;
mod api_transitions;
mod branches;
mod compaction;
mod listen;
mod migrations;
mod model;
mod races;
mod rerun;
mod state_table;
mod sweep_transitions;
mod trace;
mod usage;
mod worker_transitions;
