//! Keel's daemon.
pub mod auth;
pub mod config;
pub mod hub;
pub mod metrics;
