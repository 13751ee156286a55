//! Keel's model providers: thin streaming adapters that implement
//! [`keel_core::LanguageModel`] over HTTP.
//!
//! Each adapter turns a [`keel_core::ModelCall`] into one provider request, streams the reply
//! as server-sent events and maps it onto [`keel_core::StreamEvent`]s. Adapters know nothing
//! of storage or of Keel's own HTTP server.
//!
//! * [`config`]: the settings the daemon builds a model from, and [`build_model`];
//! * [`sse`]: event-stream framing, the [`sse::Decoder`] trait and the driver that feeds a
//!   byte stream through a decoder with cancellation;
//! * [`http`]: the request/response plumbing shared by all adapters and the mapping of every
//!   failure onto [`keel_core::classify`];
//! * [`openai_chat`], [`openai_responses`], [`anthropic`], [`gemini`]: one module per wire
//!   protocol, each split into a request builder and a pure decoder;
//! * [`provider_tools`]: the tools a provider runs itself, by configured name, per kind;
//! * [`typed_events`]: the framing of protocols whose events are JSON named by `type`;
//! * [`tls`]: the trust set-up every outgoing HTTPS client of Keel is built with.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::StreamExt;
//! // Once per process, before any HTTP client is built.
//! let _ = rustls::crypto::ring::default_provider().install_default();
//! use keel_core::{Cancel, Message, ModelCall, StreamEvent};
//! use keel_providers::{ProviderKind, ProviderSettings, build_model, http_client};
//!
//! let mut settings = ProviderSettings::new("anthropic", ProviderKind::Anthropic);
//! settings.api_key = std::env::var("ANTHROPIC_API_KEY").ok();
//! let model = build_model(&settings, "claude-sonnet-4-5", http_client()?)?;
//!
//! let mut messages = vec![Message::system("Be brief."), Message::user("Hello")];
//! model.prepare_prompt(&mut messages);
//! let call = ModelCall { messages, ..ModelCall::default() };
//! let mut events = model.stream(call, Cancel::new()).await?;
//! while let Some(event) = events.next().await {
//!     match event {
//!         StreamEvent::TextDelta { delta, .. } => print!("{delta}"),
//!         StreamEvent::Error(e) if e.retryable() => { /* back off and try again */ }
//!         StreamEvent::Error(e) => return Err(e.into()),
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```

#![warn(unreachable_pub)]

pub mod anthropic;
pub mod config;
mod convert;
pub mod gemini;
pub mod http;
pub mod keepalive;
pub mod openai_chat;
pub mod openai_responses;
pub mod provider_tools;
pub mod sse;
pub mod tls;
pub mod typed_events;

pub use config::{
    Continuation, OutputLimitField, ProviderBuildError, ProviderKind, ProviderSettings,
    ReasoningContent, build_model, http_client,
};
pub use http::ErrorContext;
pub use provider_tools::{PROVIDER_TOOL_NAMES, ProviderToolError, provider_tool};
/// The HTTP client crate the adapters are built on, so callers construct a compatible
/// [`reqwest::Client`].
pub use reqwest;
