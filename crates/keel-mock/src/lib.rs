//! A scriptable mock model provider.
//!
//! One axum server speaks four wire protocols, streaming (SSE) and not:
//!
//! * OpenAI Chat Completions, `POST /v1/chat/completions`;
//! * OpenAI Responses, `POST /v1/responses`, with `previous_response_id` chaining;
//! * Anthropic Messages, `POST /v1/messages`;
//! * Gemini, `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` and
//!   `:generateContent`;
//!
//! plus `GET /v1/models`, `GET /v1beta/models/{model}` and `GET /stats` (the usage of every
//! response delivered whole, see [`Reported`]). Without instructions it echoes the last user
//! message word by word. A `#mock {json}` line in that message (a [`Script`]) chooses the reply instead:
//! text, reasoning, tool calls, usage figures, and faults — HTTP errors, dropped
//! connections, stalls, malformed lines and in-stream error events — so the daemon's
//! recovery paths can be tested end to end. The directive language is documented in
//! `docs/mock-provider.md`.
//!
//! All waiting uses tokio time, so tests may run on paused time.

#![warn(unreachable_pub)]

mod anthropic;
mod config;
mod conversation;
mod driver;
mod error;
mod errors;
mod gemini;
mod models;
mod openai_chat;
mod plan;
mod responses;
mod rules;
mod script;
mod server;
mod sse;
mod state;
mod tally;
mod tokens;

pub use config::{ChatServer, HUMAN_PACE, MockConfig};
pub use error::ScriptError;
pub use script::{
    Cut, DIRECTIVE, Directive, Finish, HttpError, Malformed, Script, SearchResult, Stall, Step,
    StreamError, ToolCall, Usage, WebSearch, parse_directive,
};
pub use server::{MockServer, serve, spawn};
pub use tally::Reported;

/// Seconds since the Unix epoch, for `created` fields.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
