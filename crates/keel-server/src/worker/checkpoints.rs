//! The loop's checkpoints: the live-part log is the step; the store keeps only what it lacks.
//!
//! The live-part log holds exactly what clients were sent, so a resumed step is rebuilt from
//! it alone (a step whose log is empty starts over). The one thing the log lacks is the
//! provider metadata of reasoning (signatures, encrypted content) that a model needs back
//! with a resumed tool-use turn: a checkpoint stores that reasoning only, and only when new
//! metadata arrived, so the writes per step are a handful whatever the reply's length —
//! never the partial text.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use keel_agent::checkpoint::CheckpointError;
use keel_agent::snapshot::CapturedReasoning;
use keel_agent::{CheckpointStore, StreamCheckpoint, StreamSnapshot};
use keel_store::{ChatId, Store};

use crate::resume::signed_reasoning;
use crate::worker::leases::{SharedLease, current};

pub(super) struct StoreCheckpoints {
    pub chat_id: ChatId,
    pub store: Arc<dyn Store>,
    /// Checkpoints are writes of the run like any other: fenced on its lease.
    pub lease: SharedLease,
    /// The step rebuilt from the live-part log when the run started, if it had parts.
    pub from_log: Option<StreamSnapshot>,
    pub run_id: String,
    pub model: String,
    /// This run wrote a checkpoint (see [`StoreCheckpoints::delete`]).
    pub saved: AtomicBool,
}

fn failed(error: impl std::error::Error + Send + Sync + 'static) -> CheckpointError {
    CheckpointError(Box::new(error))
}

/// The reasoning worth storing: up to the last block that carries provider metadata, or
/// nothing when no block does (the log alone rebuilds the step then).
fn reasoning_to_keep(checkpoint: &StreamCheckpoint) -> Option<Vec<CapturedReasoning>> {
    let last_signed = checkpoint
        .reasoning
        .iter()
        .rposition(|r| r.provider_metadata.is_some())?;
    Some(checkpoint.reasoning[..=last_signed].to_vec())
}

#[async_trait]
impl CheckpointStore for StoreCheckpoints {
    async fn save(&self, checkpoint: &StreamCheckpoint) -> Result<(), CheckpointError> {
        let Some(reasoning) = reasoning_to_keep(checkpoint) else {
            return Ok(());
        };
        let kept = StreamCheckpoint {
            reasoning,
            partial_text: String::new(),
            completed_calls: Vec::new(),
            in_flight: None,
            provider_calls: Vec::new(),
            ..checkpoint.clone()
        };
        let data = serde_json::to_value(&kept).map_err(failed)?;
        self.saved.store(true, Ordering::Relaxed);
        self.store
            .put_checkpoint(&current(&self.lease), data)
            .await
            .map_err(failed)
    }

    async fn load(&self, _chat_id: &str) -> Result<Option<StreamCheckpoint>, CheckpointError> {
        // Nothing in the log: nothing of the step reached a client, so it starts over, and
        // there is no reasoning to take from a checkpoint.
        let Some(snapshot) = &self.from_log else {
            return Ok(None);
        };
        let stored = match self.store.get_checkpoint(self.chat_id).await {
            Ok(value) => value.and_then(|v| serde_json::from_value::<StreamCheckpoint>(v).ok()),
            Err(error) => {
                tracing::warn!(%error, "reading the checkpoint failed; resuming from the log");
                None
            }
        };
        let checkpointed = stored.map(|c| c.reasoning).unwrap_or_default();
        Ok(Some(StreamCheckpoint {
            run_id: self.run_id.clone(),
            chat_id: self.chat_id.to_string(),
            model: self.model.clone(),
            reasoning: signed_reasoning(&snapshot.reasoning, &checkpointed),
            partial_text: snapshot.partial_text.clone(),
            completed_calls: snapshot.completed_calls.clone(),
            in_flight: snapshot.in_flight.clone(),
            refused: snapshot.refused,
            provider_calls: snapshot.provider_calls.clone(),
            saved_at: chrono::Utc::now(),
        }))
    }

    /// A checkpoint exists only if this run wrote one or the crashed step it resumes did
    /// (a committed step's transaction deletes the chat's checkpoint anyway): otherwise
    /// there is nothing to delete, and no write transaction is spent on it.
    async fn delete(&self, _chat_id: &str) -> Result<(), CheckpointError> {
        if !self.saved.load(Ordering::Relaxed) && self.from_log.is_none() {
            return Ok(());
        }
        self.store
            .delete_checkpoint(self.chat_id)
            .await
            .map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checkpoint(reasoning: Vec<CapturedReasoning>) -> StreamCheckpoint {
        StreamCheckpoint {
            run_id: "r".into(),
            chat_id: "c".into(),
            model: "m".into(),
            reasoning,
            partial_text: "a long reply".repeat(1000),
            completed_calls: Vec::new(),
            in_flight: None,
            refused: false,
            provider_calls: Vec::new(),
            saved_at: chrono::Utc::now(),
        }
    }

    fn block(text: &str, signed: bool) -> CapturedReasoning {
        CapturedReasoning {
            text: text.into(),
            provider_metadata: signed.then(|| json!({"signature": "sig"})),
        }
    }

    #[test]
    fn only_reasoning_up_to_its_last_signature_is_kept() {
        assert_eq!(reasoning_to_keep(&checkpoint(vec![])), None);
        assert_eq!(
            reasoning_to_keep(&checkpoint(vec![block("thinking", false)])),
            None
        );
        let kept = reasoning_to_keep(&checkpoint(vec![
            block("first", true),
            block("second, still streaming", false),
        ]));
        assert_eq!(kept, Some(vec![block("first", true)]));
    }
}
