//! Running one chat: from a claimed lease to the transition that ends the run.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use keel_agent::{
    ChainHooks, Checkpointing, Compaction, ReloadHistory, RetryPolicy, RunError, RunOptions,
    RunOutcome, StreamTimeouts, Tool,
};
use keel_core::{Cancel, CancelCause, ErrorKind, Part, Role, ToolDefinition};
use keel_store::{Chat, ChatStatus, Lease, NewMessage, RunStart, StoredMessage};

use crate::api::dto::ClientTool;
use crate::metrics::RetryLabels;
use crate::resume::{Committed, LastStep, LogHolds, last_step};
use crate::worker::checkpoints::StoreCheckpoints;
use crate::worker::compaction::{StoreCompaction, with_system};
use crate::worker::leases::Held;
use crate::worker::leases::{SharedLease, current};
use crate::worker::persist::{Pricing, StorePersister};
use crate::worker::runs::StopReason;
use crate::worker::runs::{Finished, RunSlot};
use crate::worker::sink::LiveSink;
use crate::worker::tools::DurableTool;
use crate::worker::{Shared, lifecycle};

/// Runs a claimed chat until it is idle, waiting for client tools, failed, or stopped.
/// After an interrupted or finished run the queue head runs next on the same lease.
pub(super) async fn run_chat(
    shared: Arc<Shared>,
    lease: Lease,
    slot: RunSlot,
    finished: Finished,
    previous: Option<tokio::sync::watch::Receiver<()>>,
) {
    let RunSlot {
        mut id,
        mut cancel,
        mut stop,
    } = slot;
    let chat_id = lease.chat_id;
    let lease: SharedLease = Arc::new(Mutex::new(lease));
    let renewing = shared.leases.hold(lease.clone(), finished.subscribe());
    if let Some(mut previous) = previous {
        // Superseded and unwinding: it writes nothing more (its lease is fenced) but still
        // holds the chat's live channel until it ends.
        let _ = previous.changed().await;
    }
    shared.metrics.active_runs.inc();
    shared.hub.begin_run(&chat_id.to_string());
    loop {
        let span = tracing::info_span!("run", chat_id = %chat_id, trace_id = tracing::field::Empty);
        let next = tracing::Instrument::instrument(
            run_once(&shared, &lease, &renewing, &cancel, &stop),
            span,
        )
        .await;
        let Some(next_lease) = next else { break };
        *lease.lock().unwrap_or_else(PoisonError::into_inner) = next_lease.clone();
        renewing.continuing();
        // A fresh token for the next run: the previous one may carry an interrupt.
        let (slot, _) = shared.register(&next_lease, &finished);
        (id, cancel, stop) = (slot.id, slot.cancel, slot.stop);
    }
    drop(renewing);
    shared.hub.end_run(&chat_id.to_string());
    shared.metrics.active_runs.dec();
    shared.forget(chat_id, id);
}

/// One run of the loop. Returns the lease to continue with when the queue head starts next.
async fn run_once(
    shared: &Arc<Shared>,
    lease: &SharedLease,
    renewing: &Held<'_>,
    cancel: &Cancel,
    stop: &Arc<Mutex<StopReason>>,
) -> Option<Lease> {
    let chat_id = current(lease).chat_id;
    // The chat, the step in progress, the history and the tool records: one read.
    let start = match shared.store.start_run(chat_id).await {
        Ok(start) => start,
        Err(error) => {
            tracing::warn!(chat = %chat_id, %error, "reading the claimed chat failed");
            return None;
        }
    };
    let chat = &start.chat;
    let recovered_log = &start.log;
    // A log a compaction summary streamed into is not a reply to resume: it is voided for
    // clients, and the committed history says where the run stands.
    let payloads: Vec<&serde_json::Value> = recovered_log.iter().map(|e| &e.payload).collect();
    let holds = LogHolds::of(&payloads);
    let summary_log = matches!(holds, LogHolds::Summary);
    let from_log = match holds {
        LogHolds::Step(snapshot) => Some(snapshot),
        LogHolds::Nothing | LogHolds::Summary => None,
    };
    if let Some(snapshot) = &from_log {
        shared.metrics.recovered_runs.inc();
        tracing::info!(
            chat = %chat_id,
            entries = recovered_log.len(),
            first_seq = recovered_log.first().map(|e| e.seq),
            last_seq = recovered_log.last().map(|e| e.seq),
            text_bytes = snapshot.partial_text.len(),
            completed_calls = snapshot.completed_calls.len(),
            "resuming a step from its live-part log"
        );
    }
    let last_seq = recovered_log
        .last()
        .map_or(chat.event_seq, |e| e.seq.max(chat.event_seq));
    let sink = LiveSink::start(
        chat_id.to_string(),
        last_seq,
        shared.hub.clone(),
        shared.store.clone(),
        lease.clone(),
        shared.metrics.clone(),
        stop.clone(),
        shared.log.clone(),
    );

    // A run taking over a chat begins by voiding what clients were sent of the step in
    // progress: the previous owner may have sent parts it never logged (a client resuming
    // from one of them would get the new text after the old), and a summary's log is not
    // a reply. The reset is numbered above every number that owner may have given out.
    if summary_log || start.taken_over() {
        keel_agent::EventSink::publish(sink.as_ref(), keel_agent::LiveEvent::StreamReset);
    }
    if chat.status == ChatStatus::Interrupting {
        cancel.cancel(CancelCause::Interrupted);
    }
    // The end of the committed history decides what a run with nothing to resume from its
    // log does, and whether a running chat carries on a stopped reply (log or not: a
    // continuation may have been cut by a crash).
    let stopped = stopped_reply_at_end(chat, &start.recent(2));
    // A stopped reply to carry on is not a final one: the model is called. Otherwise the
    // step a summary followed decides (`keel_agent::next_step`, the loop's own rule): after
    // a summary of the final reply, calling the model would answer that reply again.
    let last = if stopped.is_some() {
        LastStep::Continue
    } else if from_log.is_none() && !chat.compact_requested {
        last_committed_step(chat, &start.conversation_end(2))
    } else {
        LastStep::Continue
    };
    let outcome = if let LastStep::Unhanded(unhanded) = last {
        // The previous owner died between committing the step and handing its client-side
        // calls over; hand them over now (or, when interrupting, answer them as interrupted).
        Ok(RunOutcome::PendingToolCalls(unhanded))
    } else if last == LastStep::Final && chat.status == ChatStatus::Running {
        // The previous owner died between committing the final reply and finishing the
        // run: finish it; calling the model again would reply twice.
        Ok(RunOutcome::Completed { steps: 0 })
    } else if chat.status == ChatStatus::Interrupting {
        // The previous owner died while committing an interrupt: commit what clients saw.
        commit_recovered_interruption(&sink, from_log.as_ref()).await;
        Ok(RunOutcome::Interrupted)
    } else {
        let per_user = shared.tools.per_user(shared.store.as_ref()).await;
        let span = traced_run(shared, &start, lease).await;
        match prepare(shared, &start, lease, &sink, from_log, per_user) {
            Ok(mut options) => {
                options.paused_turn = last == LastStep::Paused;
                options.continue_reply = stopped;
                let outcome = run_guarded(options, cancel.clone(), span.clone()).await;
                if outcome.as_ref().is_err_and(|e| !e.is_cancelled()) {
                    span.record("otel.status_code", "error");
                }
                outcome
            }
            Err(failure) => Err(RunError::Provider(*failure)),
        }
    };
    sink.finish().await;
    drop(sink);

    renewing.ending();
    lifecycle::end(shared, chat, &current(lease), outcome, stop).await
}

/// The span of the run about to start (`crate::telemetry::run_span`). With telemetry on,
/// its context is recorded for a daemon that may take the chat over, and the log's `run`
/// span names its trace.
async fn traced_run(shared: &Arc<Shared>, start: &RunStart, lease: &SharedLease) -> tracing::Span {
    let span = crate::telemetry::run_span(&start.chat, &start.trace, start.taken_over());
    let Some(traceparent) = crate::telemetry::traceparent_of(&span) else {
        if let Some(trace_id) = start
            .trace
            .parent
            .as_deref()
            .and_then(crate::telemetry::trace_id_of)
        {
            tracing::Span::current().record("trace_id", trace_id.as_str());
        }
        return span;
    };
    if let Some(trace_id) = crate::telemetry::trace_id_of(&traceparent) {
        tracing::Span::current().record("trace_id", trace_id.as_str());
    }
    if shared.config.telemetry.is_some()
        && let Err(error) = shared
            .store
            .record_run_trace(&current(lease), &traceparent)
            .await
    {
        tracing::warn!(%error, "recording the run's trace context failed");
    }
    span
}

/// The loop in a task of its own, so that a panic anywhere in it (an adapter, a tool, a
/// hook) ends the run as a failure: the chat moves to `error` through `fail_run` instead of
/// staying `running` or `interrupting` under a lease this task would keep renewing. The task
/// is in the log's `run` span (its lines name the chat) and in the run's trace `span`.
async fn run_guarded(
    options: RunOptions,
    cancel: Cancel,
    span: tracing::Span,
) -> Result<RunOutcome, RunError> {
    use tracing::Instrument as _;
    let run = keel_agent::run(options, cancel)
        .instrument(span)
        .instrument(tracing::Span::current());
    match tokio::spawn(run).await {
        Ok(outcome) => outcome,
        Err(join) => {
            let what = if join.is_panic() {
                let payload = join.into_panic();
                payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned())
            } else {
                "the run's task was cancelled".to_owned()
            };
            tracing::error!(error = %what, "the run panicked");
            Err(RunError::Provider(keel_core::ProviderError::new(
                ErrorKind::Unknown,
                format!("internal error, the run stopped: {what}"),
            )))
        }
    }
}

/// What the end of the committed history says the run should do (see [`last_step`]).
fn last_committed_step(chat: &Chat, recent: &[&StoredMessage]) -> LastStep {
    let client_tools: Vec<ClientTool> =
        serde_json::from_value(chat.tools.clone()).unwrap_or_default();
    let names: Vec<String> = client_tools.into_iter().map(|t| t.name).collect();
    let committed: Vec<Committed<'_>> = recent
        .iter()
        .map(|m| (m.role, m.parts.as_slice(), m.finish_reason))
        .collect();
    last_step(&committed, &names)
}

/// The text of the reply the user stopped when it ends the history of a chat that runs
/// again: a continue request (`continue reply`), or a retry of a failed continuation.
/// Every other move that starts a run adds a message after it, and a run that is
/// interrupted ends `waiting`, so a running chat ending in a stopped reply was asked to
/// continue it.
fn stopped_reply_at_end(chat: &Chat, recent: &[&StoredMessage]) -> Option<String> {
    if chat.compact_requested || chat.status != ChatStatus::Running {
        return None;
    }
    recent
        .last()
        .and_then(|m| keel_store::stopped_reply(m.role, m.interrupted, &m.parts))
}

/// Builds the loop's options for a chat, from what its run read when it started.
fn prepare(
    shared: &Arc<Shared>,
    start: &RunStart,
    lease: &SharedLease,
    sink: &Arc<LiveSink>,
    from_log: Option<keel_agent::StreamSnapshot>,
    per_user: bool,
) -> Result<RunOptions, Box<keel_core::ProviderError>> {
    let chat = &start.chat;
    let Some(model) = shared.models.get(&chat.model).cloned() else {
        return Err(Box::new(keel_core::ProviderError::new(
            ErrorKind::InvalidRequest,
            format!("model `{}` is not configured", chat.model),
        )));
    };
    let prompt = start.prompt();
    let mut history = prompt.messages;
    with_system(&mut history, chat.system.as_deref());
    let prior: HashMap<_, _> = start
        .tool_records
        .iter()
        .map(|r| (r.tool_call_id.clone(), r.clone()))
        .collect();
    let prior = Arc::new(prior);
    let budget = keel_tools::budget_for(model.context_limit);
    // A workspace that cannot be opened fails the run with a message saying why, rather
    // than running without the tools the model expects.
    let offered = shared.tools.for_owner(&chat.owner, per_user).map_err(|e| {
        Box::new(keel_core::ProviderError::new(
            ErrorKind::InvalidRequest,
            format!("the tools' workspace cannot be used: {e}"),
        ))
    })?;
    let tools: Vec<Arc<dyn Tool>> = keel_tools::limit_all(offered, budget)
        .into_iter()
        .map(|tool| {
            Arc::new(DurableTool {
                inner: tool,
                chat_id: chat.id,
                store: shared.store.clone(),
                lease: lease.clone(),
                prior: prior.clone(),
                metrics: shared.metrics.clone(),
            }) as Arc<dyn Tool>
        })
        .collect();
    let client_tools: Vec<ClientTool> =
        serde_json::from_value(chat.tools.clone()).unwrap_or_default();
    let runs = &shared.config.runs;
    #[cfg(debug_assertions)]
    let language_model = super::fault::wrap(model.model.clone());
    #[cfg(not(debug_assertions))]
    let language_model = model.model.clone();
    let pricing = Pricing {
        model: model.id.clone(),
        price: model.price,
    };
    let mut options = RunOptions::new(
        language_model,
        history,
        Arc::new(StorePersister {
            chat_id: chat.id,
            store: shared.store.clone(),
            hub: shared.hub.clone(),
            sink: sink.clone(),
            owner: chat.owner.clone(),
            pricing: pricing.clone(),
            metrics: shared.metrics.clone(),
        }),
    );
    options.tools = tools;
    options.dynamic_tools = client_tools
        .into_iter()
        .map(|t| ToolDefinition::function(t.name, t.description, t.parameters))
        .collect();
    options.provider_tools = model
        .provider_tools
        .iter()
        .map(|definition| keel_agent::ProviderTool {
            definition: definition.clone(),
            runner: None,
        })
        .collect();
    options.max_steps = chat.max_steps.unwrap_or(runs.max_steps);
    options.call_options = model.options.clone();
    if model.options.store {
        // Chain mode: the provider holds the conversation up to the anchor and gets only
        // what follows it; the loop keeps the full history for healing and compaction.
        options.call_options.previous_response_id = prompt.chain_from;
        options.chain = chain_hooks(shared, chat);
    }
    options.context_limit_fallback = model.context_limit;
    options.sink = sink.clone();
    options.retry = RetryPolicy {
        initial_delay: Duration::from_millis(runs.retry_initial_delay_ms),
        max_delay: Duration::from_millis(runs.retry_max_delay_ms),
        max_attempts: runs.retry_max_attempts,
        ..RetryPolicy::default()
    };
    options.timeouts = StreamTimeouts {
        startup: model
            .startup_timeout
            .unwrap_or(Duration::from_millis(runs.startup_timeout_ms)),
        idle: Duration::from_millis(runs.idle_timeout_ms),
        scale_startup: model.startup_timeout.is_none(),
    };
    let metrics = shared.metrics.clone();
    let (provider, model_id) = (model.provider.clone(), model.id.clone());
    options.on_retry = Some(Arc::new(move |notice| {
        metrics
            .stream_retries
            .get_or_create(&RetryLabels {
                provider: provider.clone(),
                model: model_id.clone(),
                kind: notice.kind.as_str().to_owned(),
                chain_broken: (notice.kind == ErrorKind::ChainBroken).to_string(),
            })
            .inc();
    }));
    let run_id = uuid::Uuid::new_v4().to_string();
    options.checkpointing = Some(Checkpointing {
        store: Arc::new(StoreCheckpoints {
            chat_id: chat.id,
            store: shared.store.clone(),
            lease: lease.clone(),
            from_log,
            run_id: run_id.clone(),
            model: model.model.model().to_owned(),
            saved: AtomicBool::new(false),
        }),
        run_id,
        chat_id: chat.id.to_string(),
        // No snapshot by count: the live-part log is the step (see `checkpoints`).
        every: 0,
    });
    options.compaction = Some(Compaction {
        threshold: runs.compaction_threshold,
        hooks: Arc::new(StoreCompaction {
            chat_id: chat.id,
            store: shared.store.clone(),
            hub: shared.hub.clone(),
            sink: sink.clone(),
            system: chat.system.clone(),
            pricing: pricing.clone(),
            metrics: shared.metrics.clone(),
        }),
    });
    options.compact_only = chat.compact_requested;
    options.capture_content = shared
        .config
        .telemetry
        .as_ref()
        .is_some_and(|t| t.capture_content);
    let chat_id = chat.id;
    options.on_persist_error = Some(Arc::new(move |error| {
        tracing::error!(chat = %chat_id, %error, "the interrupted step could not be saved");
    }));
    Ok(options)
}

/// Chain-mode healing: a broken chain reloads the full stored history.
fn chain_hooks(shared: &Arc<Shared>, chat: &Chat) -> ChainHooks {
    let store = shared.store.clone();
    let (chat_id, system) = (chat.id, chat.system.clone());
    let reload: ReloadHistory = Arc::new(move || {
        let (store, system) = (store.clone(), system.clone());
        Box::pin(async move {
            let mut history = store
                .load_prompt_history(chat_id)
                .await
                .map_err(|e| e.to_string())?;
            with_system(&mut history, system.as_deref());
            Ok(history)
        })
    });
    ChainHooks {
        disable_chain_mode: None,
        reload_history: Some(reload),
    }
}

/// Commits the step a dead owner was interrupting, from what its clients were sent.
async fn commit_recovered_interruption(
    sink: &Arc<LiveSink>,
    snapshot: Option<&keel_agent::StreamSnapshot>,
) {
    let Some(snapshot) = snapshot else {
        return;
    };
    let now = chrono::Utc::now();
    let mut parts = Vec::new();
    if !snapshot.partial_text.trim().is_empty() {
        parts.push(Part::text(snapshot.partial_text.clone()).at(now));
    }
    let calls: Vec<_> = snapshot
        .completed_calls
        .iter()
        .chain(snapshot.in_flight.iter())
        .collect();
    for call in &calls {
        parts.push(Part::tool_call(&call.tool_call_id, &call.tool_name, &call.args, false).at(now));
    }
    if parts.is_empty() {
        return;
    }
    let mut messages = vec![NewMessage::new(Role::Assistant, parts)];
    if !calls.is_empty() {
        let results = calls
            .iter()
            .map(|c| {
                Part::tool_result(
                    &c.tool_call_id,
                    &c.tool_name,
                    serde_json::Value::String(keel_core::INTERRUPTED_RESULT.into()),
                    true,
                    false,
                )
                .at(now)
            })
            .collect();
        messages.push(NewMessage::new(Role::Tool, results));
    }
    for message in &mut messages {
        message.interrupted = true;
    }
    if let Err(error) = sink.commit(messages).await {
        tracing::warn!(%error, "committing a recovered interrupted step failed");
    }
}
