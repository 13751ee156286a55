//! The Gemini endpoint: streamed and whole replies, signed calls, and its rules.

use keel_mock::MockServer;
use serde_json::{Value, json};

use crate::common::{client, read_events, server};

async fn gemini(server: &MockServer, target: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("http://{}/v1beta/models/{target}", server.addr()))
        .json(body)
        .send()
        .await
        .unwrap()
}

fn ask(text: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": text}]}],
           "generationConfig": {"thinkingConfig": {"includeThoughts": true}}})
}

#[tokio::test]
async fn a_streamed_reply_has_thoughts_text_and_a_final_chunk_with_usage() {
    let server = server().await;
    let script = json!({"reasoning": "hmm", "text": "Hello there", "usage": {"input_tokens": 9, "cache_read_tokens": 3}});
    let text = format!("hi\n#mock {script}");
    let response = gemini(
        &server,
        "gemini-2.5-flash:streamGenerateContent?alt=sse",
        &ask(&text),
    )
    .await;
    let chunks: Vec<Value> = read_events(response)
        .await
        .iter()
        .map(|e| e.json())
        .collect();
    let parts: Vec<&Value> = chunks
        .iter()
        .flat_map(|c| {
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .collect();
    assert_eq!(parts[0], &json!({"text": "hmm", "thought": true}));
    let said: String = parts
        .iter()
        .filter(|p| p.get("thought").is_none())
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(said, "Hello there");
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["promptTokenCount"], 12);
    assert_eq!(last["usageMetadata"]["cachedContentTokenCount"], 3);
}

#[tokio::test]
async fn gemini_3_signs_its_first_call_and_refuses_it_back_unsigned() {
    let server = server().await;
    let script = json!({"tool_calls": [{"name": "read_file", "args": {"path": "a"}},
                                       {"name": "read_file", "args": {"path": "b"}}]});
    let mut request = ask(&format!("read\n#mock {script}"));
    let response = gemini(&server, "gemini-3-pro-preview:generateContent", &request).await;
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    let parts = reply["candidates"][0]["content"]["parts"]
        .as_array()
        .unwrap()
        .clone();
    assert!(parts[0]["thoughtSignature"].is_string(), "{reply}");
    assert!(parts[1].get("thoughtSignature").is_none(), "{reply}");
    let id = |i: usize| parts[i]["functionCall"]["id"].clone();
    let results = json!({"role": "user", "parts": [
        {"functionResponse": {"id": id(0), "name": "read_file", "response": {"output": "x"}}},
        {"functionResponse": {"id": id(1), "name": "read_file", "response": {"output": "y"}}},
    ]});
    let contents = request["contents"].as_array_mut().unwrap();
    contents.push(json!({"role": "model", "parts": parts}));
    contents.push(results);
    let target = "gemini-3-pro-preview:streamGenerateContent?alt=sse";
    assert_eq!(gemini(&server, target, &request).await.status(), 200);
    request["contents"][1]["parts"][0]
        .as_object_mut()
        .unwrap()
        .remove("thoughtSignature");
    let refused = gemini(&server, target, &request).await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("thought_signature"),
        "{body}"
    );
}

#[tokio::test]
async fn errors_come_in_googles_envelope_and_the_model_names_its_limit() {
    let server = server().await;
    let script = json!({"error": {"status": 429}});
    let response = gemini(
        &server,
        "gemini-2.5-flash:streamGenerateContent?alt=sse",
        &ask(&format!("hi\n#mock {script}")),
    )
    .await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
    let model: Value = client()
        .get(format!(
            "http://{}/v1beta/models/gemini-2.5-flash",
            server.addr()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(model["name"], "models/gemini-2.5-flash");
    assert!(model["inputTokenLimit"].as_u64().unwrap() > 0);
}
