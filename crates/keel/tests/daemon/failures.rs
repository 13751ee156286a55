//! A failed run's error says where it came from: the provider's name and the address of
//! the request (never its query), in the chat, in its live `status` event and in the
//! `retry` events of the attempts that failed mid-stream before it.

use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_404_names_the_provider_and_the_address() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A base URL with a wrong path: the server answers 404 with no body.
    let config = format!(
        "[[providers]]\nname = \"misrouted\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/nope/v1\"\n\
         [[models]]\nid = \"m\"\nprovider = \"misrouted\"\nmodel = \"mock\"\ndefault = true\n",
        mock.addr()
    );
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), &config);
    let client = Client::new();
    let id = client.create_chat(&daemon, json!({"text": "hi"})).await;
    let mut events = client.events(&daemon, &id, None).await;
    let mut transcript = Transcript::default();
    let mut status_error = serde_json::Value::Null;
    while let Some(event) = events.next().await {
        transcript.apply(&event);
        if event.event == "status" && event.data["status"] == "error" {
            status_error = event.data["last_error"].clone();
            break;
        }
    }
    let expected_url = format!("http://{}/nope/v1/chat/completions", mock.addr());
    let chat = client.chat(&daemon, &id).await;
    let error = &chat["last_error"];
    assert_eq!(error["kind"], "invalid_request", "{error}");
    assert_eq!(error["provider"], "misrouted", "{error}");
    assert_eq!(error["url"], expected_url.as_str(), "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("404"),
        "{error}"
    );
    assert_eq!(&status_error, error, "the live event says the same");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_500_names_the_provider_and_the_address_live_and_when_it_fails() {
    let (mock, _dir, daemon) = flaky_daemon("retry_initial_delay_ms = 10").await;
    let client = Client::new();
    let script = json!({"id": "always-500", "error": {"status": 500, "message": "upstream exploded", "times": 10}});
    // A `retry` is state: a stream that connects after the run failed never sees it.
    let (id, mut events, _) = client
        .watched_turn(&daemon, &format!("hi\n#mock {script}"))
        .await;
    let mut retries = Vec::new();
    let mut status_error = serde_json::Value::Null;
    while let Some(event) = events.next().await {
        match (event.event.as_str(), &event.data["status"]) {
            ("retry", _) => retries.push(event.data),
            ("status", status) if status == "error" => {
                status_error = event.data["last_error"].clone();
                break;
            }
            _ => {}
        }
    }
    let expected_url = format!("http://{}/v1/chat/completions", mock.addr());
    assert_eq!(retries.len(), 1, "{retries:?}");
    let retry = &retries[0];
    assert_eq!(retry["kind"], "server", "{retry}");
    assert_eq!(retry["provider"], "flaky", "{retry}");
    assert_eq!(retry["url"], expected_url.as_str(), "{retry}");
    assert!(
        retry["message"]
            .as_str()
            .unwrap()
            .contains("upstream exploded"),
        "{retry}"
    );
    let stored = &client.chat(&daemon, &id).await["last_error"];
    assert_eq!(&status_error, stored, "the live status says what is stored");
    assert_eq!(stored["provider"], retry["provider"], "{stored}");
    assert_eq!(stored["url"], retry["url"], "{stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_connects_while_a_retry_waits_is_told_of_it() {
    // The retry waits far longer than the test: it is the chat's state throughout.
    let (_mock, _dir, daemon) =
        flaky_daemon("retry_initial_delay_ms = 600000\nretry_max_delay_ms = 600000").await;
    let client = Client::new();
    let script = json!({"id": "once-500", "error": {"status": 500, "message": "upstream exploded", "times": 1}});
    let (id, mut first, _) = client
        .watched_turn(&daemon, &format!("hi\n#mock {script}"))
        .await;
    let seen = loop {
        let event = first.next().await.expect("the stream stays open");
        if event.event == "retry" {
            break event;
        }
    };

    let mut second = client.events(&daemon, &id, Some(&seen.id)).await;
    let mut resent = Vec::new();
    while resent.len() < 2 {
        let event = second.next().await.expect("the stream stays open");
        resent.push(event);
    }
    assert_eq!(resent[0].event, "status", "{resent:?}");
    assert_eq!(resent[0].data["status"], "running");
    assert_eq!(resent[1].event, "retry", "the state is re-sent on connect");
    assert_eq!(resent[1].data, seen.data);
    assert_eq!(resent[1].id, seen.id, "state carries the current position");

    let (status, _) = client.interrupt(&daemon, &id).await;
    assert_eq!(status, 202);
    let mut rest = Transcript::default();
    rest.follow_until(&mut second, "waiting").await;
    assert_eq!(
        rest.retries, 0,
        "the retry is sent once, although it is both live and stored"
    );
}

/// A daemon whose default model `m` is served by the mock as provider `flaky`, two attempts
/// per step, with `retry` settings added.
async fn flaky_daemon(retry: &str) -> (keel_mock::MockServer, tempfile::TempDir, Daemon) {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "retry_max_attempts = 2\n{retry}\n\
         [[providers]]\nname = \"flaky\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\
         [[models]]\nid = \"m\"\nprovider = \"flaky\"\nmodel = \"mock\"\ndefault = true\n",
        mock.addr()
    );
    let daemon = Daemon::start(dir.path(), &sqlite(dir.path()), &config);
    (mock, dir, daemon)
}
