//! Continuing a reply the user stopped, and retrying a failed run, through the daemon
//! against the rule-enforcing mock on every protocol: the continuation is appended (the
//! stopped reply and it spell the scripted reply exactly once) and a retry answers the
//! failed turn without the user sending it again.

use serde_json::{Value, json};

use crate::harness::*;
use crate::providers::{Fixture, PROTOCOLS};

async fn post(f: &Fixture, id: &str, action: &str) -> (u16, Value) {
    f.client
        .post(&f.daemon.api(&format!("/chats/{id}/{action}")), json!({}))
        .await
}

/// A chat on `protocol` whose reply was stopped after a few words; returns its id and the
/// whole scripted reply.
pub async fn stopped_chat(f: &Fixture, protocol: &str) -> (String, String) {
    let reply = words(120);
    let id = f
        .chat(
            protocol,
            "tell me",
            &json!({"id": format!("stop-{protocol}"), "text": reply, "rate": 40.0}),
        )
        .await;
    let mut events = f.client.events(&f.daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 3).await;
    let (status, body) = post(f, &id, "interrupt").await;
    assert_eq!(status, 202, "{body}");
    f.client.wait_status(&f.daemon, &id, "waiting").await;
    (id, reply)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_appends_the_rest_of_a_stopped_reply_on_every_protocol() {
    let f = Fixture::start("", "").await;
    for protocol in PROTOCOLS {
        let (id, reply) = stopped_chat(&f, protocol).await;
        let (status, chat) = post(&f, &id, "continue").await;
        assert_eq!(status, 202, "{protocol}: {chat}");
        assert_eq!(chat["status"], "running");
        let messages = f.settle(&id).await;
        assert_eq!(messages.len(), 3, "{protocol}: {messages:?}");
        let (stopped, rest) = (&messages[1], &messages[2]);
        assert_eq!(stopped["interrupted"], true);
        assert_eq!(rest["role"], "assistant");
        assert_eq!(rest["interrupted"], false);
        let (stopped, rest) = (text_of(stopped), text_of(rest));
        assert!(!stopped.is_empty() && !rest.is_empty(), "{protocol}");
        assert_eq!(
            format!("{stopped}{rest}"),
            reply,
            "{protocol}: the two read as the scripted reply, every word once"
        );
        // The provider saw the stopped reply as the turn to carry on.
        let request = f.last_request(protocol);
        match protocol {
            "chat" => {
                let sent = request["messages"].as_array().unwrap();
                let [.., assistant, user] = sent.as_slice() else {
                    panic!("{request}")
                };
                assert_eq!(assistant["role"], "assistant");
                assert_eq!(assistant["content"].as_str(), Some(stopped.as_str()));
                assert_eq!(user["role"], "user", "continued by instruction");
            }
            "anthropic" => {
                let last = request["messages"].as_array().unwrap().last().unwrap();
                assert_eq!(last["role"], "assistant", "native prefill: {request}");
            }
            _ => {}
        }
        // Continuing again: the chat now ends in a whole reply.
        let (status, body) = post(&f, &id, "continue").await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "conflict");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_and_retry_refuse_chats_they_do_not_apply_to() {
    let f = Fixture::start("", "").await;
    let id = f.chat("chat", "hi", &json!({"text": "all done"})).await;
    f.settle(&id).await;
    for action in ["continue", "retry"] {
        let (status, body) = post(&f, &id, action).await;
        assert_eq!(status, 409, "{action}: {body}");
        assert_eq!(body["error"]["code"], "conflict");
    }
    let (status, _) = post(&f, "8d7c9e2a-0000-4000-8000-000000000000", "retry").await;
    assert_eq!(status, 404);
    // A running chat can be neither continued nor retried.
    let id = f
        .chat("chat", "hi", &json!({"text": words(200), "rate": 20.0}))
        .await;
    for action in ["continue", "retry"] {
        let (status, body) = post(&f, &id, action).await;
        assert_eq!(status, 409, "{action}: {body}");
    }
    post(&f, &id, "interrupt").await;
    f.ended(&id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_answers_the_failed_turn_again_on_every_protocol() {
    let f = Fixture::start("retry_max_attempts = 1", "").await;
    for protocol in PROTOCOLS {
        let script = json!({
            "id": format!("retry-{protocol}"), "text": "second time lucky",
            "error": {"status": 400, "message": "not this time", "times": 1}
        });
        let id = f.chat(protocol, "hi", &script).await;
        let error = f.failure(&id).await;
        assert_eq!(error["kind"], "invalid_request", "{protocol}: {error}");
        let (status, chat) = post(&f, &id, "retry").await;
        assert_eq!(status, 202, "{protocol}: {chat}");
        assert_eq!(chat["status"], "running");
        assert_eq!(chat["last_error"], Value::Null, "the error is cleared");
        let messages = f.settle(&id).await;
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant"], "{protocol}: nothing retyped");
        assert_eq!(text_of(&messages[1]), "second time lucky");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_starts_the_stopped_reply_over_fails_and_adds_nothing() {
    let f = Fixture::start("", "").await;
    let reply = "The leaves fall slowly, adding to the forest floor a carpet of gold and red.";
    // Like a small model asked to continue: it starts the reply over.
    let script =
        json!({"id": "restarter", "text": reply, "rate": 10.0, "restart_on_continue": true});
    let id = f.chat("chat", "go", &script).await;
    let mut events = f.client.events(&f.daemon, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut events, 3).await;
    post(&f, &id, "interrupt").await;
    f.client.wait_status(&f.daemon, &id, "waiting").await;
    let (status, _) = post(&f, &id, "continue").await;
    assert_eq!(status, 202);
    let error = f.failure(&id).await;
    assert_eq!(error["kind"], "invalid_request");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("started it over"),
        "{error}"
    );
    let messages = f.client.messages(&f.daemon, &id).await;
    assert_eq!(messages.len(), 2, "nothing said twice: {messages:?}");
    assert_eq!(messages[1]["interrupted"], true);
    // Still the stopped reply at the end: it can be continued (or retried) again.
    let (status, _) = post(&f, &id, "retry").await;
    assert_eq!(status, 202);
    f.failure(&id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_cut_by_kill_9_resumes_as_one_continuation() {
    let mut f = Fixture::start("", "").await;
    for protocol in ["chat", "anthropic"] {
        let (id, reply) = stopped_chat(&f, protocol).await;
        let mut events = f.client.events(&f.daemon, &id, None).await;
        let mut transcript = Transcript::default();
        // Past the stopped reply already committed: wait for the continuation's first words.
        transcript.follow_until(&mut events, "waiting").await;
        let (status, _) = post(&f, &id, "continue").await;
        assert_eq!(status, 202);
        transcript.follow_parts(&mut events, 3).await;
        drop(events);
        f.kill_and_restart();
        let messages = f.settle(&id).await;
        assert_eq!(messages.len(), 3, "{protocol}: {messages:?}");
        assert_eq!(
            format!("{}{}", text_of(&messages[1]), text_of(&messages[2])),
            reply,
            "{protocol}: the resumed continuation neither repeats nor loses a word"
        );
        if protocol == "chat" {
            // The resumed call continues one assistant turn: the stopped reply, with what
            // the cut continuation had logged before the kill (if anything).
            let request = f.last_request("chat");
            let sent = request["messages"].as_array().unwrap();
            let [.., assistant, _instruction] = sent.as_slice() else {
                panic!("{request}")
            };
            let stopped = text_of(&messages[1]);
            let prefix = assistant["content"].as_str().unwrap();
            assert!(prefix.starts_with(&stopped), "{prefix:?}");
            assert_ne!(
                sent[sent.len() - 3]["role"],
                "assistant",
                "one assistant turn"
            );
        }
    }
}
