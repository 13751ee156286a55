//! Keel's daemon: the crates wired together behind the HTTP API.
//!
//! [`serve::start`] opens the store, builds the models and tools the [`config`] names, starts
//! the workers and serves the API, with the doors it is handed ([`api::Doors`]: the
//! compatible protocols, built outside this crate), until told to stop. Its public surface is
//! what the `keel` binary, the doors, the benchmarks and the fuzz targets use; everything else
//! is private to the crate.
//!
//! Module map:
//! * [`config`] — the configuration file, flags and environment, with errors naming the key;
//! * [`serve`] — start-up and shutdown: store, models, tools, workers, HTTP server;
//! * [`api`] — HTTP API v1 and its OpenAPI document derived from the routes: handlers that
//!   map HTTP to `service`; the contract's shapes, errors and extractors, which doors share;
//! * [`service`] — the typed operations on chats every door shares (create, send, edit,
//!   branch, interrupt, follow a chat's live events), with errors that keep their kind;
//! * [`hub`] — live event fan-out to subscribers; [`live`] — the contract's live events;
//!   [`log_reads`] — the log reads of followers of other replicas' runs, gathered;
//! * `worker` — claiming runnable chats and running them; `resume` — rebuilding a step in
//!   progress after a crash;
//! * [`models`], `tools` — the models and tools built from configuration;
//! * [`auth`] — bearer tokens; `net` — the network edge (allowed hosts, request ids, caps);
//! * [`metrics`] — Prometheus metrics; [`telemetry`] — trace context in and out, the span
//!   of a run; `web` — the embedded web page; `debug_pause` — debug builds only: pauses at
//!   named points for tests of the running daemon.

#![warn(unreachable_pub)]

pub mod api;
pub mod auth;
pub mod config;
#[cfg(test)]
mod config_docs;
#[cfg(debug_assertions)]
pub mod debug_pause;
pub mod hub;
pub mod live;
pub mod log_reads;
pub mod metrics;
pub mod models;
mod net;
mod resume;
pub mod serve;
pub mod service;
mod sse;
pub mod telemetry;
mod tools;
mod web;
mod worker;
