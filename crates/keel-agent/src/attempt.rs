//! Streaming one step through failures: attempts, watchdogs, retries, mid-stream recovery,
//! checkpoints and chain-mode healing.
//!
//! A step is streamed by one or more *attempts*. An attempt that fails before producing
//! content is retried as is (up to `max_attempts` in all, with backoff). One that fails after
//! producing content is recovered with the plan [`choose_plan`] picks (up to
//! `max_recoveries` times). Permanent errors are never retried. Every retry is announced
//! through the retry hook and a [`LiveEvent::Retry`] first.

use futures::StreamExt;
use keel_core::classify::is_prefill_refusal;
use keel_core::{
    CancelCause, ErrorKind, FinishReason, Message, ModelCall, ProviderError, StreamEvent,
};
use tokio::time::Instant;
use tracing::{Instrument, Span};

use crate::accumulate::StepAccumulator;
use crate::checkpoint::StreamCheckpoint;
use crate::recovery::{RecoveryPlan, choose_plan};
use crate::run::{RetryNotice, RunError, Runner, StepEnd};
use crate::seam::{SeamCheck, SeamVerdict};
use crate::sink::LiveEvent;
use crate::snapshot::StreamSnapshot;

/// How one attempt ended.
enum AttemptEnd {
    Finished,
    Cancelled,
    Failed(ProviderError),
    /// A continuation started the reply over instead of continuing it
    /// ([`crate::seam::restarts_reply`]).
    Restarted,
}

impl Runner {
    /// Streams step `step_index` into `acc`, retrying and recovering as needed.
    pub(crate) async fn stream_step(
        &mut self,
        step_index: usize,
        history: &mut Vec<Message>,
        acc: &mut StepAccumulator,
    ) -> StepEnd {
        let mut continuation: Option<String> = None;
        let mut resumed = false;
        // A reply the user stopped ends the history: this step carries it on.
        let stopped = if step_index == 0 {
            self.stopped.clone()
        } else {
            None
        };
        if step_index == 0
            && let Some(checkpoint) = self.load_checkpoint().await
        {
            resumed = true;
            let snapshot = checkpoint.snapshot();
            *acc = snapshot.restore(&self.options.clock);
            let plan = choose_plan(&snapshot, self.signed_reasoning());
            crate::trace::recovery(&Span::current(), &plan, None);
            match &plan {
                RecoveryPlan::SynthesizeToolUse { .. } => {
                    acc.finish_reason = Some(FinishReason::ToolCalls);
                }
                RecoveryPlan::ContinueText { prefix }
                | RecoveryPlan::TruncateBeforeTool { prefix, .. } => {
                    acc.continue_text();
                    continuation = Some(prefix.clone());
                }
                RecoveryPlan::WholeRestart => *acc = StepAccumulator::new(),
            }
            acc.republish(self.options.sink.as_ref());
            if matches!(plan, RecoveryPlan::SynthesizeToolUse { .. }) {
                acc.response_id = None;
                return StepEnd::Finished;
            }
        }

        let mut attempts = 0u32;
        let mut retries = 0u32;
        let mut recoveries = 0u32;
        loop {
            attempts += 1;
            if let Some(prefix) = &stopped
                && acc.is_empty()
            {
                acc.follow(prefix);
            }
            let call = self.model_call(history, continuation.as_deref(), stopped.is_some(), acc);
            let continued = continued_prefix(stopped.as_deref(), continuation.as_deref());
            let prefilled =
                continued.is_some() && self.options.model.supports_prefill(&call.options);
            let prefill_options = prefilled.then(|| call.options.clone());
            // Continued by instruction, a model may start over; with prefill it cannot.
            let seam = continued.filter(|_| !prefilled);
            let capture = self.options.capture_content;
            let span = crate::trace::model_call(self.options.model.as_ref(), &call, capture);
            let end = self
                .attempt(call, acc, seam.as_deref())
                .instrument(span.clone())
                .await;
            let error = match end {
                AttemptEnd::Finished => {
                    crate::trace::finished(&span, self.options.model.model(), acc, capture);
                    if !finished_in_one_attempt(attempts, resumed || stopped.is_some()) {
                        // The provider stored only the last attempt's part of this step (or
                        // a response whose content differs from what was kept): chaining
                        // onto it would lose or repeat content.
                        acc.response_id = None;
                    }
                    return StepEnd::Finished;
                }
                AttemptEnd::Cancelled => return StepEnd::Cancelled,
                AttemptEnd::Restarted if stopped.is_some() => {
                    // The stopped reply is stored already: a restart appended to it would
                    // say it twice, and starting over would drop it. The run fails instead.
                    self.options.sink.publish(LiveEvent::StreamReset);
                    return StepEnd::Failed(Box::new(RunError::Provider(
                        ProviderError::new(
                            ErrorKind::InvalidRequest,
                            "asked to continue the stopped reply, the model started it over",
                        )
                        .with_source(self.options.model.provider(), self.options.model.model()),
                    )));
                }
                AttemptEnd::Restarted => {
                    crate::trace::recovery(&span, &RecoveryPlan::WholeRestart, None);
                    // Never stitch a restart onto the prefix: R4, the step from scratch.
                    tracing::warn!("the continuation restarted the reply; restarting the step");
                    self.options.sink.publish(LiveEvent::StreamReset);
                    *acc = StepAccumulator::new();
                    continuation = None;
                    continue;
                }
                AttemptEnd::Failed(error) => {
                    crate::trace::failed(&span, &error);
                    error
                }
            };
            if let Some(options) = &prefill_options
                && is_prefill_refusal(&error)
            {
                // The model takes no prefill after all (the adapter remembers it): the same
                // continuation again at once, by instruction. Nothing was streamed. Another
                // call refused at the same moment may have made the switch already.
                self.options.model.refuse_prefill();
                if !self.options.model.supports_prefill(options) {
                    continue;
                }
            }
            self.save_checkpoint(acc).await;
            if error.kind == ErrorKind::ChainBroken {
                self.heal_chain(history).await;
            }
            if !error.retryable() {
                return StepEnd::Failed(Box::new(RunError::Provider(error)));
            }
            if self.options.retry.refuses(error.retry_after) {
                return StepEnd::Failed(Box::new(RunError::Provider(self.wait_refused(error))));
            }

            let produced_content = !acc.is_empty() || acc.tool_calls().next().is_some();
            if !produced_content {
                retries += 1;
                if retries >= self.options.retry.max_attempts {
                    return StepEnd::Failed(Box::new(RunError::Provider(error)));
                }
                *acc = StepAccumulator::new();
                continuation = None;
                if !self.back_off(attempts + 1, retries, &error, span).await {
                    return StepEnd::Cancelled;
                }
                continue;
            }

            let snapshot = StreamSnapshot::of(acc);
            recoveries += 1;
            if recoveries > self.options.retry.max_recoveries {
                return StepEnd::Failed(Box::new(RunError::StreamInterrupted {
                    cause: error,
                    snapshot,
                    attempts,
                }));
            }
            let plan = choose_plan(&snapshot, self.signed_reasoning());
            crate::trace::recovery(&span, &plan, Some(&error));
            match plan {
                RecoveryPlan::SynthesizeToolUse { cancelled } => {
                    if let Some(call) = cancelled {
                        self.cancel_call(acc, &call.tool_call_id, &call.tool_name, &error);
                    }
                    acc.finish_reason = Some(FinishReason::ToolCalls);
                    acc.response_id = None;
                    return StepEnd::Finished;
                }
                RecoveryPlan::ContinueText { prefix } => {
                    acc.continue_text();
                    continuation = Some(prefix);
                }
                RecoveryPlan::TruncateBeforeTool { prefix, dropped } => {
                    self.cancel_call(acc, &dropped.tool_call_id, &dropped.tool_name, &error);
                    acc.continue_text();
                    continuation = Some(prefix);
                }
                RecoveryPlan::WholeRestart => {
                    self.options.sink.publish(LiveEvent::StreamReset);
                    *acc = StepAccumulator::new();
                    continuation = None;
                }
            }
            if !self.back_off(attempts + 1, recoveries, &error, span).await {
                return StepEnd::Cancelled;
            }
        }
    }

    /// One provider attempt with its startup and idle watchdogs.
    /// With `seam` (the prefix a continuation by instruction follows), the first characters
    /// of the continuation are held back until [`restarts_reply`] has judged them.
    async fn attempt(
        &mut self,
        call: ModelCall,
        acc: &mut StepAccumulator,
        seam: Option<&str>,
    ) -> AttemptEnd {
        let attempt_cancel = self.cancel.child();
        let startup = self
            .options
            .timeouts
            .startup_for(self.options.model.model(), &call.options);
        let idle = self
            .options
            .timeouts
            .idle_for(self.options.model.model(), &call.options);
        let started = Instant::now();
        let model = self.options.model.clone();
        let opened = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return AttemptEnd::Cancelled,
            opened = model.stream(call, attempt_cancel.clone()) => opened,
            _ = tokio::time::sleep(startup) => {
                attempt_cancel.cancel(CancelCause::Shutdown);
                return AttemptEnd::Failed(self.watchdog_error(ErrorKind::StartupTimeout, startup));
            }
        };
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(_) if self.cancel.is_cancelled() => return AttemptEnd::Cancelled,
            Err(error) => return AttemptEnd::Failed(error),
        };
        let mut first_event = true;
        let mut checkpointed_at = (acc.content_events, acc.metadata_events);
        let mut seam = seam.map(SeamCheck::new);
        // One wait for cancellation and one watchdog timer for the whole stream, moved on
        // with every event: a delta costs no timer or waiter of its own.
        let mut cancelled = std::pin::pin!(self.cancel.cancelled_owned());
        let mut watchdog = std::pin::pin!(tokio::time::sleep(startup));
        loop {
            let (limit, kind) = if first_event {
                (
                    startup.saturating_sub(started.elapsed()),
                    ErrorKind::StartupTimeout,
                )
            } else {
                (idle, ErrorKind::IdleStall)
            };
            watchdog.as_mut().reset(Instant::now() + limit);
            let event = tokio::select! {
                biased;
                () = cancelled.as_mut() => return AttemptEnd::Cancelled,
                event = stream.next() => event,
                () = watchdog.as_mut() => {
                    attempt_cancel.cancel(CancelCause::Shutdown);
                    let waited = if first_event { startup } else { idle };
                    return AttemptEnd::Failed(self.watchdog_error(kind, waited));
                }
            };
            // Life without content: the next wait is a fresh idle limit, or what is left of
            // the start-up limit, which a server that only pings never extends.
            if matches!(event, Some(StreamEvent::KeepAlive)) {
                continue;
            }
            // A response id only says the request was accepted (Responses'
            // `response.created`); the model has not started answering.
            if !matches!(event, Some(StreamEvent::ResponseId { .. })) {
                first_event = false;
            }
            let event = match event {
                None => break,
                Some(StreamEvent::Error(_)) if self.cancel.is_cancelled() => {
                    return AttemptEnd::Cancelled;
                }
                Some(StreamEvent::Error(error)) => {
                    // What arrived before the failure is judged like a short continuation.
                    if let Some(mut check) = seam.take() {
                        let Some(events) = check.decide() else {
                            return AttemptEnd::Restarted;
                        };
                        for event in events {
                            self.apply_event(acc, event, &mut checkpointed_at).await;
                        }
                    }
                    return AttemptEnd::Failed(error);
                }
                Some(event) => event,
            };
            let Some(check) = seam.as_mut() else {
                self.apply_event(acc, event, &mut checkpointed_at).await;
                continue;
            };
            match check.push(event) {
                SeamVerdict::Hold => {}
                SeamVerdict::Restart => {
                    attempt_cancel.cancel(CancelCause::Shutdown);
                    return AttemptEnd::Restarted;
                }
                SeamVerdict::Continue(events) => {
                    seam = None;
                    for event in events {
                        self.apply_event(acc, event, &mut checkpointed_at).await;
                    }
                }
            }
        }
        // A provider that silently ends the body when cancelled yields no error event.
        if self.cancel.is_cancelled() {
            return AttemptEnd::Cancelled;
        }
        // A short continuation is judged on all there is.
        if let Some(mut check) = seam {
            let Some(events) = check.decide() else {
                return AttemptEnd::Restarted;
            };
            for event in events {
                self.apply_event(acc, event, &mut checkpointed_at).await;
            }
        }
        AttemptEnd::Finished
    }

    /// Applies one event to the step (publishing it) and checkpoints on cadence, and
    /// whenever reasoning got provider metadata. `checkpointed_at` is (content events,
    /// metadata events) at the last checkpoint.
    async fn apply_event(
        &self,
        acc: &mut StepAccumulator,
        event: StreamEvent,
        checkpointed_at: &mut (u64, u64),
    ) {
        acc.apply(event, self.options.sink.as_ref(), &self.options.clock);
        let Some(every) = self.options.checkpointing.as_ref().map(|c| c.every) else {
            return;
        };
        if checkpoint_due(every, *checkpointed_at, acc) {
            *checkpointed_at = (acc.content_events, acc.metadata_events);
            self.save_checkpoint(acc).await;
        }
    }

    /// Whether the model rejects a tool-use turn sent back without its signed reasoning.
    fn signed_reasoning(&self) -> bool {
        self.options
            .model
            .requires_signed_reasoning(&self.options.call_options)
    }

    /// The provider's error, saying why it is not retried: it asked for a longer wait than
    /// `retry_max_delay_ms` allows.
    fn wait_refused(&self, mut error: ProviderError) -> ProviderError {
        let asked = error.retry_after.map_or_else(
            || "an unbounded wait".to_owned(),
            |wait| format!("{} s", wait.as_secs()),
        );
        error.message = format!(
            "{} (the provider asked to retry after {asked}, longer than the retry_max_delay_ms of {} ms)",
            error.message,
            self.options.retry.max_delay.as_millis()
        );
        error
    }

    fn watchdog_error(&self, kind: ErrorKind, waited: std::time::Duration) -> ProviderError {
        let what = if kind == ErrorKind::StartupTimeout {
            "no stream event arrived"
        } else {
            "the stream fell silent"
        };
        ProviderError::new(kind, format!("{what} for {} ms", waited.as_millis()))
            .with_source(self.options.model.provider(), self.options.model.model())
    }

    /// Announces and waits out the delay before attempt number `attempt`. Returns false
    /// when the run was cancelled during the wait. The failed call's `span` gets the
    /// retry as an event and ends before the wait.
    async fn back_off(
        &mut self,
        attempt: u32,
        retry: u32,
        error: &ProviderError,
        span: Span,
    ) -> bool {
        let delay = self
            .options
            .retry
            .delay(retry, error.retry_after, &mut self.rng);
        crate::trace::retry(
            &span,
            attempt,
            u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            error,
        );
        drop(span);
        let notice = RetryNotice {
            attempt,
            error: error.clone(),
            kind: error.kind,
            delay,
        };
        tracing::warn!(attempt, kind = %error.kind, delay_ms = delay.as_millis() as u64,
            error = %error.message, "retrying provider stream");
        if let Some(hook) = &self.options.on_retry {
            hook(&notice);
        }
        let retry = LiveEvent::Retry {
            attempt,
            delay,
            kind: error.kind,
            message: error.message.clone(),
            provider: Some(error.provider.clone()).filter(|p| !p.is_empty()),
            url: error.url.clone(),
        };
        self.options.sink.publish(retry.clone());
        self.options.persister.record_retry(&retry).await;
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }

    fn cancel_call(
        &self,
        acc: &mut StepAccumulator,
        tool_call_id: &str,
        tool_name: &str,
        error: &ProviderError,
    ) {
        acc.remove_call(tool_call_id);
        self.options.sink.publish(LiveEvent::ToolCallCancel {
            tool_call_id: tool_call_id.to_owned(),
            tool_name: tool_name.to_owned(),
            reason: format!(
                "the stream was cut before the call completed ({})",
                error.kind
            ),
        });
    }

    /// Chain-broken self-healing: never send the dead response id again, tell the owner to
    /// stop chaining, and rebuild the prompt from the full history.
    async fn heal_chain(&mut self, history: &mut Vec<Message>) {
        self.options.call_options.previous_response_id = None;
        if let Some(disable) = &self.options.chain.disable_chain_mode {
            disable();
        }
        if let Some(reload) = &self.options.chain.reload_history {
            match reload().await {
                Ok(full) => *history = full,
                Err(error) => {
                    tracing::warn!(%error, "reloading history after a broken chain failed; retrying with the prompt at hand");
                }
            }
        }
    }

    /// After the first chained step, later steps carry tool results the stored chain does not
    /// have: leave chain mode and continue on the full history.
    pub(crate) async fn leave_chain_mode(&mut self, history: &mut Vec<Message>) {
        if self
            .options
            .call_options
            .previous_response_id
            .take()
            .is_none()
        {
            return;
        }
        if let Some(reload) = &self.options.chain.reload_history {
            match reload().await {
                Ok(full) => *history = full,
                Err(error) => {
                    tracing::warn!(%error, "reloading history after a chained step failed")
                }
            }
        }
    }

    async fn load_checkpoint(&self) -> Option<StreamCheckpoint> {
        let checkpointing = self.options.checkpointing.as_ref()?;
        match checkpointing.store.load(&checkpointing.chat_id).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "loading the stream checkpoint failed; starting fresh");
                None
            }
        }
    }

    pub(crate) async fn save_checkpoint(&self, acc: &StepAccumulator) {
        let Some(checkpointing) = &self.options.checkpointing else {
            return;
        };
        let snapshot = StreamSnapshot::of(acc);
        let checkpoint = StreamCheckpoint {
            run_id: checkpointing.run_id.clone(),
            chat_id: checkpointing.chat_id.clone(),
            model: self.options.model.model().to_owned(),
            reasoning: snapshot.reasoning,
            partial_text: snapshot.partial_text,
            completed_calls: snapshot.completed_calls,
            in_flight: snapshot.in_flight,
            refused: snapshot.refused,
            provider_calls: snapshot.provider_calls,
            saved_at: self.options.clock.now(),
        };
        if let Err(error) = checkpointing.store.save(&checkpoint).await {
            tracing::warn!(%error, "saving the stream checkpoint failed; streaming on");
        }
    }

    pub(crate) async fn delete_checkpoint(&self) {
        if let Some(checkpointing) = &self.options.checkpointing
            && let Err(error) = checkpointing.store.delete(&checkpointing.chat_id).await
        {
            tracing::warn!(%error, "deleting the stream checkpoint failed");
        }
    }
}

/// The text the model is asked to continue: the stopped reply the step carries on, then
/// what a recovery continues of this step.
fn continued_prefix(stopped: Option<&str>, continuation: Option<&str>) -> Option<String> {
    match (stopped, continuation) {
        (Some(stopped), more) => Some(format!("{stopped}{}", more.unwrap_or_default())),
        (None, more) => more.map(str::to_owned),
    }
}

/// Whether a checkpoint is due: `every` content events since the last one (0: never by
/// count), or new reasoning metadata, which a resumed step needs and live events lack.
fn checkpoint_due(every: u64, (content, metadata): (u64, u64), acc: &StepAccumulator) -> bool {
    let by_count = every > 0 && acc.content_events >= content.saturating_add(every);
    by_count || acc.metadata_events > metadata
}

/// Whether a finished step may be chained onto (OpenAI Responses `previous_response_id`):
/// only a step the provider produced whole, in one attempt of this run. A retried attempt,
/// a continuation or a resumed checkpoint leaves a stored response that holds only part of
/// what the step kept.
pub(crate) fn finished_in_one_attempt(attempts: u32, resumed: bool) -> bool {
    attempts == 1 && !resumed
}

#[cfg(test)]
mod tests;
