//! Several `keel serve` replicas on one PostgreSQL database.

use std::process::Command;

use serde_json::json;

use crate::harness::*;
use crate::postgres::{FreshDatabase, fresh_database};

/// Replicas on one fresh database: `owner` starts first, so that it claims the chats
/// created on it, and another one can start later with the same configuration.
struct Replicas {
    config: String,
    owner: Daemon,
    client: Client,
    _owner_dir: tempfile::TempDir,
    other_dir: tempfile::TempDir,
    /// Last: dropped after the daemons.
    database: FreshDatabase,
}

impl Replicas {
    /// The owner, started with `config` (extra TOML under `[runs]`) and the environment
    /// `env`; `None` when no PostgreSQL server is configured ([`fresh_database`]).
    fn start(config: &str, env: &[(&str, &str)]) -> Option<Self> {
        let database = fresh_database()?;
        let (owner_dir, other_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let owner = Daemon::start_with_env(owner_dir.path(), &database.url, config, env);
        Some(Self {
            database,
            config: config.to_owned(),
            owner,
            client: Client::new(),
            _owner_dir: owner_dir,
            other_dir,
        })
    }

    /// A second replica, with the owner's configuration but none of its environment.
    fn other(&self) -> Daemon {
        self.other_with_env(&[])
    }

    /// A second replica, with the owner's configuration and the environment `env`.
    fn other_with_env(&self, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_with_env(self.other_dir.path(), &self.database.url, &self.config, env)
    }
}

#[tokio::test]
async fn a_follower_on_another_replica_that_reads_after_the_commit_still_gets_every_part() {
    // The owner claims the chat and its reply stalls before the first token. The other
    // replica starts meanwhile; its followers wait 1.5 s after each notice before they read
    // the store (debug builds). The reply then streams whole at once, is logged and
    // committed, and the run ends: the follower reads only after all that, and must still
    // send every part before the message, as a client of the owner gets them.
    let Some(replicas) = Replicas::start("", &[]) else {
        return;
    };
    let Replicas { owner, client, .. } = &replicas;
    let reply = words(30);
    let script = json!({"text": reply, "rate": 0, "stall": {"after": 0, "ms": 3000}});
    let id = client
        .create_chat(owner, json!({"text": format!("go\n#mock {script}")}))
        .await;
    client.wait_status(owner, &id, "running").await;
    let other = replicas.other_with_env(&[("KEEL_DEBUG_NOTICE_PAUSE_MS", "1500")]);
    let mut events = client.events(&other, &id, None).await;
    let mut transcript = Transcript::default();
    loop {
        let event = events.next().await.expect("the stream ended");
        if event.event == "message" && event.data["role"] == "assistant" {
            assert_eq!(transcript.live_text, reply, "the parts before the message");
            break;
        }
        transcript.apply(&event);
    }
    client.wait_status(&other, &id, "waiting").await;
}

#[tokio::test]
async fn a_follower_whose_log_read_lands_after_a_commit_still_gets_the_committed_step() {
    // The owner's first step stalls, then streams a tool call at once. The other replica's
    // followers wait 1.5 s between a notice of logged parts and their read of the log
    // (debug builds): meanwhile the tool runs, the step commits (its call and its result,
    // numbered after its parts), and the second step logs its first words and stalls. The
    // log then holds only the second step, numbered past the committed messages: a follower
    // that took its parts as they came would never send those messages.
    let Some(replicas) = Replicas::start("", &[]) else {
        return;
    };
    let Replicas { owner, client, .. } = &replicas;
    let script = json!({"steps": [
        {"text": "let me look", "rate": 0, "stall": {"after": 0, "ms": 3000},
         "tool_calls": [{"name": "read_file", "args": {"path": "a.txt"}}]},
        {"text": words(30), "rate": 0, "stall": {"after": 5, "ms": 3000}}
    ]});
    let id = client
        .create_chat(owner, json!({"text": format!("go\n#mock {script}")}))
        .await;
    client.wait_status(owner, &id, "running").await;
    let other = replicas.other_with_env(&[("KEEL_DEBUG_LOG_READ_PAUSE_MS", "1500")]);
    let mut events = client.events(&other, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;
    assert!(
        other
            .logged()
            .contains("variable=\"KEEL_DEBUG_LOG_READ_PAUSE_MS\""),
        "no follower read the log alone"
    );
    let messages = client.messages(owner, &id).await;
    let ids = |messages: &[serde_json::Value]| {
        messages.iter().map(|m| m["id"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(ids(&transcript.messages), ids(&messages), "{messages:?}");
}

#[tokio::test]
async fn a_client_on_the_non_owner_sees_everything_and_can_interrupt() {
    let Some(replicas) = Replicas::start("", &[]) else {
        return;
    };
    let Replicas { owner, client, .. } = &replicas;
    let reply = words(80);
    let (id, _, _) = client.streaming_chat(owner, &reply, 40.0, 5).await;

    // The chat is owned by the first replica; the second starts now and serves the client.
    let other = replicas.other();
    let mut events = client.events(&other, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_until(&mut events, "waiting").await;
    assert_eq!(transcript.assistant_texts(), vec![reply.clone()]);

    // An interrupt sent to the non-owner stops the run on the owner.
    let long = words(400);
    let (status, _) = client
        .post(
            &other.api(&format!("/chats/{id}/messages")),
            json!({"text": scripted(&long, 20.0)}),
        )
        .await;
    assert_eq!(status, 202);
    let mut events = client
        .events(&other, &id, transcript.last_id.as_deref())
        .await;
    transcript.follow_parts(&mut events, 3).await;
    let (status, _) = client
        .post(&other.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202);
    client.wait_status(&other, &id, "waiting").await;
    let messages = client.messages(owner, &id).await;
    let last = messages.last().unwrap();
    assert_eq!(last["interrupted"], true, "{messages:?}");
    let partial = text_of(last);
    assert!(!partial.is_empty() && long.starts_with(&partial) && partial.len() < long.len());
}

/// A chat streaming a long reply on the owner, a daemon that hears no other replica's
/// notices (`KEEL_DEBUG_DROP_NOTICES`, debug builds), interrupted through the other
/// replica, which starts after the chat was claimed so that the owner runs it. Returns the
/// chat, the reply it would have streamed whole and the other replica.
async fn interrupted_behind_the_owners_back(replicas: &Replicas) -> (String, String, Daemon) {
    let long = words(400);
    let (id, _, _) = replicas
        .client
        .streaming_chat(&replicas.owner, &long, 20.0, 3)
        .await;
    let other = replicas.other();
    let (status, body) = replicas
        .client
        .post(&other.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    (id, long, other)
}

/// The chat's last message is the partial reply the interrupt cut.
async fn assert_cut(client: &Client, daemon: &Daemon, id: &str, long: &str) {
    let messages = client.messages(daemon, id).await;
    let last = messages.last().unwrap();
    assert_eq!(last["interrupted"], true, "{messages:?}");
    let partial = text_of(last);
    assert!(long.starts_with(&partial) && partial.len() < long.len());
}

#[tokio::test]
async fn an_interrupt_reaches_the_owner_through_its_lease_renewal_when_every_notice_is_lost() {
    let Some(replicas) = Replicas::start("lease_ms = 3000\n", &[("KEEL_DEBUG_DROP_NOTICES", "1")])
    else {
        return;
    };
    let (id, long, other) = interrupted_behind_the_owners_back(&replicas).await;
    // Renewals every second read the chat's status: the run stops long before its reply
    // (20 s of streaming) would end.
    let Replicas { owner, client, .. } = &replicas;
    client.wait_status(&other, &id, "waiting").await;
    assert_cut(client, owner, &id, &long).await;
}

#[tokio::test]
async fn a_lost_listen_connection_resynchronises_the_owner() {
    // A ten-minute lease: no renewal reads the chat within the test.
    let Some(replicas) =
        Replicas::start("lease_ms = 600000\n", &[("KEEL_DEBUG_DROP_NOTICES", "1")])
    else {
        return;
    };
    let (id, long, other) = interrupted_behind_the_owners_back(&replicas).await;
    let Replicas {
        database,
        owner,
        client,
        ..
    } = &replicas;
    assert_eq!(client.chat(owner, &id).await["status"], "interrupting");

    // The database drops every LISTEN connection: each replica listens again and reads
    // the chats it runs, which tells the owner of the interrupt it never heard.
    let status = Command::new("psql")
        .args([
            database.url.as_str(),
            "-q",
            "-c",
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
        ])
        .status()
        .expect("psql runs");
    assert!(status.success());
    client.wait_status(&other, &id, "waiting").await;
    assert_cut(client, owner, &id, &long).await;
}

/// A client that moves to another replica mid-reply resumes from a part the owner sent it
/// live but has not logged yet (`KEEL_DEBUG_LOG_PAUSE_MS` holds the owner's log back by a
/// second, debug builds). The other replica waits for the position to reach the store
/// instead of taking it for one the chat never reached: no `stream_reset`, the parts seen on
/// both replicas spell the start of the reply without a gap or a repeat, and the reply
/// arrives once.
#[tokio::test]
async fn a_client_ahead_of_the_owners_log_moves_to_another_replica_without_a_reset() {
    let Some(replicas) = Replicas::start("", &[("KEEL_DEBUG_LOG_PAUSE_MS", "1000")]) else {
        return;
    };
    let Replicas { owner, client, .. } = &replicas;
    let reply = words(120);
    let (id, mut on_owner, mut transcript) = client.streaming_chat(owner, &reply, 20.0, 3).await;
    // Claimed by the owner; the second replica starts now. The parts read next are fresh,
    // so the owner's log (a second behind) does not hold them yet.
    let other = replicas.other();
    transcript.follow_parts(&mut on_owner, 5).await;
    drop(on_owner);

    let mut events = client
        .events(&other, &id, transcript.last_id.as_deref())
        .await;
    let mut streamed = None;
    while let Some(event) = events.next().await {
        if event.event == "message" && event.data["role"] == "assistant" {
            streamed.get_or_insert_with(|| transcript.live_text.clone());
        }
        transcript.apply(&event);
        if event.event == "status" && transcript.status.as_deref() == Some("waiting") {
            break;
        }
    }
    assert_eq!(transcript.resets, 0, "the other replica voided the step");
    // The parts continue those seen on the owner without a gap or a repeat. The last ones
    // may come inside the committed message instead: the owner logs and commits them one
    // right after the other, and a replica that reads after the commit finds the message.
    let streamed = streamed.expect("the reply was committed");
    assert!(
        reply.starts_with(&streamed) && streamed.split(' ').count() > 8,
        "{streamed:?}"
    );
    assert_eq!(transcript.assistant_texts(), vec![reply]);
}

#[tokio::test]
async fn a_client_of_the_other_replica_is_told_of_a_retry_while_it_waits() {
    // The retry waits far longer than the test: it is the chat's state throughout.
    let Some(replicas) = Replicas::start(
        "retry_max_attempts = 2\nretry_initial_delay_ms = 600000\nretry_max_delay_ms = 600000\n",
        &[],
    ) else {
        return;
    };
    let Replicas { owner, client, .. } = &replicas;
    let script = json!({"id": "once-500", "error": {"status": 500, "message": "upstream exploded", "times": 1}});
    let (id, mut on_owner, _) = client
        .watched_turn(owner, &format!("hi\n#mock {script}"))
        .await;
    let other = replicas.other();
    let mut on_other = client.events(&other, &id, None).await;
    let live = loop {
        let event = on_owner.next().await.expect("the stream stays open");
        if event.event == "retry" {
            break event;
        }
    };
    let mut transcript = Transcript::default();
    let told = loop {
        let event = on_other.next().await.expect("the stream stays open");
        transcript.apply(&event);
        if event.event == "retry" {
            break event;
        }
    };
    assert_eq!(told.data, live.data, "the same retry on both replicas");
    assert_eq!(transcript.status.as_deref(), Some("running"));

    let (status, _) = client.interrupt(&other, &id).await;
    assert_eq!(status, 202);
    transcript.follow_until(&mut on_other, "waiting").await;
    assert_eq!(transcript.retries, 1, "told once");
}

#[tokio::test]
async fn queue_changes_on_one_replica_cost_a_follower_on_the_other_no_part() {
    // The owner's log writes wait a second (debug builds), so the other replica's follower
    // reads each part from the store long after the owner numbered it; queue changes made
    // meanwhile must not take one of those numbers.
    let Some(replicas) = Replicas::start("", &[("KEEL_DEBUG_LOG_PAUSE_MS", "1000")]) else {
        return;
    };
    let Replicas { owner, client, .. } = &replicas;
    let reply = words(80);
    let (id, mut on_owner, mut seen_on_owner) = client.streaming_chat(owner, &reply, 20.0, 3).await;
    let other = replicas.other();
    let mut on_other = client.events(&other, &id, None).await;
    let mut transcript = Transcript::default();
    transcript.follow_parts(&mut on_other, 1).await;
    crate::concurrency::churn_the_queue(client, owner, &id, (&mut on_owner, &mut seen_on_owner), 4)
        .await;
    let streamed =
        crate::concurrency::streamed_before_the_reply(&mut on_other, &mut transcript).await;
    assert_eq!(streamed, reply, "the parts spelled the reply");
    assert_eq!(transcript.resets, 0);
    client.wait_status(owner, &id, "waiting").await;
}

#[tokio::test]
async fn a_replica_whose_clock_runs_ahead_leaves_the_others_leases_alone() {
    // The second replica's clock is ten minutes ahead (debug builds): by its own clock
    // every lease the owner takes has long expired. Timed by the database's clock it has
    // not, and the owner streams its reply to the end.
    let Some(replicas) = Replicas::start("lease_ms = 3000\n", &[]) else {
        return;
    };
    let Replicas { owner, client, .. } = &replicas;
    let reply = words(100);
    let (id, mut on_owner, mut transcript) = client.streaming_chat(owner, &reply, 20.0, 3).await;
    let other = replicas.other_with_env(&[("KEEL_DEBUG_CLOCK_SKEW_MS", "600000")]);
    wait_until("the skewed replica never started", async || {
        other.logged().contains("this process's clock is skewed")
    })
    .await;
    let streamed =
        crate::concurrency::streamed_before_the_reply(&mut on_owner, &mut transcript).await;
    assert_eq!(transcript.resets, 0, "the reply was taken over");
    assert_eq!(streamed, reply);
    client.wait_status(owner, &id, "waiting").await;
    let messages = client.messages(&other, &id).await;
    assert_eq!(assistant_texts(&messages), vec![reply]);
}
