//! The mock provider over real HTTP: every protocol, every scripted behaviour.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anthropic;
mod common;
mod faults;
mod gemini;
mod openai_chat;
mod pacing;
mod responses;
mod stats;
mod web_search;
