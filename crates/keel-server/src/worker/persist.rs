//! Makes the loop's steps durable through the store, and announces them.

use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::{Halt, LiveEvent, PersistError, PersistedStep, StepPersister};
use keel_core::{Cancel, ErrorKind, Price, Role, Usage};
use keel_store::{Charge, ChatId, MessageId, NewMessage, Store};

use crate::api::dto::MessageView;
use crate::hub::{Frame, Hub};
use crate::live::{payload, retry_state};
use crate::metrics::Metrics;
use crate::worker::sink::LiveSink;

/// Commits each step as one transaction that also clears the live-part log, then publishes
/// the committed messages.
pub(super) struct StorePersister {
    pub chat_id: ChatId,
    pub store: Arc<dyn Store>,
    pub hub: Arc<Hub>,
    pub sink: Arc<LiveSink>,
    /// Whose budget the steps are charged to.
    pub owner: String,
    pub pricing: Pricing,
    pub metrics: Arc<Metrics>,
}

/// The model a run's steps are charged to, and its price when the run started.
#[derive(Debug, Clone)]
pub(super) struct Pricing {
    pub model: String,
    pub price: Option<Price>,
}

impl Pricing {
    pub(super) fn charge(&self, usage: &Usage) -> Charge {
        Charge {
            model: self.model.clone(),
            cost_nanos: self.price.map(|p| p.cost_nanos(usage)),
        }
    }

    /// Counts committed usage in the metrics.
    pub(super) fn count(&self, metrics: &Metrics, usage: &Usage) {
        if usage.is_zero() {
            return;
        }
        let counts = keel_store::usage::counted(usage).map(|n| u64::try_from(n).unwrap_or(0));
        metrics.usage(&self.model, counts, self.charge(usage).cost_nanos);
    }
}

/// The messages a step is stored as.
pub(super) fn new_messages(step: &PersistedStep, pricing: &Pricing) -> Vec<NewMessage> {
    step.messages
        .iter()
        .map(|message| {
            let mut new = NewMessage::new(message.role, message.parts.clone());
            new.interrupted = step.interrupted;
            if message.role == Role::Assistant {
                new.usage = (!step.usage.is_zero()).then_some(step.usage);
                new.context_limit = step.context_limit.and_then(|l| i64::try_from(l).ok());
                new.runtime_ms = i64::try_from(step.runtime.as_millis()).ok();
                new.provider_response_id = step.provider_response_id.clone();
                new.finish_reason = Some(step.finish_reason);
                new.charge = Some(pricing.charge(&step.usage));
            }
            new
        })
        .collect()
}

#[async_trait]
impl StepPersister for StorePersister {
    async fn persist_step(&self, step: PersistedStep, _cancel: Cancel) -> Result<(), PersistError> {
        let messages = new_messages(&step, &self.pricing);
        if messages.is_empty() {
            return Ok(());
        }
        let chat_key = self.chat_id.to_string();
        // Followers woken by the commit's notice wait for the messages' frames below
        // instead of reading them; the guard's drop, success or not, wakes them again.
        let _under_way = self.hub.commit_begins(&chat_key);
        let ids = self
            .sink
            .commit(messages)
            .await
            .map_err(PersistError::other)?;
        self.hub.commit(&chat_key);
        self.pricing.count(&self.metrics, &step.usage);
        #[cfg(debug_assertions)]
        crate::debug_pause::debug_pause("KEEL_DEBUG_PUBLISH_PAUSE_MS").await;
        if let Some(first) = ids.first() {
            publish_committed(&self.store, &self.hub, &self.sink, self.chat_id, *first).await;
        }
        Ok(())
    }

    async fn record_retry(&self, retry: &LiveEvent) {
        let shaped = payload(retry);
        let state = retry_state(self.sink.last_seq(), &shaped.data);
        let lease = self.sink.lease();
        if let Err(error) = self.store.set_retry_state(&lease, Some(state)).await {
            // The clients of this process saw it live; a lost lease ends the run anyway.
            tracing::warn!(chat = %self.chat_id, %error, "recording the retry as the chat's state failed");
        }
    }

    async fn may_go_on(&self) -> Result<(), Halt> {
        match self.store.budget_refusal(&self.owner).await {
            Ok(None) => Ok(()),
            Ok(Some(refused)) => Err(Halt {
                kind: ErrorKind::BudgetExceeded,
                message: refused.message,
            }),
            Err(error) => {
                // The store is the budget's only record: unread, the run goes on rather than
                // failing a user who may be within it; the next step asks again.
                tracing::warn!(chat = %self.chat_id, %error, "reading the owner's budget failed");
                Ok(())
            }
        }
    }
}

/// Announces the messages committed from id `first` on (as the API lists them).
pub(super) async fn publish_committed(
    store: &Arc<dyn Store>,
    hub: &Hub,
    sink: &LiveSink,
    chat_id: ChatId,
    first: MessageId,
) {
    match store.list_messages(chat_id, Some(first - 1)).await {
        Ok(stored) => {
            for message in &stored {
                sink.advance_to(message.event_seq);
                let data = serde_json::to_string(&MessageView::from(message)).unwrap_or_default();
                hub.publish(
                    &chat_id.to_string(),
                    Frame::new(
                        u64::try_from(message.event_seq).unwrap_or_default(),
                        "message",
                        &data,
                        true,
                        sink.history_version(),
                    ),
                );
            }
        }
        Err(error) => {
            // The messages are committed; subscribers will read them from the store on
            // their next catch-up.
            tracing::warn!(chat = %chat_id, %error, "reading back committed messages failed");
        }
    }
}
