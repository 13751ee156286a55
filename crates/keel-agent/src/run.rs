//! The agent loop: one model step after another until the model is done.
//!
//! For each step: prepare a prompt *copy*, stream the model's reply into a
//! [`StepAccumulator`] (publishing every delta), run the local tool calls concurrently,
//! persist the step, and go round again only if the model asked for a local tool and finished
//! with reason tool-calls, or if the provider paused the turn (`pause_turn`) to be carried on
//! ([`next_step`](crate::next_step), the rule a daemon taking over a chat follows too).
//!
//! Interrupts are the heart of it. Whichever way a user interrupt surfaces — an error event,
//! a stream that stops yielding, between the stream and the tools, while tools run, or right
//! before persisting — [`run`] persists everything the step accumulated exactly once, through
//! [`persist_interrupted`], with a cancel token that is not cancelled, and returns
//! [`RunOutcome::Interrupted`]. A shutdown returns [`RunError::Cancelled`] instead, so the
//! daemon can hand the chat to another worker.
//!
//! Longer than most files: the loop and the decisions between its steps (compaction,
//! handover, persistence on interrupt) in the order a run meets them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use keel_core::{
    CallOptions, Cancel, CancelCause, Clock, ErrorKind, LanguageModel, Message, ModelCall,
    PendingToolCall, ProviderError, SystemClock, ToolDefinition,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;
use tracing::Instrument;

use crate::accumulate::StepAccumulator;
use crate::checkpoint::CheckpointStore;
use crate::compaction::{Compaction, context_tokens, should_compact};
use crate::context_limit;
use crate::execute::{FinishedCall, run_batch};
use crate::next_step::{NextStep, next_step};
use crate::persist::{Halt, PersistError, PersistedStep, StepPersister};
use crate::response::{assistant_message, for_prompt, tool_message};
use crate::retry::RetryPolicy;
use crate::sink::{EventSink, NullSink};
use crate::snapshot::StreamSnapshot;
use crate::timeouts::StreamTimeouts;
use crate::tool::{ProviderTool, Tool, ToolCallRequest, ToolOutput};

/// A hook that rewrites the prompt copy before provider preparation.
pub type PrepareMessages = Arc<dyn Fn(&mut Vec<Message>) + Send + Sync>;

/// Called when the interrupt-safe persist fails; such errors must never vanish.
pub type PersistErrorHook = Arc<dyn Fn(&PersistError) + Send + Sync>;

/// Called before each retried provider attempt.
pub type RetryHook = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

/// Reloads the chat's full stored history (chain-mode recovery).
pub type ReloadHistory =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Vec<Message>, String>> + Send + Sync>;

/// A provider attempt failed and will be retried after `delay`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// The attempt about to start (2 for the first retry).
    pub attempt: u32,
    pub error: ProviderError,
    pub kind: ErrorKind,
    pub delay: std::time::Duration,
}

/// Hooks of OpenAI Responses chain mode (`previous_response_id`).
#[derive(Clone, Default)]
pub struct ChainHooks {
    /// Stop using chain mode for this chat (the stored response chain is broken).
    pub disable_chain_mode: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Load the full history, replacing the chain-filtered one.
    pub reload_history: Option<ReloadHistory>,
}

/// Where and how often the step in progress is checkpointed.
#[derive(Clone)]
pub struct Checkpointing {
    pub store: Arc<dyn CheckpointStore>,
    pub run_id: String,
    pub chat_id: String,
    /// Save every this many content deltas (0: never by count), whenever reasoning gets
    /// provider metadata (signatures), and on every captured failure.
    pub every: u64,
}

/// Everything a run needs.
pub struct RunOptions {
    pub model: Arc<dyn LanguageModel>,
    /// The history the first prompt is built from. The loop works on its own copy.
    pub messages: Vec<Message>,
    /// Local tools.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Tools the provider knows by type; always offered.
    pub provider_tools: Vec<ProviderTool>,
    /// Client-side tools: offered, never run; their calls end the run with
    /// [`RunOutcome::PendingToolCalls`].
    pub dynamic_tools: Vec<ToolDefinition>,
    /// When set, only these function tools are offered (provider tools always are).
    pub active_tools: Option<Vec<String>>,
    /// Steps at most; values ≤ 0 mean 1.
    pub max_steps: i64,
    pub call_options: CallOptions,
    /// The model's configured context limit, used when provider metadata names none.
    pub context_limit_fallback: Option<u64>,
    pub prepare_messages: Option<PrepareMessages>,
    pub persister: Arc<dyn StepPersister>,
    pub sink: Arc<dyn EventSink>,
    pub clock: Arc<dyn Clock>,
    pub on_persist_error: Option<PersistErrorHook>,
    pub retry: RetryPolicy,
    pub timeouts: StreamTimeouts,
    pub on_retry: Option<RetryHook>,
    pub checkpointing: Option<Checkpointing>,
    pub chain: ChainHooks,
    /// Seeds the backoff jitter; `None` seeds from the OS.
    pub jitter_seed: Option<u64>,
    /// Context compaction; `None` never compacts.
    pub compaction: Option<Compaction>,
    /// Only summarise the history (a requested compaction); no step is streamed.
    pub compact_only: bool,
    /// The history ends in a turn the provider paused (a run resumed after its owner died
    /// between that step and the next): the first call carries it on, as the loop's own
    /// next step would have.
    pub paused_turn: bool,
    /// The history ends in a reply the user stopped, whose text this is
    /// (`POST /chats/{id}/continue`): the first step carries it on through the provider's
    /// continuation (native prefill or an instruction) and holds only the new text, so the
    /// stored reply and its continuation read as one, with nothing repeated.
    pub continue_reply: Option<String>,
    /// Record prompts, replies and tool arguments and results in the run's spans
    /// ([`crate::trace`]); off, spans carry names, counts and ids only.
    pub capture_content: bool,
}

impl RunOptions {
    pub fn new(
        model: Arc<dyn LanguageModel>,
        messages: Vec<Message>,
        persister: Arc<dyn StepPersister>,
    ) -> Self {
        Self {
            model,
            messages,
            tools: Vec::new(),
            provider_tools: Vec::new(),
            dynamic_tools: Vec::new(),
            active_tools: None,
            max_steps: 1,
            call_options: CallOptions::default(),
            context_limit_fallback: None,
            prepare_messages: None,
            persister,
            sink: Arc::new(NullSink),
            clock: Arc::new(SystemClock),
            on_persist_error: None,
            retry: RetryPolicy::default(),
            timeouts: StreamTimeouts::default(),
            on_retry: None,
            checkpointing: None,
            chain: ChainHooks::default(),
            jitter_seed: None,
            compaction: None,
            compact_only: false,
            paused_turn: false,
            continue_reply: None,
            capture_content: false,
        }
    }
}

/// How a compaction ended without error.
pub(crate) enum Compacted {
    /// The summary is committed; the history now starts from it.
    Done,
    /// A user interrupt stopped it; nothing was committed.
    Interrupted,
}

/// How a run ended without error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The model finished; `steps` were persisted.
    Completed { steps: usize },
    /// The model called client-side tools; the step is persisted and the calls await results.
    PendingToolCalls(Vec<PendingToolCall>),
    /// A user interrupt stopped the run; the partial step is persisted.
    Interrupted,
}

/// How a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Cancelled without the interrupt cause: the server is shutting down or lost the chat.
    /// Nothing of the step in progress was persisted.
    #[error("run cancelled by shutdown")]
    Cancelled,
    #[error("provider failed: {0}")]
    Provider(ProviderError),
    /// A stream kept failing mid-way and the recovery budget is spent.
    #[error("stream interrupted after {attempts} attempts: {cause}")]
    StreamInterrupted {
        cause: ProviderError,
        snapshot: StreamSnapshot,
        attempts: u32,
    },
    #[error("persisting the step failed: {0}")]
    Persist(#[source] PersistError),
    /// Compaction did not bring the context under the limit; compacting again would loop.
    #[error(
        "the conversation is still too long after compaction ({tokens} tokens of a {limit}-token context)"
    )]
    ContextStillTooLong { tokens: u64, limit: u64 },
    #[error("compaction failed: {0}")]
    Compaction(String),
    /// The persister refused a further step ([`StepPersister::may_go_on`]); every step
    /// before it is committed.
    #[error("{}", .0.message)]
    Halted(Halt),
}

impl RunError {
    pub fn is_cancelled(&self) -> bool {
        matches!(self, RunError::Cancelled)
    }
}

/// Runs the loop to completion, interruption, a pending client-side call, or an error.
pub async fn run(options: RunOptions, cancel: Cancel) -> Result<RunOutcome, RunError> {
    Runner::new(options, cancel).run().await
}

/// How streaming one step (all its attempts) ended.
pub(crate) enum StepEnd {
    Finished,
    Cancelled,
    Failed(Box<RunError>),
}

pub(crate) struct Runner {
    pub(crate) options: RunOptions,
    pub(crate) cancel: Cancel,
    local_tools: HashMap<String, Arc<dyn Tool>>,
    dynamic_names: HashSet<String>,
    offered: Vec<ToolDefinition>,
    pub(crate) rng: StdRng,
    /// The last persisted step was a turn the provider paused: the next call sends it back
    /// as it is, to be carried on.
    paused_turn: bool,
    /// The stopped reply the first step carries on ([`RunOptions::continue_reply`]); gone
    /// once a compaction replaced the history it ended.
    pub(crate) stopped: Option<String>,
}

impl Runner {
    fn new(options: RunOptions, cancel: Cancel) -> Self {
        let is_active = |name: &str| {
            options
                .active_tools
                .as_ref()
                .is_none_or(|active| active.iter().any(|a| a == name))
        };
        let mut local_tools: HashMap<String, Arc<dyn Tool>> = HashMap::new();
        let mut offered = Vec::new();
        for tool in &options.tools {
            let definition = tool.definition();
            if is_active(&definition.name) {
                local_tools.insert(definition.name.clone(), tool.clone());
                offered.push(definition);
            }
        }
        let mut dynamic_names = HashSet::new();
        for definition in &options.dynamic_tools {
            if is_active(&definition.name) {
                dynamic_names.insert(definition.name.clone());
                offered.push(definition.clone());
            }
        }
        for provider_tool in &options.provider_tools {
            offered.push(provider_tool.definition.clone());
            if let Some(runner) = &provider_tool.runner {
                local_tools.insert(provider_tool.definition.name.clone(), runner.clone());
            }
        }
        let rng = match options.jitter_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => rand::make_rng(),
        };
        let paused_turn = options.paused_turn;
        let stopped = options.continue_reply.clone();
        Self {
            options,
            cancel,
            local_tools,
            dynamic_names,
            offered,
            rng,
            paused_turn,
            stopped,
        }
    }

    async fn run(mut self) -> Result<RunOutcome, RunError> {
        let max_steps = usize::try_from(self.options.max_steps)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(1);
        let mut history = self.options.messages.clone();
        if self.options.compact_only {
            return match self.compact(&mut history).await? {
                Compacted::Done => Ok(RunOutcome::Completed { steps: 0 }),
                Compacted::Interrupted => Ok(RunOutcome::Interrupted),
            };
        }
        let mut state = PassState::default();
        let last = match self.run_pass(&mut history, max_steps, &mut state).await? {
            PassEnd::Outcome(outcome) => return Ok(outcome),
            PassEnd::Final(last) => last,
        };
        // The safety net: a final step over the threshold is summarised so that the next
        // message has room. The run ends there (see `next_step`): the summary is not a
        // request, and calling the model on it would answer the same message twice.
        if self.over_threshold(&last)
            && let Compacted::Interrupted = self.compact(&mut history).await?
        {
            return Ok(RunOutcome::Interrupted);
        }
        Ok(RunOutcome::Completed {
            steps: state.persisted,
        })
    }

    /// Up to `max_steps` steps: returns the facts of the final step, or how the run ended.
    async fn run_pass(
        &mut self,
        history: &mut Vec<Message>,
        max_steps: usize,
        state: &mut PassState,
    ) -> Result<PassEnd, RunError> {
        let mut last = StepFacts::default();
        while state.next_index < max_steps {
            let step_index = state.next_index;
            state.next_index += 1;
            let started = Instant::now();
            let step_span = crate::trace::step(step_index);
            let mut acc = StepAccumulator::new();
            if self.cancel.is_cancelled() {
                return self
                    .stop(step_index, &acc, &[], started)
                    .await
                    .map(PassEnd::Outcome);
            }
            let mut overflow_retried = false;
            loop {
                match self
                    .stream_step(step_index, history, &mut acc)
                    .instrument(step_span.clone())
                    .await
                {
                    StepEnd::Finished => break,
                    StepEnd::Cancelled => {
                        return self
                            .stop(step_index, &acc, &[], started)
                            .await
                            .map(PassEnd::Outcome);
                    }
                    StepEnd::Failed(error) => {
                        self.delete_checkpoint().await;
                        if !self
                            .can_compact_overflow(&error, overflow_retried, state)
                            .map_err(|e| *e)?
                        {
                            return Err(*error);
                        }
                        // The provider refused the prompt as too long: compact, then try
                        // the step once more on the summary.
                        overflow_retried = true;
                        if let Compacted::Interrupted = self.compact(history).await? {
                            return Ok(PassEnd::Outcome(RunOutcome::Interrupted));
                        }
                        state.just_compacted = true;
                        self.stopped = None;
                        acc = StepAccumulator::new();
                    }
                }
            }
            if self.cancel.is_cancelled() {
                return self
                    .stop(step_index, &acc, &[], started)
                    .await
                    .map(PassEnd::Outcome);
            }

            let plan = self.plan_calls(&acc);
            let batch = run_batch(
                plan.local.clone(),
                &self.local_tools,
                &self.cancel,
                &self.options.clock,
                self.options.capture_content,
            )
            .instrument(step_span.clone())
            .await;
            let mut finished = plan.refused;
            finished.extend(batch.finished);
            if batch.cancelled || self.cancel.is_cancelled() {
                return self
                    .stop(step_index, &acc, &finished, started)
                    .await
                    .map(PassEnd::Outcome);
            }

            let step = self.build_step(step_index, &acc, &finished, &[], started, false);
            let messages = step.messages.clone();
            let mut step = step;
            step.pending_tool_calls = plan.pending.clone();
            match self
                .options
                .persister
                .persist_step(step.clone(), self.cancel.clone())
                .instrument(step_span.clone())
                .await
            {
                Ok(()) => self.delete_checkpoint().await,
                Err(PersistError::Interrupted) => {
                    step.interrupted = true;
                    self.persist_interrupted(step).await;
                    return Ok(PassEnd::Outcome(RunOutcome::Interrupted));
                }
                Err(error) => return Err(RunError::Persist(error)),
            }
            state.persisted += 1;
            last = StepFacts {
                tokens: context_tokens(&step.usage),
                limit: step.context_limit,
            };
            let over = self.over_threshold(&last);
            if over {
                self.check_not_just_compacted(&last, state)
                    .map_err(|e| *e)?;
            }
            state.just_compacted = false;
            history.extend(messages.iter().map(for_prompt));
            if !plan.pending.is_empty() {
                // The run stops here until the client answers: compact now, so the answer
                // is sent with a context that has room for it.
                if over && let Compacted::Interrupted = self.compact(history).await? {
                    return Ok(PassEnd::Outcome(RunOutcome::Interrupted));
                }
                return Ok(PassEnd::Outcome(RunOutcome::PendingToolCalls(plan.pending)));
            }
            // A paused turn (Anthropic `pause_turn`: the provider's own tools ran long) is
            // not the end of the reply: the next step carries it on. It goes back as the
            // last message, so nothing (no compaction) may come between.
            let next = next_step(
                Some(acc.finish_reason.unwrap_or_default()),
                !finished.is_empty(),
            );
            self.paused_turn = next == NextStep::CarryOn;
            if next != NextStep::End
                && let Err(halt) = self.options.persister.may_go_on().await
            {
                return Err(RunError::Halted(halt));
            }
            match next {
                NextStep::CarryOn => continue,
                NextStep::End => return Ok(PassEnd::Final(last)),
                NextStep::Call => {}
            }
            self.leave_chain_mode(history).await;
            if over {
                if let Compacted::Interrupted = self.compact(history).await? {
                    return Ok(PassEnd::Outcome(RunOutcome::Interrupted));
                }
                state.just_compacted = true;
                // Already compacted: nothing left for the safety net to do.
                last = StepFacts::default();
            }
        }
        Ok(PassEnd::Final(last))
    }

    fn over_threshold(&self, facts: &StepFacts) -> bool {
        self.options
            .compaction
            .as_ref()
            .is_some_and(|c| should_compact(facts.tokens, facts.limit, c.threshold))
    }

    /// A step right after a compaction that is still over the threshold means the summary
    /// did not help; compacting again would loop.
    fn check_not_just_compacted(
        &self,
        facts: &StepFacts,
        state: &PassState,
    ) -> Result<(), Box<RunError>> {
        if state.just_compacted {
            return Err(Box::new(RunError::ContextStillTooLong {
                tokens: facts.tokens,
                limit: facts.limit.unwrap_or_default(),
            }));
        }
        Ok(())
    }

    /// Whether a failed step is a context overflow that compaction may fix.
    fn can_compact_overflow(
        &self,
        error: &RunError,
        overflow_retried: bool,
        state: &PassState,
    ) -> Result<bool, Box<RunError>> {
        let RunError::Provider(provider) = error else {
            return Ok(false);
        };
        if provider.kind != ErrorKind::ContextOverflow || self.options.compaction.is_none() {
            return Ok(false);
        }
        if overflow_retried || state.just_compacted {
            return Err(Box::new(RunError::Compaction(format!(
                "the conversation is still too long after compaction: {}",
                provider.message
            ))));
        }
        Ok(true)
    }

    /// The request for one attempt, built on a copy of the history. With a continuation
    /// prefix the prompt ends in that partial assistant reply; each adapter continues it its
    /// own way (native prefill, or an instruction to continue).
    /// The call of one attempt: the history, then the text being continued. When the step
    /// carries on a stopped reply (`stopped`), that reply is already the history's last
    /// message and a continuation extends it, so the provider sees one assistant turn.
    pub(crate) fn model_call(
        &self,
        history: &[Message],
        continuation: Option<&str>,
        stopped: bool,
        step: &StepAccumulator,
    ) -> ModelCall {
        let mut prompt = history.to_vec();
        if let Some(prefix) = continuation {
            match prompt.last_mut() {
                Some(last) if stopped && last.role == keel_core::Role::Assistant => {
                    extend_text(last, prefix);
                }
                _ => prompt.push(crate::response::continued_reply(
                    step,
                    prefix,
                    self.options.clock.now(),
                )),
            }
        }
        if let Some(prepare) = &self.options.prepare_messages {
            prepare(&mut prompt);
        }
        self.options.model.prepare_prompt(&mut prompt);
        let mut options = self.options.call_options.clone();
        options.paused_turn = self.paused_turn;
        ModelCall {
            messages: prompt,
            tools: self.offered.clone(),
            options,
        }
    }

    /// Sorts the step's calls into local runs, pending client-side calls and refusals.
    fn plan_calls(&self, acc: &StepAccumulator) -> CallPlan {
        let mut plan = CallPlan::default();
        for call in acc.tool_calls() {
            if call.provider_executed {
                continue;
            }
            if !call.complete {
                plan.refused.push(FinishedCall {
                    request: request_of(call),
                    output: ToolOutput::Error(
                        "tool call arguments were cut off; the call was not run".to_owned(),
                    ),
                    finished_at: self.options.clock.now(),
                });
            } else if !arguments_are_an_object(&call.args) {
                // A call closed by the output limit (`max_tokens`) ends mid-JSON; running
                // it would hand the tool arguments the model never finished.
                plan.refused.push(FinishedCall {
                    request: request_of(call),
                    output: ToolOutput::Error(
                        "tool call arguments are not a complete JSON object (the reply hit its output limit); the call was not run".to_owned(),
                    ),
                    finished_at: self.options.clock.now(),
                });
            } else if self.dynamic_names.contains(&call.tool_name) {
                plan.pending.push(PendingToolCall {
                    tool_call_id: call.tool_call_id.clone(),
                    tool_name: call.tool_name.clone(),
                    args: call.args.clone(),
                });
            } else {
                plan.local.push(request_of(call));
            }
        }
        plan
    }

    fn build_step(
        &self,
        step_index: usize,
        acc: &StepAccumulator,
        finished: &[FinishedCall],
        interrupted_calls: &[(String, String)],
        started: Instant,
        interrupted: bool,
    ) -> PersistedStep {
        let now = self.options.clock.now();
        let mut messages = Vec::with_capacity(2);
        messages.extend(assistant_message(acc, true, now));
        messages.extend(tool_message(finished, interrupted_calls, now));
        PersistedStep {
            step_index,
            messages,
            usage: acc.usage,
            context_limit: context_limit::resolve(
                acc.provider_metadata.as_ref(),
                self.options.context_limit_fallback,
            ),
            runtime: started.elapsed(),
            finish_reason: acc.finish_reason.unwrap_or_default(),
            interrupted,
            pending_tool_calls: Vec::new(),
            // An interrupted step is not what the provider stored: never chain onto it.
            provider_response_id: acc.response_id.clone().filter(|_| !interrupted),
        }
    }

    /// Ends the run after cancellation: persists the partial step on a user interrupt,
    /// returns `Cancelled` on shutdown.
    async fn stop(
        &self,
        step_index: usize,
        acc: &StepAccumulator,
        finished: &[FinishedCall],
        started: Instant,
    ) -> Result<RunOutcome, RunError> {
        if self.cancel.cause() != Some(CancelCause::Interrupted) {
            return Err(RunError::Cancelled);
        }
        let done: HashSet<&str> = finished
            .iter()
            .map(|f| f.request.tool_call_id.as_str())
            .collect();
        // Calls the provider runs itself get no result of Keel's making: only the provider
        // can answer them, and the prompt repair drops those it never answered.
        let unanswered: Vec<(String, String)> = acc
            .tool_calls()
            .filter(|c| !c.provider_executed)
            .filter(|c| !done.contains(c.tool_call_id.as_str()))
            .map(|c| (c.tool_call_id.clone(), c.tool_name.clone()))
            .collect();
        let step = self.build_step(step_index, acc, finished, &unanswered, started, true);
        if !step.messages.is_empty() {
            self.persist_interrupted(step).await;
        }
        self.delete_checkpoint().await;
        Ok(RunOutcome::Interrupted)
    }

    /// Persists an interrupted step with a token that is not cancelled. Failures go to the
    /// error hook and the log; they never panic and never vanish.
    async fn persist_interrupted(&self, step: PersistedStep) {
        if let Err(error) = self
            .options
            .persister
            .persist_step(step, Cancel::new())
            .await
        {
            tracing::error!(%error, "persisting the interrupted step failed");
            if let Some(hook) = &self.options.on_persist_error {
                hook(&error);
            }
        }
    }
}

/// What the compaction decisions need to know about the last persisted step.
#[derive(Debug, Default, Clone, Copy)]
struct StepFacts {
    tokens: u64,
    limit: Option<u64>,
}

/// Progress of a run: its steps, and whether the last thing it did was compact.
#[derive(Debug, Default)]
struct PassState {
    next_index: usize,
    persisted: usize,
    /// The history was compacted and no step has been persisted since.
    just_compacted: bool,
}

enum PassEnd {
    Outcome(RunOutcome),
    /// The model finished (or the step budget ran out) after this step.
    Final(StepFacts),
}

#[derive(Default)]
struct CallPlan {
    local: Vec<ToolCallRequest>,
    pending: Vec<PendingToolCall>,
    refused: Vec<FinishedCall>,
}

fn request_of(call: &crate::accumulate::StreamedCall) -> ToolCallRequest {
    ToolCallRequest {
        tool_call_id: call.tool_call_id.clone(),
        tool_name: call.tool_name.clone(),
        args: call.args.clone(),
    }
}

/// Whether a call's argument text is a JSON object (or empty, which adapters send as `{}`).
pub(crate) fn arguments_are_an_object(args: &str) -> bool {
    args.trim().is_empty() || matches!(serde_json::from_str(args), Ok(serde_json::Value::Object(_)))
}

/// Appends `more` to the last text of `message` (a new text part when it has none).
fn extend_text(message: &mut Message, more: &str) {
    let last_text = message
        .parts
        .iter_mut()
        .rev()
        .find_map(|p| match &mut p.kind {
            keel_core::PartKind::Text { text } => Some(text),
            _ => None,
        });
    match last_text {
        Some(text) => text.push_str(more),
        None => message.parts.push(keel_core::Part::text(more)),
    }
}

#[cfg(test)]
mod tests;
