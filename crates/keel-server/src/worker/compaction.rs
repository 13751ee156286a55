//! Makes compaction summaries durable through the store, and announces the notice.

use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::{CompactionHooks, PersistError, SummaryRecord};
use keel_core::Message;
use keel_store::{ChatId, ChatStatus, NewSummary, Store, StoreError};

use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::worker::persist::Pricing;
use crate::worker::persist::publish_committed;
use crate::worker::sink::LiveSink;

/// Commits a summary as the chat's compaction boundary and answers with the prompt history
/// that now applies.
pub(super) struct StoreCompaction {
    pub chat_id: ChatId,
    pub store: Arc<dyn Store>,
    pub hub: Arc<Hub>,
    pub sink: Arc<LiveSink>,
    /// The chat's system prompt, which leads every prompt.
    pub system: Option<String>,
    pub pricing: Pricing,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl CompactionHooks for StoreCompaction {
    fn summary_started(&self) {
        self.sink.mark_summary();
    }

    async fn commit_summary(&self, summary: SummaryRecord) -> Result<Vec<Message>, PersistError> {
        let record = NewSummary {
            text: summary.text,
            usage: summary.usage,
            context_limit: summary.context_limit.and_then(|l| i64::try_from(l).ok()),
            charge: Some(self.pricing.charge(&summary.usage)),
        };
        let usage = summary.usage;
        let ids = self
            .sink
            .commit_summary(record)
            .await
            .map_err(summary_error)?;
        self.hub.commit(&self.chat_id.to_string());
        self.pricing.count(&self.metrics, &usage);
        if let Some(first) = ids.first() {
            publish_committed(&self.store, &self.hub, &self.sink, self.chat_id, *first).await;
        }
        let mut history = self
            .store
            .load_prompt_history(self.chat_id)
            .await
            .map_err(PersistError::other)?;
        with_system(&mut history, self.system.as_deref());
        Ok(history)
    }
}

/// Puts the chat's system prompt, when it has one, in front of its history.
pub(super) fn with_system(history: &mut Vec<Message>, system: Option<&str>) {
    if let Some(system) = system.filter(|s| !s.trim().is_empty()) {
        history.insert(0, Message::system(system));
    }
}

/// A chat interrupted under the write refuses the summary: that is an interrupt, not a
/// failure.
fn summary_error(error: StoreError) -> PersistError {
    match error {
        StoreError::Conflict {
            status: ChatStatus::Interrupting,
            ..
        } => PersistError::Interrupted,
        other => PersistError::other(other),
    }
}
