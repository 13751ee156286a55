//! The loop's checkpoints, kept in the store; on resume the live-part log wins.
//!
//! The live-part log holds exactly what clients were sent, flushed every 50 ms; the
//! checkpoint is the loop's own snapshot. A resumed step starts from the log when it has
//! anything, so the final reply contains what clients saw exactly once; only the signed
//! reasoning, which the log does not hold, comes from the checkpoint.

use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::checkpoint::CheckpointError;
use keel_agent::{CheckpointStore, StreamCheckpoint, StreamSnapshot};
use keel_store::{ChatId, Store};

use crate::resume::signed_reasoning;
use crate::worker::sink::{SharedLease, current};

pub struct StoreCheckpoints {
    pub chat_id: ChatId,
    pub store: Arc<dyn Store>,
    /// Checkpoints are writes of the run like any other: fenced on its lease.
    pub lease: SharedLease,
    /// The step rebuilt from the live-part log when the run started, if it had parts.
    pub from_log: Option<StreamSnapshot>,
    pub run_id: String,
    pub model: String,
}

fn failed(error: impl std::error::Error + Send + Sync + 'static) -> CheckpointError {
    CheckpointError(Box::new(error))
}

#[async_trait]
impl CheckpointStore for StoreCheckpoints {
    async fn save(&self, checkpoint: &StreamCheckpoint) -> Result<(), CheckpointError> {
        let data = serde_json::to_value(checkpoint).map_err(failed)?;
        self.store
            .put_checkpoint(&current(&self.lease), data)
            .await
            .map_err(failed)
    }

    async fn load(&self, _chat_id: &str) -> Result<Option<StreamCheckpoint>, CheckpointError> {
        let stored = match self.store.get_checkpoint(self.chat_id).await {
            Ok(value) => value.and_then(|v| serde_json::from_value::<StreamCheckpoint>(v).ok()),
            // The log alone still resumes the step; only signatures would be missing.
            Err(error) if self.from_log.is_some() => {
                tracing::warn!(%error, "reading the checkpoint failed; resuming from the log");
                None
            }
            Err(error) => return Err(failed(error)),
        };
        if let Some(snapshot) = &self.from_log {
            let checkpointed = stored.map(|c| c.reasoning).unwrap_or_default();
            return Ok(Some(StreamCheckpoint {
                run_id: self.run_id.clone(),
                chat_id: self.chat_id.to_string(),
                model: self.model.clone(),
                reasoning: signed_reasoning(&snapshot.reasoning, &checkpointed),
                partial_text: snapshot.partial_text.clone(),
                completed_calls: snapshot.completed_calls.clone(),
                in_flight: snapshot.in_flight.clone(),
                refused: snapshot.refused,
                saved_at: chrono::Utc::now(),
            }));
        }
        // The store only hands out a checkpoint of the step in progress: one written after its
        // step was committed (a late or stale writer) is never loaded as the next step's.
        Ok(stored)
    }

    async fn delete(&self, _chat_id: &str) -> Result<(), CheckpointError> {
        self.store
            .delete_checkpoint(self.chat_id)
            .await
            .map_err(failed)
    }
}
