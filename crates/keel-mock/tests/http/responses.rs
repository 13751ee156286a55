//! OpenAI Responses.

use keel_mock::{Script, Step};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn text_reasoning_and_function_call_events() {
    let server = server().await;
    let script = Script::new(
        Step::text("On it.")
            .reasoning("Plan: read.")
            .call("read_file", json!({"path": "README.md"})),
    );
    let events =
        read_events(post(&server, "/responses", &responses(&script.message("go"))).await).await;
    let sequence: Vec<u64> = events
        .iter()
        .map(|e| e.json()["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>());
    assert!(
        events
            .iter()
            .all(|e| e.event.as_deref() == e.json()["type"].as_str())
    );

    let created = &named(&events, "response.created")[0]["response"];
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"));
    assert_eq!(created["status"], "in_progress");

    let added = named(&events, "response.output_item.added");
    let types: Vec<&str> = added
        .iter()
        .map(|a| a["item"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["reasoning", "message", "function_call"]);
    assert_eq!(named(&events, "response.content_part.added").len(), 1);

    let joined = |name: &str| -> String {
        named(&events, name)
            .iter()
            .map(|d| d["delta"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        joined("response.reasoning_summary_text.delta"),
        "Plan: read."
    );
    assert_eq!(joined("response.output_text.delta"), "On it.");
    assert_eq!(
        named(&events, "response.output_text.done")[0]["text"],
        "On it."
    );
    let args = joined("response.function_call_arguments.delta");
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"path": "README.md"})
    );
    assert_eq!(
        named(&events, "response.function_call_arguments.done")[0]["arguments"],
        args
    );
    assert_eq!(named(&events, "response.output_item.done").len(), 3);

    let completed = &named(&events, "response.completed")[0]["response"];
    assert_eq!(completed["id"], id);
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"].as_array().unwrap().len(), 3);
    assert!(completed["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        completed["usage"]["output_tokens_details"]["reasoning_tokens"],
        2
    );
}

#[tokio::test]
async fn previous_response_id_continues_the_conversation() {
    let server = server().await;
    let script = Script::new(Step::tool_call("list_dir", json!({}))).then(Step::text("Listed."));
    let first =
        read_events(post(&server, "/responses", &responses(&script.message("ls"))).await).await;
    let response = &named(&first, "response.completed")[0]["response"];
    let call_id = response["output"][0]["call_id"].as_str().unwrap();

    let body = json!({"model": "mock", "stream": true, "previous_response_id": response["id"],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "a.txt"}]});
    let second = read_events(post(&server, "/responses", &body).await).await;
    let completed = &named(&second, "response.completed")[0]["response"];
    assert_eq!(completed["output"][0]["content"][0]["text"], "Listed.");
    assert_eq!(completed["previous_response_id"], response["id"]);
    assert_ne!(completed["id"], response["id"]);
}

#[tokio::test]
async fn unknown_previous_response_id_is_a_documented_400() {
    let server = server().await;
    let body = json!({"model": "mock", "previous_response_id": "resp_nope", "input": "hi"});
    let response = post(&server, "/responses", &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        error["error"]["message"],
        "Previous response with id 'resp_nope' not found."
    );
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["param"], "previous_response_id");
    assert_eq!(error["error"]["code"], "previous_response_not_found");
}

#[tokio::test]
async fn unstored_responses_cannot_be_continued() {
    let server = server().await;
    let mut body = responses("hi");
    body["store"] = json!(false);
    let first = read_events(post(&server, "/responses", &body).await).await;
    let id = named(&first, "response.completed")[0]["response"]["id"].clone();
    let next = json!({"model": "mock", "previous_response_id": id, "input": "again"});
    assert_eq!(post(&server, "/responses", &next).await.status(), 400);
}

#[tokio::test]
async fn non_streaming_response() {
    let server = server().await;
    let mut body = responses("Hello you");
    body["stream"] = json!(false);
    let response = post(&server, "/responses", &body).await;
    assert_eq!(response.status(), 200);
    let object: Value = response.json().await.unwrap();
    assert_eq!(object["object"], "response");
    assert_eq!(object["status"], "completed");
    assert_eq!(object["output"][0]["content"][0]["text"], "Hello you");
}

#[tokio::test]
async fn a_provider_run_call_is_a_web_search_call_item_with_no_argument_events() {
    let server = server().await;
    let mut step = Step::text("Searching.").call("web_search", json!({"query": "keel"}));
    step.tool_calls[0].server = true;
    let events = read_events(
        post(
            &server,
            "/responses",
            &responses(&Script::new(step).message("go")),
        )
        .await,
    )
    .await;
    let added = named(&events, "response.output_item.added");
    let types: Vec<&str> = added
        .iter()
        .map(|a| a["item"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["message", "web_search_call"]);
    assert_eq!(added[1]["item"]["status"], "in_progress");
    assert!(named(&events, "response.function_call_arguments.delta").is_empty());
    let done = named(&events, "response.output_item.done");
    let search = &done.last().unwrap()["item"];
    assert_eq!(
        (&search["status"], &search["action"]),
        (
            &json!("completed"),
            &json!({"type": "search", "query": "keel"})
        )
    );
}
