//! Keel's daemon.
pub mod auth;
pub mod config;
pub mod hub;
pub mod live;
pub mod resume;
pub mod metrics;
