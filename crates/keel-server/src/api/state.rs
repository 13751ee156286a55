//! What every request handler shares.

use std::sync::Arc;

use keel_store::{Chat, ChatId, Store};

use crate::api::error::ApiError;
use crate::api::extract::Caller;
use crate::config::Config;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::models::ModelRegistry;
use crate::net::hosts::AllowedHosts;
use crate::net::sse_slots::SseSlots;

/// How callers are identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMode {
    /// No users: every request acts as the single local user.
    SingleUser,
    /// Every request needs a bearer token of a known user.
    Tokens,
}

/// The name every chat gets in single-user mode.
pub const LOCAL_USER: &str = "local";

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    pub models: ModelRegistry,
    pub config: Arc<Config>,
    pub auth: AuthMode,
    /// Health of optional dependencies (MCP servers) for `/readyz`.
    pub dependencies: Arc<dyn Fn() -> Vec<serde_json::Value> + Send + Sync>,
    /// Cancelled when the process stops: live event streams end so shutdown is not held up.
    pub shutdown: keel_core::Cancel,
    /// The names requests may carry as `Host` and `Origin`.
    pub allowed_hosts: Arc<AllowedHosts>,
    /// Open live event streams, capped per user and in all.
    pub sse_slots: Arc<SseSlots>,
}

impl AppState {
    /// The chat, if it exists and belongs to the caller (others' chats do not exist).
    pub async fn owned_chat(&self, caller: &Caller, id: ChatId) -> Result<Chat, ApiError> {
        let chat = self.store.get_chat(id).await?;
        if chat.owner != caller.0 {
            return Err(ApiError::not_found(format!("chat {id} not found")));
        }
        Ok(chat)
    }
}
