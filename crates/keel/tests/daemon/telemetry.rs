//! Traces and JSON logs through the running daemon: its spans reach a real OTLP receiver
//! (gRPC and HTTP), named and attributed after the GenAI conventions, under the request's
//! `traceparent`; a run resumed after a `kill -9` links to the run it continues; content is
//! in spans only when asked for; JSON log lines name their request, chat and trace.

use serde_json::{Value, json};

use crate::harness::*;
use crate::otlp::{Receiver, Span, render};

/// The `traceparent` a client sends: its trace and its own span.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE}-{CLIENT_SPAN}-01")
}

/// The attributes the rendered trace shows.
const SHOWN: &[&str] = &[
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "gen_ai.tool.name",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "error.type",
    "keel.run.resumed",
];

fn config(mock: &keel_mock::MockServer, telemetry: &str) -> String {
    format!(
        "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n\
         [[providers]]\nname = \"local\"\nkind = \"openai-chat\"\nbase_url = \"{}\"\n\
         [[models]]\nid = \"traced\"\nprovider = \"local\"\nmodel = \"mock\"\ndefault = true\n\
         [telemetry]\n{telemetry}\n",
        mock.base_url()
    )
}

/// Creates a chat with `text`, sending `traceparent` when given.
async fn create_traced(daemon: &Daemon, text: &str, traceparent: Option<&str>) -> String {
    let mut request = http_client()
        .post(daemon.api("/chats"))
        .json(&json!({"text": text}));
    if let Some(value) = traceparent {
        request = request.header("traceparent", value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// A chat whose first call is refused once with a 429, then calls two tools; whose second
/// step is cut mid-reply once and continued.
fn eventful_script(id: &str) -> String {
    let script = json!({"id": id, "steps": [
        {"tool_calls": [
            {"name": "list_dir", "args": {"path": "."}, "id": "call-a"},
            {"name": "read_file", "args": {"path": "missing.txt"}, "id": "call-b"}],
         "error": {"status": 429, "times": 1},
         "usage": {"input_tokens": 120, "output_tokens": 30}},
        {"text": words(30), "rate": 0, "cut": {"after": 12, "times": 1},
         "usage": {"input_tokens": 300, "cache_read_tokens": 40, "output_tokens": 45}}
    ]});
    format!("look around\n#mock {script}")
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect()
}

const CONTENT: &[&str] = &[
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
];

/// Runs the eventful chat against a daemon exporting to `receiver`, stops the daemon (which
/// flushes its spans) and checks the trace. Answers the spans.
async fn traced_chat(receiver: &Receiver, telemetry: &str, id: &str) -> Vec<Span> {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let (dir, database) = scratch();
    let mut daemon = Daemon::start(dir.path(), &database, &config(&mock, telemetry));
    let client = Client::new();
    let chat = create_traced(&daemon, &eventful_script(id), Some(&traceparent())).await;
    client.wait_status(&daemon, &chat, "waiting").await;
    assert_eq!(mock.attempts(id, 0), 2, "a retry");
    assert_eq!(mock.attempts(id, 1), 2, "a recovery");
    let usage = client.chat(&daemon, &chat).await["usage"].clone();
    daemon.terminate();
    let spans = receiver.spans();
    eprintln!("{}", render(&spans, SHOWN));

    // One run, the child of the request's span, in the request's trace.
    let runs = named(&spans, "invoke_agent");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    let run = runs[0];
    assert_eq!(run.trace_id, TRACE);
    assert_eq!(run.parent_span_id, CLIENT_SPAN);
    assert_eq!(run.service, "keel");
    assert_eq!(run.attr("gen_ai.conversation.id"), chat.as_str());
    assert!(spans.iter().all(|s| s.trace_id == TRACE));

    // Two steps under the run; model calls and tools under the steps.
    let steps = named(&spans, "keel.step");
    assert_eq!(steps.len(), 2);
    assert!(steps.iter().all(|s| s.parent_span_id == run.span_id));
    let step = |index: i64| {
        *steps
            .iter()
            .find(|s| s.attr("keel.step.index") == index)
            .unwrap()
    };
    let calls_of = |step: &Span| {
        let mut calls: Vec<&Span> = children(&spans, step)
            .into_iter()
            .filter(|s| s.name == "chat mock")
            .collect();
        calls.sort_by_key(|s| s.attr("error.type").is_null());
        calls
    };

    // Step 0: refused with a 429 (an error span with a retry event), then the calls.
    let first = calls_of(step(0));
    assert_eq!(first.len(), 2, "{first:#?}");
    assert_eq!(first[0].attr("error.type"), "rate_limit");
    assert_eq!(first[0].status, 2);
    assert_eq!(first[0].events[0].0, "retry");
    assert_eq!(first[0].events[0].1["keel.retry.attempt"], 2);
    assert_eq!(first[1].attr("gen_ai.operation.name"), "chat");
    assert_eq!(first[1].attr("gen_ai.provider.name"), "local");
    assert_eq!(first[1].attr("gen_ai.request.model"), "mock");
    assert_eq!(first[1].attr("gen_ai.response.model"), "mock");
    assert_eq!(
        first[1].attr("gen_ai.response.finish_reasons"),
        &json!(["tool_calls"])
    );
    let tools: Vec<&Span> = children(&spans, step(0))
        .into_iter()
        .filter(|s| s.name.starts_with("execute_tool"))
        .collect();
    let mut tool_names: Vec<(String, Value, Value)> = tools
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.attr("gen_ai.tool.name").clone(),
                t.attr("gen_ai.tool.call.id").clone(),
            )
        })
        .collect();
    tool_names.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        tool_names,
        [
            (
                "execute_tool list_dir".into(),
                json!("list_dir"),
                json!("call-a")
            ),
            (
                "execute_tool read_file".into(),
                json!("read_file"),
                json!("call-b")
            ),
        ]
    );

    // Step 1: cut mid-reply (a recovery that continues the text), then finished.
    let second = calls_of(step(1));
    assert_eq!(second.len(), 2, "{second:#?}");
    let events: Vec<&str> = second[0].events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(events, ["recovery", "retry"]);
    assert_eq!(second[0].events[0].1["keel.recovery.plan"], "continue_text");
    assert!(
        second[0].attr("gen_ai.usage.input_tokens").is_null(),
        "a cut call reports none"
    );
    assert_eq!(
        second[1].attr("gen_ai.response.finish_reasons"),
        &json!(["stop"])
    );

    // The finished calls' tokens are the chat's stored usage.
    let sum = |key: &str| {
        spans
            .iter()
            .filter_map(|s| s.attr(key).as_i64())
            .sum::<i64>()
    };
    assert_eq!(
        sum("gen_ai.usage.input_tokens"),
        usage["input_tokens"].as_i64().unwrap() + usage["cached_input_tokens"].as_i64().unwrap(),
        "{usage}"
    );
    assert_eq!(sum("gen_ai.usage.input_tokens"), 120 + 340);
    assert_eq!(
        sum("gen_ai.usage.output_tokens"),
        usage["output_tokens"].as_i64().unwrap()
    );
    spans
}

// The receiver keeps serving on a second thread while the test waits for the daemon to
// stop (and flush its spans).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_is_traced_over_grpc_under_the_requests_traceparent_without_content() {
    let receiver = Receiver::grpc().await;
    let telemetry = format!("endpoint = \"{}\"\nprotocol = \"grpc\"", receiver.endpoint);
    let spans = traced_chat(&receiver, &telemetry, "otel-grpc").await;
    for span in &spans {
        for key in CONTENT {
            assert!(span.attr(key).is_null(), "{key} in {span:#?}");
        }
    }
}

// The receiver keeps serving on a second thread while the test waits for the daemon to
// stop (and flush its spans).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_is_traced_over_http_with_content_when_asked() {
    let receiver = Receiver::http().await;
    let telemetry = format!(
        "endpoint = \"{}\"\nprotocol = \"http/protobuf\"\nservice_name = \"keel\"\n\
         capture_content = true",
        receiver.endpoint
    );
    let spans = traced_chat(&receiver, &telemetry, "otel-http").await;
    let tool = named(&spans, "execute_tool list_dir")[0];
    assert_eq!(tool.attr("gen_ai.tool.call.arguments"), r#"{"path":"."}"#);
    assert!(tool.attr("gen_ai.tool.call.result").is_string());
    let finished = spans
        .iter()
        .find(|s| s.attr("gen_ai.response.finish_reasons") == &json!(["stop"]))
        .unwrap();
    assert!(
        finished
            .attr("gen_ai.input.messages")
            .as_str()
            .unwrap()
            .contains("look around"),
        "{finished:#?}"
    );
    assert!(
        finished
            .attr("gen_ai.output.messages")
            .as_str()
            .unwrap()
            .contains("w30")
    );
}

// The receiver keeps serving on a second thread while the test waits for the daemon to
// stop (and flush its spans).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_turns_tracing_on_and_a_run_resumed_after_kill_9_links_to_the_first() {
    let receiver = Receiver::grpc().await;
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let (dir, database) = scratch();
    // No [telemetry] table: the standard variables alone.
    let config = config(&mock, "").replace("[telemetry]\n", "");
    let env = [
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_SERVICE_NAME", "keel-test"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let mut daemon = Daemon::start_with_env(dir.path(), &database, &config, &env);
    let script = json!({"id": "otel-resumed", "steps": [
        {"tool_calls": [{"name": "list_dir", "args": {"path": "."}}]},
        {"text": words(80), "rate": 40}
    ]});
    let chat = create_traced(
        &daemon,
        &format!("go\n#mock {script}"),
        Some(&traceparent()),
    )
    .await;
    // The first step is exported; the second streams when the daemon dies.
    let first_step = eventually(async || {
        named(&receiver.spans(), "keel.step")
            .first()
            .map(|s| (*s).clone())
            .ok_or_else(|| "no step exported yet".to_owned())
    })
    .await;
    let client = Client::new();
    let mut events = client.events(&daemon, &chat, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 5).await;
    daemon.kill();
    drop(events);

    let mut daemon = Daemon::start_with_env(dir.path(), &database, &config, &env);
    client.wait_status(&daemon, &chat, "waiting").await;
    daemon.terminate();
    let spans = receiver.spans();
    eprintln!("{}", render(&spans, SHOWN));
    let runs = named(&spans, "invoke_agent");
    assert_eq!(runs.len(), 1, "the first run never ended: {spans:#?}");
    let resumed = runs[0];
    assert_eq!(resumed.service, "keel-test");
    assert_eq!(resumed.attr("keel.run.resumed"), true);
    assert_eq!(
        resumed.parent_span_id, CLIENT_SPAN,
        "still the request's child"
    );
    // Linked to the first run: the span the first step was a child of.
    assert_eq!(
        resumed.links,
        [(
            first_step.trace_id.clone(),
            first_step.parent_span_id.clone()
        )]
    );
    assert_ne!(first_step.parent_span_id, resumed.span_id);
    let resumed_steps: Vec<&Span> = children(&spans, resumed)
        .into_iter()
        .filter(|s| s.name == "keel.step")
        .collect();
    assert_eq!(resumed_steps.len(), 1);
    let call = children(&spans, resumed_steps[0])
        .into_iter()
        .find(|s| s.name == "chat mock")
        .unwrap();
    assert_eq!(
        call.attr("gen_ai.response.finish_reasons"),
        &json!(["stop"])
    );
}

#[tokio::test]
async fn json_log_lines_name_their_request_chat_and_trace() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let (dir, database) = scratch();
    let config = config(&mock, "").replace("[telemetry]\n", "[log]\nformat = \"json\"\n");
    let env = [("RUST_LOG", "info,keel_server::net=debug")];
    let mut daemon = Daemon::start_with_env(dir.path(), &database, &config, &env);
    let client = Client::new();
    let script = json!({"id": "otel-json", "error": {"status": 429, "times": 1}});
    let chat = create_traced(
        &daemon,
        &format!("hi\n#mock {script}"),
        Some(&traceparent()),
    )
    .await;
    client.wait_status(&daemon, &chat, "waiting").await;
    daemon.terminate();
    let lines: Vec<Value> = daemon
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let answered = lines
        .iter()
        .find(|l| l["message"] == "answered" && l["trace_id"] == TRACE)
        .unwrap_or_else(|| panic!("no answered line: {lines:#?}"));
    assert_eq!(answered["request_id"].as_str().unwrap().len(), 16);
    assert_eq!(answered["status"], 201);
    let retry = lines
        .iter()
        .find(|l| l["message"] == "retrying provider stream")
        .unwrap_or_else(|| panic!("no retry line: {lines:#?}"));
    assert_eq!(retry["chat_id"], chat.as_str());
    assert_eq!(retry["trace_id"], TRACE);
    assert_eq!(retry["level"], "WARN");
    assert!(lines.iter().all(|l| l["timestamp"].is_string()));
}

#[test]
fn an_unusable_telemetry_setting_stops_start_up_naming_it() {
    let (dir, database) = scratch();
    let env = [("OTEL_TRACES_EXPORTER", "zipkin")];
    let refused = Daemon::refused_with_env(dir.path(), &database, "", &env);
    assert!(refused.contains("OTEL_TRACES_EXPORTER"), "{refused}");
    let refused = Daemon::refused(
        dir.path(),
        &database,
        "[telemetry]\nprotocol = \"http/json\"",
    );
    assert!(refused.contains("http/protobuf"), "{refused}");
    let refused = Daemon::refused(dir.path(), &database, "[log]\nformat = \"xml\"");
    assert!(refused.contains("json"), "{refused}");
}
