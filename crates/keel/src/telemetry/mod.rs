//! The process's log and trace pipeline: log lines on stderr as text or JSON (`[log]`), and
//! with `[telemetry]` the run's spans (`keel_server::telemetry`, `keel_agent::trace`)
//! exported over OTLP by a batching processor, flushed on shutdown.

use std::time::Duration;

use anyhow::Context as _;
use keel_server::config::{LogFormat, Protocol, Telemetry};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

mod gen_ai_arrays;
mod json_log;

use json_log::JsonLine;

/// How long shutdown waits for the last spans to reach the collector.
const FLUSH_GRACE: Duration = Duration::from_secs(5);

/// The log's filter: `RUST_LOG`, else `info`; the spans of runs go to traces, not the log.
fn log_filter() -> EnvFilter {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    match format!("{}=off", keel_server::telemetry::TRACE_TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// Logs to stderr as text; `RUST_LOG` overrides the default `info` level. For the commands
/// that are not the daemon.
pub fn init_text() {
    let _ = tracing_subscriber::registry()
        .with(text_layer().with_filter(log_filter()))
        .try_init();
}

fn text_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
}

/// What must be done before the process exits: the exporter's last spans flushed.
pub struct Pipeline {
    traces: Option<SdkTracerProvider>,
}

impl Pipeline {
    /// Exports the spans still buffered and stops the exporter.
    pub async fn shutdown(self) {
        let Some(provider) = self.traces else {
            return;
        };
        // The processor's shutdown blocks on its task, which runs on this runtime.
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(FLUSH_GRACE, flushed).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "flushing traces failed"),
            Ok(Err(error)) => tracing::warn!(%error, "flushing traces failed"),
            Err(_) => tracing::warn!("flushing traces took too long; the last spans are lost"),
        }
    }
}

/// The daemon's pipeline. Inside the runtime: the exporter's batches are its tasks.
pub fn init_daemon(format: LogFormat, telemetry: Option<&Telemetry>) -> anyhow::Result<Pipeline> {
    let log = match format {
        LogFormat::Text => text_layer().boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(JsonLine)
            .boxed(),
    }
    .with_filter(log_filter());
    let (traces, provider) = match telemetry {
        Some(telemetry) => {
            let provider = tracer_provider(telemetry)?;
            let tracer = provider.tracer("keel");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_tracked_inactivity(false)
                .with_threads(false)
                .with_level(false)
                .with_target(false)
                .with_filter(
                    Targets::new()
                        .with_target(keel_server::telemetry::TRACE_TARGET, tracing::Level::INFO),
                );
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(log)
        .with(traces)
        .try_init()
        .context("cannot set up logging")?;
    if let Some(telemetry) = telemetry {
        tracing::info!(
            endpoint = %telemetry.endpoint,
            protocol = telemetry.protocol.as_str(),
            service = %telemetry.service_name,
            "exporting traces"
        );
    }
    Ok(Pipeline { traces: provider })
}

fn tracer_provider(telemetry: &Telemetry) -> anyhow::Result<SdkTracerProvider> {
    let exporter = match telemetry.protocol {
        Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(&telemetry.endpoint)
            .build(),
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(&telemetry.endpoint)
            .with_http_client(keel_http_client()?)
            .build(),
    }
    .with_context(|| format!("cannot export traces to {}", telemetry.endpoint))?;
    let batches =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(gen_ai_arrays::GenAiArrays::new(batches))
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            telemetry.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(telemetry.service_name.clone())
                .build(),
        )
        .build())
}

/// The HTTP client of the exporter: Keel's one trust set-up, as for every outgoing HTTPS.
fn keel_http_client() -> anyhow::Result<reqwest::Client> {
    keel_providers::tls::client_builder()?
        .timeout(Duration::from_secs(10))
        .build()
        .context("cannot build the trace exporter's HTTP client")
}
