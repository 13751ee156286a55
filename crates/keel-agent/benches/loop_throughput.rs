//! Parts per second through the agent loop: a scripted in-memory model streams one step of
//! N deltas, and [`keel_agent::run`] accumulates them, publishes each to the event sink and
//! persists the step. No network, no database: the cost measured is the loop's own (the
//! stream watchdog, accumulation, one live event per delta, building the step).
//!
//! Run: `cargo bench -p keel-agent --bench loop_throughput`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures::stream;
use keel_agent::{
    EventSink, LiveEvent, PersistError, PersistedStep, RunOptions, RunOutcome, StepPersister, run,
};
use keel_core::{
    Cancel, EventStream, FinishReason, LanguageModel, Message, ModelCall, ProviderError,
    StreamEvent, ToolDefinition, Usage,
};
use serde_json::json;

/// Deltas per streamed step.
const PARTS: u64 = 10_000;

/// What the scripted model streams in its one step.
#[derive(Clone, Copy)]
enum Script {
    /// One text block of `PARTS` deltas.
    Text,
    /// One tool call whose arguments arrive in `PARTS` deltas.
    ToolCall,
}

struct ScriptedModel {
    script: Script,
    parts: u64,
}

fn finish(reason: FinishReason) -> StreamEvent {
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

#[async_trait]
impl LanguageModel for ScriptedModel {
    fn provider(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "scripted-1"
    }

    async fn stream(
        &self,
        _call: ModelCall,
        _cancel: Cancel,
    ) -> Result<EventStream, ProviderError> {
        let parts = self.parts;
        // Deltas are built as the stream is polled, one allocation each, as a provider
        // adapter decoding a wire stream would.
        let events: EventStream = match self.script {
            Script::Text => Box::pin(stream::iter(
                std::iter::once(StreamEvent::TextStart { id: "t".into() })
                    .chain((0..parts).map(|_| StreamEvent::TextDelta {
                        id: "t".into(),
                        delta: "tok ".into(),
                    }))
                    .chain([
                        StreamEvent::TextEnd { id: "t".into() },
                        finish(FinishReason::Stop),
                    ]),
            )),
            Script::ToolCall => Box::pin(stream::iter(
                std::iter::once(StreamEvent::ToolInputStart {
                    id: "call-1".into(),
                    tool_name: "write_file".into(),
                    provider_executed: false,
                })
                .chain((0..parts).map(move |i| StreamEvent::ToolInputDelta {
                    id: "call-1".into(),
                    delta: match i {
                        0 => r#"{"content":""#.into(),
                        i if i + 1 == parts => r#""}"#.into(),
                        _ => "tok ".into(),
                    },
                }))
                .chain([
                    StreamEvent::ToolInputEnd {
                        id: "call-1".into(),
                    },
                    finish(FinishReason::ToolCalls),
                ]),
            )),
        };
        Ok(events)
    }
}

/// Keeps nothing: the step is only checked for size, so the store's cost stays out.
struct CountingPersister {
    steps: AtomicU64,
}

#[async_trait]
impl StepPersister for CountingPersister {
    async fn persist_step(&self, step: PersistedStep, _cancel: Cancel) -> Result<(), PersistError> {
        black_box(&step);
        self.steps.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[derive(Default)]
struct CountingSink {
    events: AtomicU64,
}

impl EventSink for CountingSink {
    fn publish(&self, event: LiveEvent) {
        black_box(&event);
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

fn options(
    script: Script,
    persister: Arc<CountingPersister>,
    sink: Arc<CountingSink>,
) -> RunOptions {
    let model = Arc::new(ScriptedModel {
        script,
        parts: PARTS,
    });
    let mut options = RunOptions::new(model, vec![Message::user("go")], persister);
    options.sink = sink;
    options.jitter_seed = Some(1);
    // A client-side tool: its call ends the run as pending instead of running anything.
    options.dynamic_tools = vec![ToolDefinition {
        name: "write_file".into(),
        description: "Writes a file.".into(),
        parameters: json!({"type": "object"}),
        provider_tool: None,
    }];
    options
}

fn loop_throughput(c: &mut Criterion) {
    // The daemon runs loops on tokio; one thread keeps scheduler noise out of a loop that
    // never spawns for a text step or a client-side call.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let mut group = c.benchmark_group("agent_loop");
    group
        .throughput(Throughput::Elements(PARTS))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (name, script) in [
        ("text_deltas", Script::Text),
        ("tool_call_deltas", Script::ToolCall),
    ] {
        group.bench_function(BenchmarkId::new(name, PARTS), |b| {
            b.iter(|| {
                let persister = Arc::new(CountingPersister {
                    steps: AtomicU64::new(0),
                });
                let sink = Arc::new(CountingSink::default());
                let outcome = runtime
                    .block_on(run(
                        options(script, persister.clone(), sink.clone()),
                        Cancel::new(),
                    ))
                    .expect("the scripted run succeeds");
                // A run that silently dropped deltas would look fast; make sure it did not.
                assert_eq!(sink.events.load(Ordering::Relaxed), PARTS);
                assert_eq!(persister.steps.load(Ordering::Relaxed), 1);
                match script {
                    Script::Text => assert_eq!(outcome, RunOutcome::Completed { steps: 1 }),
                    Script::ToolCall => {
                        assert!(matches!(outcome, RunOutcome::PendingToolCalls(ref calls) if calls.len() == 1));
                    }
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, loop_throughput);
criterion_main!(benches);
