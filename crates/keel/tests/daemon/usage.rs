//! Usage, cost and budgets through the running daemon: what the provider reported is what
//! `GET /usage` and `GET /chats/{id}` sum, once per committed step however many attempts it
//! took; a used-up budget refuses new runs and stops a run between steps.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::*;

/// The figures every scripted step reports, in the mock's neutral sense.
const REPORTED: (u64, u64, u64, u64) = (1_000, 200, 50, 10);

/// One step's cost at [`PRICE`]: 1000 × 2.5 + 200 × 1.25 + 40 × 10 + 10 × 20 dollars per
/// million tokens.
const STEP_COST: f64 = 0.003_35;

const PRICE: &str = "price = { input = 2.5, cached_input = 1.25, output = 10, reasoning = 20 }";

fn usage_script(id: &str, extra: Value) -> String {
    let (input, cached, output, reasoning) = REPORTED;
    let mut script = json!({
        "id": id,
        "usage": {"input_tokens": input, "cache_read_tokens": cached,
                  "output_tokens": output, "reasoning_tokens": reasoning},
    });
    for (key, value) in extra.as_object().unwrap() {
        script[key] = value.clone();
    }
    format!("go\n#mock {script}")
}

fn priced_config(mock: &keel_mock::MockServer) -> String {
    format!(
        "retry_initial_delay_ms = 10\nretry_max_delay_ms = 50\n\
         [[providers]]\nname = \"local\"\nkind = \"openai-chat\"\nbase_url = \"{}\"\n\
         [[models]]\nid = \"priced\"\nprovider = \"local\"\nmodel = \"mock\"\ndefault = true\n\
         {PRICE}\n",
        mock.base_url()
    )
}

/// Asserts `usage` holds `steps` steps of [`REPORTED`] at [`STEP_COST`].
fn assert_steps(usage: &Value, steps: u64) {
    let (input, cached, output, reasoning) = REPORTED;
    assert_eq!(usage["input_tokens"], input * steps, "{usage}");
    assert_eq!(usage["cached_input_tokens"], cached * steps, "{usage}");
    assert_eq!(usage["output_tokens"], output * steps, "{usage}");
    assert_eq!(usage["reasoning_tokens"], reasoning * steps, "{usage}");
    let cost = usage["cost"].as_f64().unwrap();
    assert!((cost - STEP_COST * steps as f64).abs() < 1e-12, "{usage}");
}

#[tokio::test]
async fn usage_sums_equal_the_reported_usage_through_a_retry_a_recovery_and_a_resume() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let (dir, database) = scratch();
    let config = priced_config(&mock);
    let mut daemon = Daemon::start(dir.path(), &database, &config);
    let client = Client::new();

    // Refused once before any content, then cut mid-reply and continued: one step.
    let flaky = usage_script(
        "usage-flaky",
        json!({"text": words(30), "rate": 0, "error": {"status": 503, "times": 1},
               "cut": {"after": 12, "times": 2}}),
    );
    let first = client.create_chat(&daemon, json!({"text": flaky})).await;
    client.wait_status(&daemon, &first, "waiting").await;
    assert_eq!(mock.attempts("usage-flaky", 0), 3, "a retry and a recovery");
    client
        .send_message(
            &daemon,
            &first,
            json!({"text": usage_script("usage-plain", json!({}))}),
        )
        .await;
    client.wait_status(&daemon, &first, "waiting").await;

    // Killed mid-reply and resumed by the next daemon: one step.
    let slow = usage_script("usage-resumed", json!({"text": words(80), "rate": 40}));
    let (second, mut events, mut transcript) =
        client.watched_chat(&daemon, json!({"text": slow})).await;
    transcript.follow_parts(&mut events, 10).await;
    daemon.kill();
    drop(events);
    let daemon = Daemon::start(dir.path(), &database, &config);
    client.wait_status(&daemon, &second, "waiting").await;
    assert!(
        mock.attempts("usage-resumed", 0) >= 2,
        "the reply was resumed"
    );
    assert_eq!(
        assistant_texts(&client.messages(&daemon, &second).await).len(),
        1
    );

    assert_steps(&client.chat(&daemon, &first).await["usage"], 2);
    assert_steps(&client.chat(&daemon, &second).await["usage"], 1);
    let (status, all) = client.get(&daemon.api("/usage")).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["groups"].as_array().unwrap().len(), 1, "{all}");
    assert_steps(&all["groups"][0], 3);
    assert_eq!(all["groups"][0]["key"], json!({}));

    let (_, by_chat) = client
        .get(&daemon.api("/usage?group_by=chat&group_by=model"))
        .await;
    let groups = by_chat["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{by_chat}");
    for group in groups {
        assert_eq!(group["key"]["model"], "priced");
        let steps = if group["key"]["chat"] == first.as_str() {
            2
        } else {
            1
        };
        assert_steps(group, steps);
    }

    // Metrics count only what this process committed: the resumed step.
    let metrics = daemon.metrics().await;
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    let input = value("keel_tokens_total{model=\"priced\",kind=\"input\"}");
    assert_eq!(input, REPORTED.0 as f64);
    let cost = value("keel_cost_usd_total{model=\"priced\"}");
    assert!((cost - STEP_COST).abs() < 1e-12, "{cost}");
}

#[tokio::test]
async fn usage_is_grouped_by_day_within_a_range_and_bad_queries_are_refused() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client
        .create_chat(
            &daemon,
            json!({"text": usage_script("usage-day", json!({}))}),
        )
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let created = client.chat(&daemon, &id).await["created_at"].clone();
    let today = &created.as_str().unwrap()[..10];

    let (_, by_day) = client.get(&daemon.api("/usage?group_by=day")).await;
    assert_eq!(
        by_day["groups"][0]["key"],
        json!({"day": today}),
        "{by_day}"
    );
    assert_eq!(by_day["groups"][0]["input_tokens"], REPORTED.0);
    // The demo model has no price: tokens without a cost.
    assert_eq!(by_day["groups"][0]["cost"], Value::Null);

    let (_, future) = client
        .get(&daemon.api("/usage?from=2999-01-01T00:00:00Z"))
        .await;
    assert_eq!(future["groups"], json!([]), "{future}");
    let (_, past) = client
        .get(&daemon.api("/usage?to=2000-01-01T00:00:00%2B02:00"))
        .await;
    assert_eq!(past["groups"], json!([]), "{past}");
    let (_, around) = client
        .get(&daemon.api("/usage?group_by=user&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z"))
        .await;
    assert_eq!(around["groups"][0]["output_tokens"], REPORTED.2, "{around}");
    assert!(around["groups"][0]["key"]["user"].is_string(), "{around}");

    for bad in [
        "group_by=week",
        "from=yesterday",
        "to=2026-13-01T00:00:00Z",
        "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z",
    ] {
        let (status, body) = client.get(&daemon.api(&format!("/usage?{bad}"))).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request");
    }
}

/// Adds a user to the database and answers its token.
fn add_user(dir: &Path, database: &str, name: &str) -> String {
    let output = keel_ok(dir, &["users", "add", name, "--database", database]);
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Gives alice a budget of 1000 tokens `per` day or month, through `keel users budget`.
fn limit_alice(dir: &tempfile::TempDir, database: &str, per: &str) {
    let args = ["users", "budget", "alice", "--tokens", "1000", "--per", per];
    keel_ok(dir.path(), &[&args[..], &["--database", database]].concat());
}

/// Runs `keel ARGS` and checks it succeeded.
fn keel_ok(dir: &Path, args: &[&str]) -> std::process::Output {
    let output = keel(dir, args, &[]);
    assert!(output.status.success(), "keel {args:?}: {output:?}");
    output
}

/// A reply that reports 1100 tokens, past a budget of 1000 a day.
fn costly(text: &str) -> String {
    format!(
        "{text}\n#mock {}",
        json!({"text": text, "usage": {"input_tokens": 1000, "output_tokens": 100}})
    )
}

#[tokio::test]
async fn a_used_up_budget_refuses_every_door_and_stores_nothing() {
    let (dir, database) = scratch();
    let alice = add_user(dir.path(), &database, "alice");
    let bob = add_user(dir.path(), &database, "bob");
    limit_alice(&dir, &database, "day");
    let listed = keel_ok(dir.path(), &["users", "list", "--database", &database]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("budget: 1000 tokens per day"),
        "{listed:?}"
    );
    let daemon = Daemon::start(dir.path(), &database, "");
    let (alice, bob) = (Client::with_token(&alice), Client::with_token(&bob));

    // Below the budget a run starts; it spends past it.
    let id = alice
        .create_chat(&daemon, json!({"text": costly("spent")}))
        .await;
    alice.wait_status(&daemon, &id, "waiting").await;
    let before = alice.messages(&daemon, &id).await;
    let chat_before = alice.chat(&daemon, &id).await;

    let refused = |(status, body): (u16, Value)| {
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("1000"),
            "{body}"
        );
    };
    refused(
        alice
            .send_message(&daemon, &id, json!({"text": "more"}))
            .await,
    );
    refused(
        alice
            .post(&daemon.api("/chats"), json!({"text": "new"}))
            .await,
    );
    let assistant = before[1]["id"].as_i64().unwrap();
    refused(
        alice
            .post(
                &daemon.api(&format!("/chats/{id}/messages/{assistant}/regenerate")),
                json!({}),
            )
            .await,
    );
    let user = before[0]["id"].as_i64().unwrap();
    refused(
        alice
            .edit(&daemon, &id, user, json!({"text": "again"}))
            .await,
    );

    // The drop-in doors refuse it in their own shapes.
    let (status, body) = alice
        .post(
            &format!("{}/v1/responses", daemon.url),
            json!({"model": "demo", "input": "hello"}),
        )
        .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    let ui = json!({"id": "budget-ui", "trigger": "submit-message", "messageId": null,
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]});
    refused(alice.post(&daemon.api("/ai-sdk/chat"), ui).await);

    // Nothing was stored: the same messages, the same chat, no other chat.
    assert_eq!(alice.messages(&daemon, &id).await, before);
    let chat_after = alice.chat(&daemon, &id).await;
    assert_eq!(chat_after["updated_at"], chat_before["updated_at"]);
    assert_eq!(chat_after["status"], "waiting");
    let (_, listed) = alice.get(&daemon.api("/chats")).await;
    assert_eq!(listed["chats"].as_array().unwrap().len(), 1, "{listed}");

    // Another user's budget is their own; and alice sees only her own usage.
    let theirs = bob.replied_chat(&daemon, "fine").await;
    let (_, usage) = alice
        .get(&daemon.api("/usage?group_by=user&group_by=chat"))
        .await;
    let groups = usage["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{usage}");
    assert_eq!(groups[0]["key"]["user"], "alice");
    assert_ne!(groups[0]["key"]["chat"], theirs.as_str());
    assert_eq!(groups[0]["input_tokens"], 1000);

    // Cleared while the daemon runs, the budget no longer stops her.
    keel_ok(
        dir.path(),
        &[
            "users",
            "budget",
            "alice",
            "--clear",
            "--database",
            &database,
        ],
    );
    let (status, body) = alice
        .send_message(&daemon, &id, json!({"text": scripted("ok", 0.0)}))
        .await;
    assert_eq!(status, 202, "{body}");
    alice.wait_status(&daemon, &id, "waiting").await;
}

#[tokio::test]
async fn a_run_that_crosses_the_budget_finishes_its_step_and_stops() {
    let (dir, database) = scratch();
    let alice = add_user(dir.path(), &database, "alice");
    limit_alice(&dir, &database, "day");
    let daemon = Daemon::start(dir.path(), &database, "");
    let alice = Client::with_token(&alice);
    let script = json!({"steps": [
        {"text": "let me look", "tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}],
         "usage": {"input_tokens": 1000, "output_tokens": 100}},
        {"text": "never said"}
    ]});
    let id = alice
        .create_chat(&daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;
    let chat = alice.wait_status(&daemon, &id, "error").await;
    assert_eq!(chat["last_error"]["kind"], "budget_exceeded", "{chat}");
    assert!(
        chat["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget"),
        "{chat}"
    );
    let messages = alice.messages(&daemon, &id).await;
    let roles: Vec<_> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool"],
        "the step that crossed it is kept"
    );
    assert!(
        !assistant_texts(&messages)
            .iter()
            .any(|t| t.contains("never said"))
    );
    assert_eq!(
        alice.chat(&daemon, &id).await["usage"]["input_tokens"],
        1000
    );
    // Retrying the failed run is a run beyond the limit too.
    let (status, body) = alice
        .post(&daemon.api(&format!("/chats/{id}/retry")), json!({}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("budget_exceeded"))
    );
}

#[tokio::test]
async fn two_replicas_share_one_budget_on_postgresql() {
    let Some(database) = crate::postgres::fresh_database() else {
        return;
    };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let alice = add_user(a_dir.path(), &database.url, "alice");
    limit_alice(&a_dir, &database.url, "month");
    let a = Daemon::start(a_dir.path(), &database.url, "");
    let b = Daemon::start(b_dir.path(), &database.url, "");
    let alice = Client::with_token(&alice);

    // Spent on one replica, refused on the other.
    let id = alice
        .create_chat(&a, json!({"text": costly("spent")}))
        .await;
    alice.wait_status(&a, &id, "waiting").await;
    let (status, body) = alice.send_message(&b, &id, json!({"text": "more"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("budget_exceeded"))
    );
    let (status, body) = alice.post(&b.api("/chats"), json!({"text": "new"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("budget_exceeded"))
    );
    assert_eq!(alice.messages(&b, &id).await.len(), 2);
    let (_, usage) = alice.get(&b.api("/usage")).await;
    assert_eq!(usage["groups"][0]["input_tokens"], 1000, "{usage}");
}
