//! One user's resources do not exist for another, on every route of the API document: the
//! walk is generated from `/api/v1/openapi.json`, so a route added later is walked too. A
//! route naming a resource refuses the other user; every other route (lists, creation, the
//! chat-list feed, the public operations routes) answers him with nothing of the first user.

use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};

use crate::confinement::add_user;
use crate::harness::*;

/// Answers a request as the holder of `token`; the raw body, so a leak in any form shows.
async fn call(token: &str, method: Method, url: &str, body: Option<&Value>) -> (u16, String) {
    let mut request = http_client()
        .request(method.clone(), url)
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    let answered = async {
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };
    tokio::time::timeout(WAIT, answered)
        .await
        .unwrap_or_else(|_| panic!("{method} {url} did not answer"))
}

/// Fails when `answer` holds any of `marks` (Alice's secret text and ids).
fn assert_leaks_nothing(what: &str, answer: &str, marks: &[&str]) {
    for mark in marks {
        assert!(!answer.contains(mark), "{what} leaked {mark}: {answer}");
    }
}

/// Routes anyone may call, so ownership does not apply; their bodies are still checked.
const PUBLIC: [(&str, &str); 4] = [
    ("/healthz", "liveness for load balancers, no user data"),
    (
        "/readyz",
        "readiness for load balancers, dependency states only",
    ),
    (
        "/metrics",
        "process-wide counters for scraping, no per-chat labels",
    ),
    (
        "/api/v1/openapi.json",
        "the API's description, the same for every caller",
    ),
];

/// The raw body `token` reads from the live stream at `url` until what `during` returns
/// shows in it, within the harness's deadline. `during` runs once the stream is open.
async fn read_stream_until(token: &str, url: &str, during: impl AsyncFnOnce() -> String) -> String {
    let response = http_client()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "GET {url}");
    let mut stream = response.bytes_stream();
    let awaited = during().await;
    let mut read = String::new();
    let follow = async {
        while !read.contains(&awaited) {
            let chunk = stream.next().await.unwrap_or_else(|| panic!("{url} ended"));
            read.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    };
    tokio::time::timeout(WAIT, follow)
        .await
        .unwrap_or_else(|_| panic!("GET {url} never showed {awaited}"));
    read
}

/// The example the document gives for the schema `reference` points at.
fn example(document: &Value, schema: &Value) -> Value {
    let name = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .unwrap_or_else(|| panic!("a request body without a named schema: {schema}"));
    let example = &document["components"]["schemas"][name]["example"];
    assert!(
        !example.is_null(),
        "the schema {name} has no example to send"
    );
    example.clone()
}

/// What a route answers for a resource that does not exist for the caller: `404`, except
/// where `docs/compat.md` documents another answer for an unknown id (an AI SDK chat id is
/// the front end's, named per user). The body when it is fixed.
fn documented_refusal(method: &Method, path: &str) -> (u16, Option<&'static str>) {
    match (method.as_str(), path) {
        ("GET", "/api/v1/ai-sdk/chat/{id}/stream") => (204, Some("")),
        ("GET", "/api/v1/ai-sdk/chat/{id}/messages") => (200, Some("[]")),
        _ => (404, None),
    }
}

/// Alice's resources, one of each kind a path parameter can name.
struct Owned {
    chat: String,
    message: i64,
    response: String,
    ui_chat: String,
}

impl Owned {
    /// `path` with its parameters naming Alice's resources.
    fn fill(&self, path: &str) -> String {
        let id = if path.contains("/responses/") {
            &self.response
        } else if path.contains("/ai-sdk/") {
            &self.ui_chat
        } else {
            &self.chat
        };
        path.replace("{id}", id)
            .replace("{message_id}", &self.message.to_string())
            // No entry of hers is queued; the chat is checked first, and it is not bob's.
            .replace("{queue_id}", "1")
    }
}

#[tokio::test]
async fn every_route_of_the_api_document_shows_another_user_nothing_of_the_first() {
    let (dir, database) = scratch();
    let alice = add_user(dir.path(), &database, "alice");
    let bob = add_user(dir.path(), &database, "bob");
    let daemon = Daemon::start(dir.path(), &database, "");

    // Alice's chat, Responses object and AI SDK chat, each holding a secret.
    // Unique to this run, so no other text can hold it by chance.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let secret = &format!("alice-secret-{nanos:x}");
    let client = Client::with_token(&alice);
    let chat = client
        .create_chat(
            &daemon,
            json!({"text": scripted(secret, 0.0), "title": secret}),
        )
        .await;
    client.wait_status(&daemon, &chat, "waiting").await;
    let messages = client.messages(&daemon, &chat).await;
    let message = messages[0]["id"].as_i64().unwrap();
    let responses = format!("{}/v1/responses", daemon.url);
    let (status, created) = call(
        &alice,
        Method::POST,
        &responses,
        Some(&json!({"model": "demo", "input": scripted(secret, 0.0)})),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    let response = created["id"].as_str().unwrap().to_owned();
    let ui_chat = format!("alice-ui-chat-{nanos:x}");
    let ui = json!({"id": ui_chat, "trigger": "submit-message", "messageId": null,
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": scripted(secret, 0.0)}]}]});
    let (status, streamed) =
        call(&alice, Method::POST, &daemon.api("/ai-sdk/chat"), Some(&ui)).await;
    assert_eq!(status, 200, "{streamed}");
    let owned = Owned {
        chat,
        message,
        response,
        ui_chat,
    };
    let marks = [
        secret.as_str(),
        &owned.chat,
        &owned.response,
        &owned.ui_chat,
    ];
    // What Alice sees of her own, before and after Bob's walk.
    let own_views = [
        daemon.api(&format!("/chats/{}", owned.chat)),
        daemon.api(&format!("/chats/{}/messages", owned.chat)),
        format!("{responses}/{}", owned.response),
        daemon.api(&format!("/ai-sdk/chat/{}/messages", owned.ui_chat)),
    ];
    let mut before = Vec::new();
    for url in &own_views {
        let (status, body) = call(&alice, Method::GET, url, None).await;
        assert_eq!(status, 200, "alice reads {url}: {body}");
        assert!(
            body.contains(secret),
            "{url} does not hold the secret: {body}"
        );
        before.push(body);
    }

    let (status, document) = call(&bob, Method::GET, &daemon.api("/openapi.json"), None).await;
    assert_eq!(status, 200);
    let document: Value = serde_json::from_str(&document).unwrap();
    let mut walked = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Ok(method) = method.to_uppercase().parse::<Method>() else {
                continue;
            };
            if ![
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
            ]
            .contains(&method)
            {
                continue;
            }
            let body = operation["requestBody"]["content"]["application/json"]["schema"]
                .as_object()
                .map(|schema| example(&document, &Value::Object(schema.clone())));
            walked.push(format!("{method} {path}"));
            if !path.contains('{') {
                let url = format!("{}{path}", daemon.url);
                let streams = operation["responses"]["200"]["content"]
                    .get("text/event-stream")
                    .is_some();
                let answer = if method == Method::GET && streams {
                    // A live stream never ends: read it while Alice and Bob each make a
                    // chat, until Bob's shows; Alice's, made first, must not.
                    let mut hers = String::new();
                    let read = read_stream_until(&bob, &url, async || {
                        let title = json!({"text": scripted(secret, 0.0), "title": secret});
                        hers = client.create_chat(&daemon, title).await;
                        let bobs = Client::with_token(&bob);
                        bobs.create_chat(&daemon, json!({"text": "bob's own"}))
                            .await
                    })
                    .await;
                    assert!(
                        !read.contains(&hers),
                        "{method} {url} leaked {hers}: {read}"
                    );
                    read
                } else {
                    // A list shows Bob's own; a creation makes Bob's own; a public route
                    // is the same for all.
                    let (status, answer) = call(&bob, method.clone(), &url, body.as_ref()).await;
                    assert!(
                        (200..300).contains(&status),
                        "{method} {url} as another user: {status} {answer}"
                    );
                    answer
                };
                assert_leaks_nothing(&format!("{method} {url}"), &answer, &marks);
                continue;
            }
            let url = format!("{}{}", daemon.url, owned.fill(path));
            let (status, answer) = call(&bob, method.clone(), &url, body.as_ref()).await;
            let refusal = documented_refusal(&method, path);
            assert_eq!(
                (status, answer.as_str()),
                (refusal.0, refusal.1.unwrap_or(answer.as_str())),
                "{method} {url} as another user"
            );
            // A refusal may name the id Bob sent, which tells him nothing he did not know.
            let unsent: Vec<&str> = marks.into_iter().filter(|m| !url.contains(m)).collect();
            assert_leaks_nothing(&format!("{method} {url}"), &answer, &unsent);
        }
    }
    // Native and compatible routes alike were walked.
    for expected in [
        "DELETE /api/v1/chats/{id}",
        "GET /api/v1/chats/{id}/events",
        "PUT /api/v1/chats/{id}/messages/{message_id}",
        "POST /api/v1/chats/{id}/queue/{queue_id}/promote",
        "GET /api/v1/ai-sdk/chat/{id}/stream",
        "GET /v1/responses/{id}",
        "POST /v1/responses/{id}/cancel",
        "GET /api/v1/chats",
        "GET /api/v1/events",
        "POST /api/v1/chats",
        "POST /api/v1/ai-sdk/chat",
        "POST /v1/responses",
        "GET /api/v1/models",
    ]
    .map(String::from)
    .into_iter()
    .chain(PUBLIC.map(|(path, _)| format!("GET {path}")))
    {
        assert!(
            walked.contains(&expected),
            "{expected} not walked: {walked:?}"
        );
    }

    // Bob's creations made chats of his own, and his list shows only those.
    let (status, list) = call(&bob, Method::GET, &daemon.api("/chats"), None).await;
    assert_eq!(status, 200, "{list}");
    let list: Value = serde_json::from_str(&list).unwrap();
    assert!(
        list["chats"]
            .as_array()
            .is_some_and(|chats| chats.len() >= 2),
        "bob's creations made no chats of his: {list}"
    );
    assert_leaks_nothing("bob's chat list", &list.to_string(), &marks);

    // Nothing of Alice's changed.
    for (url, before) in own_views.iter().zip(before) {
        let (status, body) = call(&alice, Method::GET, url, None).await;
        assert_eq!(status, 200, "{url}: {body}");
        assert_eq!(body, before, "{url} changed");
    }
}
