//! A scripted in-process model, recording persister and tools for the loop's tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, stream};
use keel_agent::{EventSink, LiveEvent};
use keel_agent::{
    PersistError, PersistedStep, StepPersister, Tool, ToolCallRequest, ToolError, ToolOutput,
};
use keel_core::{
    Cancel, ErrorKind, EventStream, FinishReason, LanguageModel, Message, ModelCall, ProviderError,
    StreamEvent, ToolDefinition, Usage,
};
use tokio::sync::Notify;

/// How a scripted stream ends after its events.
#[derive(Clone)]
pub enum Ending {
    /// Ends normally.
    Done,
    /// Signals `started`, waits for cancellation, then yields an error event of kind
    /// cancelled.
    CancelledError(Arc<Notify>),
    /// Like `CancelledError`, but the error names the interrupt itself.
    InterruptError(Arc<Notify>),
    /// Signals `started`, waits for cancellation, then just ends.
    Silent(Arc<Notify>),
    /// Signals `started` and never yields again, ignoring cancellation.
    Hang(Arc<Notify>),
    /// Yields this error event (a stream cut mid-way).
    Fail(ProviderError),
    /// Yields `count` keep-alives `every` apart, then `then`.
    Pings {
        every: std::time::Duration,
        count: u32,
        then: Vec<StreamEvent>,
    },
}

#[derive(Clone)]
pub enum Reply {
    Stream(Vec<StreamEvent>, Ending),
    Fail(ProviderError),
}

/// A model that plays one scripted reply per call and records every call.
pub struct ScriptedModel {
    replies: Mutex<VecDeque<Reply>>,
    pub calls: Mutex<Vec<ModelCall>>,
    /// Marks the last message of every prompt as a cache breakpoint, to prove provider
    /// preparation happens on a copy.
    pub mark_last: bool,
    /// Answers [`LanguageModel::requires_signed_reasoning`] (Anthropic with thinking).
    pub signed_reasoning: bool,
    /// Whether it continues by prefill; a refusal turns it off, as if another call's refusal
    /// had made the switch first ([`LanguageModel::refuse_prefill`] answers false).
    pub prefill: std::sync::atomic::AtomicBool,
}

impl ScriptedModel {
    pub fn new(replies: Vec<Reply>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into()),
            calls: Mutex::new(Vec::new()),
            mark_last: false,
            signed_reasoning: false,
            prefill: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn requiring_signed_reasoning(replies: Vec<Reply>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into()),
            calls: Mutex::new(Vec::new()),
            mark_last: false,
            signed_reasoning: true,
            prefill: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn marking(replies: Vec<Reply>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into()),
            calls: Mutex::new(Vec::new()),
            mark_last: true,
            signed_reasoning: false,
            prefill: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A model that continues by prefill until one is refused.
    pub fn prefilling(replies: Vec<Reply>) -> Arc<Self> {
        let model = Self::new(replies);
        model
            .prefill
            .store(true, std::sync::atomic::Ordering::SeqCst);
        model
    }

    pub fn calls(&self) -> Vec<ModelCall> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl LanguageModel for ScriptedModel {
    fn provider(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "scripted-1"
    }

    fn requires_signed_reasoning(&self, _options: &keel_core::CallOptions) -> bool {
        self.signed_reasoning
    }

    fn supports_prefill(&self, _options: &keel_core::CallOptions) -> bool {
        self.prefill.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn refuse_prefill(&self) -> bool {
        self.prefill
            .store(false, std::sync::atomic::Ordering::SeqCst);
        false
    }

    fn prepare_prompt(&self, messages: &mut [Message]) {
        if self.mark_last
            && let Some(last) = messages.last_mut()
        {
            last.cache_breakpoint = true;
        }
    }

    async fn stream(&self, call: ModelCall, cancel: Cancel) -> Result<EventStream, ProviderError> {
        self.calls.lock().unwrap().push(call);
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Reply::Stream(
                vec![finish(FinishReason::Stop)],
                Ending::Done,
            ));
        let (events, ending) = match reply {
            Reply::Fail(error) => return Err(error),
            Reply::Stream(events, ending) => (events, ending),
        };
        let head = stream::iter(events);
        let tail: EventStream = match ending {
            Ending::Done => Box::pin(stream::empty()),
            Ending::Pings { every, count, then } => Box::pin(
                stream::unfold(count, move |left| async move {
                    if left == 0 {
                        return None;
                    }
                    tokio::time::sleep(every).await;
                    Some((StreamEvent::KeepAlive, left - 1))
                })
                .chain(stream::iter(then)),
            ),
            Ending::Fail(error) => Box::pin(stream::iter([StreamEvent::Error(error)])),
            Ending::CancelledError(started) => Box::pin(stream::once(async move {
                started.notify_one();
                cancel.cancelled().await;
                StreamEvent::Error(ProviderError::new(ErrorKind::Cancelled, "context canceled"))
            })),
            Ending::InterruptError(started) => Box::pin(stream::once(async move {
                started.notify_one();
                cancel.cancelled().await;
                StreamEvent::Error(ProviderError::new(
                    ErrorKind::Cancelled,
                    "chat interrupted by the user",
                ))
            })),
            Ending::Silent(started) => Box::pin(
                stream::once(async move {
                    started.notify_one();
                    cancel.cancelled().await;
                })
                .filter_map(|()| async { None }),
            ),
            Ending::Hang(started) => Box::pin(
                stream::once(async move {
                    started.notify_one();
                    futures::future::pending::<()>().await;
                })
                .filter_map(|()| async { None }),
            ),
        };
        Ok(Box::pin(head.chain(tail)))
    }
}

pub fn text(id: &str, text: &str) -> Vec<StreamEvent> {
    vec![
        StreamEvent::TextStart { id: id.into() },
        StreamEvent::TextDelta {
            id: id.into(),
            delta: text.into(),
        },
        StreamEvent::TextEnd { id: id.into() },
    ]
}

pub fn tool_call(id: &str, name: &str, args: &str) -> Vec<StreamEvent> {
    vec![
        StreamEvent::ToolInputStart {
            id: id.into(),
            tool_name: name.into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputDelta {
            id: id.into(),
            delta: args.into(),
        },
        StreamEvent::ToolInputEnd { id: id.into() },
        StreamEvent::ToolCall {
            id: id.into(),
            tool_name: name.into(),
            args: args.into(),
            provider_executed: false,
        },
    ]
}

pub fn finish(reason: FinishReason) -> StreamEvent {
    StreamEvent::Finish {
        reason,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        },
        provider_metadata: None,
    }
}

pub fn provider_error(kind: ErrorKind, message: &str) -> ProviderError {
    ProviderError::new(kind, message).with_source("scripted", "scripted-1")
}

pub fn partial_call(id: &str, name: &str, args: &str) -> Vec<StreamEvent> {
    vec![
        StreamEvent::ToolInputStart {
            id: id.into(),
            tool_name: name.into(),
            provider_executed: false,
        },
        StreamEvent::ToolInputDelta {
            id: id.into(),
            delta: args.into(),
        },
    ]
}

pub fn user(text: &str) -> Message {
    Message::user(text)
}

/// What the persister should answer next.
pub enum PersistAnswer {
    Ok,
    Interrupted,
    Fail(&'static str),
}

/// Records every persisted step and whether its cancel token was already cancelled, and
/// every retry recorded as the chat's state.
#[derive(Default)]
pub struct RecordingPersister {
    pub steps: Mutex<Vec<(PersistedStep, bool)>>,
    answers: Mutex<VecDeque<PersistAnswer>>,
    retries: Mutex<Vec<LiveEvent>>,
    /// Refuses every further step with this, once set.
    pub halt: Mutex<Option<keel_agent::Halt>>,
}

impl RecordingPersister {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn answering(answers: Vec<PersistAnswer>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            ..Self::default()
        })
    }

    pub fn retries(&self) -> Vec<LiveEvent> {
        self.retries.lock().unwrap().clone()
    }

    pub fn steps(&self) -> Vec<PersistedStep> {
        self.steps
            .lock()
            .unwrap()
            .iter()
            .map(|(s, _)| s.clone())
            .collect()
    }

    pub fn cancelled_flags(&self) -> Vec<bool> {
        self.steps.lock().unwrap().iter().map(|(_, c)| *c).collect()
    }
}

#[async_trait]
impl StepPersister for RecordingPersister {
    async fn persist_step(&self, step: PersistedStep, cancel: Cancel) -> Result<(), PersistError> {
        self.steps
            .lock()
            .unwrap()
            .push((step, cancel.is_cancelled()));
        match self.answers.lock().unwrap().pop_front() {
            None | Some(PersistAnswer::Ok) => Ok(()),
            Some(PersistAnswer::Interrupted) => Err(PersistError::Interrupted),
            Some(PersistAnswer::Fail(message)) => Err(PersistError::other(message)),
        }
    }

    async fn record_retry(&self, retry: &LiveEvent) {
        self.retries.lock().unwrap().push(retry.clone());
    }

    async fn may_go_on(&self) -> Result<(), keel_agent::Halt> {
        self.halt.lock().unwrap().clone().map_or(Ok(()), Err)
    }
}

type ToolFn = dyn Fn(ToolCallRequest, Cancel) -> BoxFuture<'static, Result<ToolOutput, ToolError>>
    + Send
    + Sync;

/// A tool made from a closure.
pub struct FnTool {
    pub name: String,
    pub run: Box<ToolFn>,
}

impl FnTool {
    pub fn arc<F, Fut>(name: &str, run: F) -> Arc<dyn Tool>
    where
        F: Fn(ToolCallRequest, Cancel) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Arc::new(Self {
            name: name.into(),
            run: Box::new(move |req, cancel| run(req, cancel).boxed()),
        })
    }

    pub fn noop(name: &str) -> Arc<dyn Tool> {
        Self::arc(name, |_, _| async { Ok(ToolOutput::Text("ok".into())) })
    }
}

#[async_trait]
impl Tool for FnTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition::function(&self.name, "test tool", serde_json::Value::Null)
    }

    async fn call(&self, call: ToolCallRequest, cancel: Cancel) -> Result<ToolOutput, ToolError> {
        (self.run)(call, cancel).await
    }
}

/// A sink that records every live event.
#[derive(Default)]
pub struct RecordingSink {
    pub events: Mutex<Vec<LiveEvent>>,
}

impl RecordingSink {
    pub fn events(&self) -> Vec<LiveEvent> {
        self.events.lock().unwrap().clone()
    }
}

impl EventSink for RecordingSink {
    fn publish(&self, event: LiveEvent) {
        self.events.lock().unwrap().push(event);
    }
}
