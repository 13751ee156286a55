//! A real OTLP trace receiver for the daemon tests: a gRPC server (tonic) or an HTTP one
//! (axum, `POST /v1/traces`), both decoding `ExportTraceServiceRequest` with the protocol's
//! own messages, keeping every span it was sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use prost::Message as _;
use serde_json::{Value, json};

/// A span as received, ids in hex.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub service: String,
    pub attributes: BTreeMap<String, Value>,
    /// (name, attributes) in order.
    pub events: Vec<(String, BTreeMap<String, Value>)>,
    /// (trace id, span id).
    pub links: Vec<(String, String)>,
    /// 2 is an error.
    pub status: i32,
}

impl Span {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

type Spans = Arc<Mutex<Vec<Span>>>;

/// A receiver listening on a free port of 127.0.0.1.
pub struct Receiver {
    /// The base URL to point the daemon at.
    pub endpoint: String,
    spans: Spans,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// OTLP over gRPC.
    pub async fn grpc() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let spans = Spans::default();
        let service = TraceServiceServer::new(Collector(spans.clone()));
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Receiver {
            endpoint,
            spans,
            task,
        }
    }

    /// OTLP over HTTP with protobuf bodies.
    pub async fn http() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let spans = Spans::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    keep(&kept, request);
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            endpoint,
            spans,
            task,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

struct Collector(Spans);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn keep(spans: &Spans, request: ExportTraceServiceRequest) {
    let mut kept = spans.lock().unwrap();
    for resource in request.resource_spans {
        let resource_attributes = resource
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource_attributes
            .get("service.name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        for scope in resource.scope_spans {
            for span in scope.spans {
                kept.push(Span {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    service: service.clone(),
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attributes(&e.attributes)))
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    status: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, Value> {
    list.iter()
        .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
        .collect()
}

fn value(of: Option<&AnyValue>) -> Value {
    match of.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => json!(s),
        Some(Any::BoolValue(b)) => json!(b),
        Some(Any::IntValue(i)) => json!(i),
        Some(Any::DoubleValue(d)) => json!(d),
        Some(Any::ArrayValue(a)) => Value::Array(a.values.iter().map(|v| value(Some(v))).collect()),
        Some(other) => json!(format!("{other:?}")),
        None => Value::Null,
    }
}

/// The spans as an indented tree, children under their parent, in start order; with the
/// attributes named in `shown` and the events.
pub fn render(spans: &[Span], shown: &[&str]) -> String {
    let ids: std::collections::HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut out = String::new();
    for root in spans
        .iter()
        .filter(|s| !ids.contains(s.parent_span_id.as_str()))
    {
        draw(spans, root, 0, shown, &mut out);
    }
    out
}

fn draw(spans: &[Span], span: &Span, depth: usize, shown: &[&str], out: &mut String) {
    let pad = "  ".repeat(depth);
    let attrs: Vec<String> = shown
        .iter()
        .filter_map(|k| span.attributes.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    let status = if span.status == 2 { " [error]" } else { "" };
    out.push_str(&format!("{pad}{}{status} {}\n", span.name, attrs.join(" ")));
    for (name, attributes) in &span.events {
        let attrs: Vec<String> = attributes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!("{pad}  · event {name} {}\n", attrs.join(" ")));
    }
    for (trace, span) in &span.links {
        out.push_str(&format!("{pad}  · link {trace}/{span}\n"));
    }
    for child in spans.iter().filter(|s| s.parent_span_id == span.span_id) {
        draw(spans, child, depth + 1, shown, out);
    }
}
