//! Durable snapshots of a step in progress, so a new process can resume it.
//!
//! While streaming, the loop saves a [`StreamCheckpoint`] every few content deltas and
//! whenever a failure is captured. A run that starts and finds one resumes from it — R1
//! continuation for text, straight to tool use for completed calls — without spending its
//! recovery budget. The checkpoint is deleted when the step is persisted. A failed write is
//! logged and never stops the stream.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::snapshot::{CapturedCall, CapturedProviderCall, CapturedReasoning, StreamSnapshot};

/// The partial state of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamCheckpoint {
    pub run_id: String,
    pub chat_id: String,
    /// The upstream model that produced it.
    pub model: String,
    /// Reasoning with its provider metadata (signatures), so a resumed step can send it
    /// back; checkpoints written before it existed have none.
    #[serde(default)]
    pub reasoning: Vec<CapturedReasoning>,
    pub partial_text: String,
    pub completed_calls: Vec<CapturedCall>,
    pub in_flight: Option<CapturedCall>,
    /// A refusal had begun: the step restarts rather than continues.
    #[serde(default)]
    pub refused: bool,
    /// Calls the provider ran, with their results; checkpoints written before it existed
    /// have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_calls: Vec<CapturedProviderCall>,
    pub saved_at: DateTime<Utc>,
}

impl StreamCheckpoint {
    pub fn snapshot(&self) -> StreamSnapshot {
        StreamSnapshot {
            reasoning: self.reasoning.clone(),
            partial_text: self.partial_text.clone(),
            completed_calls: self.completed_calls.clone(),
            in_flight: self.in_flight.clone(),
            bytes_received: 0,
            refused: self.refused,
            provider_calls: self.provider_calls.clone(),
        }
    }
}

/// A checkpoint storage failure.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint store: {0}")]
pub struct CheckpointError(pub Box<dyn std::error::Error + Send + Sync>);

/// Where checkpoints live, keyed by chat.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    async fn save(&self, checkpoint: &StreamCheckpoint) -> Result<(), CheckpointError>;
    async fn load(&self, chat_id: &str) -> Result<Option<StreamCheckpoint>, CheckpointError>;
    async fn delete(&self, chat_id: &str) -> Result<(), CheckpointError>;
}

/// Checkpoints in memory: for tests and single-process use.
#[derive(Debug, Default)]
pub struct MemoryCheckpoints {
    entries: Mutex<HashMap<String, StreamCheckpoint>>,
}

impl MemoryCheckpoints {
    pub fn get(&self, chat_id: &str) -> Option<StreamCheckpoint> {
        self.lock().get(chat_id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, StreamCheckpoint>> {
        // A panic while holding this lock cannot leave the map half-written (each operation
        // is a single insert/remove), so a poisoned lock is still safe to use.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl CheckpointStore for MemoryCheckpoints {
    async fn save(&self, checkpoint: &StreamCheckpoint) -> Result<(), CheckpointError> {
        self.lock()
            .insert(checkpoint.chat_id.clone(), checkpoint.clone());
        Ok(())
    }

    async fn load(&self, chat_id: &str) -> Result<Option<StreamCheckpoint>, CheckpointError> {
        Ok(self.lock().get(chat_id).cloned())
    }

    async fn delete(&self, chat_id: &str) -> Result<(), CheckpointError> {
        self.lock().remove(chat_id);
        Ok(())
    }
}
