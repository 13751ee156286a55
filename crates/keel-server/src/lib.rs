//! Keel's daemon.
pub mod api;
pub mod auth;
pub mod config;
#[cfg(test)]
mod config_docs;
pub mod hub;
pub mod live;
pub mod metrics;
pub mod models;
pub mod net;
pub mod resume;
pub mod serve;
pub mod tools;
pub mod web;
pub mod worker;
