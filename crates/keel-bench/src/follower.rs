//! The soak's reading user: follows one scripted chat to its end like a client would,
//! interrupting it and dropping its event stream at random points, then checks its end
//! state and that the live events delivered exactly its committed messages.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};

use super::check::{EventView, answered_by_daemon, text_of, tool_calls_pair_up};
use super::live::Live;
use super::reader::message_event_ids;
use super::scenario::{Expect, Scenario};
use super::target::Target;

/// What the simulated user does besides reading.
pub struct Behaviour {
    /// Interrupt after this many live deltas.
    pub interrupt_after: Option<usize>,
    /// Drop the event stream after every this many events, and resume it.
    pub disconnect_every: Option<usize>,
    pub idempotency_key: String,
}

/// What one client saw and did.
#[derive(Default)]
struct Seen {
    /// Committed messages as the live events delivered them.
    view: EventView,
    interrupted: bool,
    /// The event id the client had reached when it last (re)connected.
    position: Option<i64>,
    /// How the final catch-up went.
    catch_up: CatchUpLog,
}

/// How the final catch-up went, reported with a failed check: whether the daemon answered
/// it at all tells a message that never came from a client that ran out of patience.
#[derive(Debug)]
struct CatchUpLog {
    started: Instant,
    /// How long it took, once it is over (a failed check is reported later).
    lasted: Duration,
    /// Streams opened, and attempts the daemon refused or did not answer.
    opened: u32,
    refused: u32,
    /// Events of any kind the streams delivered, and the last one's name and time.
    events: u32,
    last_event: Option<(String, Instant)>,
    /// Why the last read of a stream ended.
    last_end: Option<String>,
}

impl Default for CatchUpLog {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            lasted: Duration::ZERO,
            opened: 0,
            refused: 0,
            events: 0,
            last_event: None,
            last_end: None,
        }
    }
}

impl std::fmt::Display for CatchUpLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lasted = self.lasted.as_secs_f64();
        write!(
            f,
            "catch-up over {lasted:.1} s: {} streams opened, {} refused, {} events",
            self.opened, self.refused, self.events
        )?;
        if let Some((kind, at)) = &self.last_event {
            let after = at.duration_since(self.started).as_secs_f64();
            write!(f, " (the last `{kind}` at {after:.1} s)")?;
        }
        if let Some(end) = &self.last_end {
            write!(f, "; the last read ended: {end}")?;
        }
        Ok(())
    }
}

/// Creates the chat, follows it to the end like a client would (resuming across dropped
/// connections and daemon restarts), then checks it; returns the chat's id.
pub async fn drive(
    shared: &Target,
    scenario: &Scenario,
    behaviour: &Behaviour,
) -> anyhow::Result<String> {
    let mut body = json!({"text": scenario.text, "model": scenario.model.id()});
    if !scenario.client_tools.is_empty() {
        body["tools"] = json!(scenario.client_tools);
    }
    let created = shared
        .call(
            reqwest::Method::POST,
            "/chats",
            Some(&body),
            Some(&behaviour.idempotency_key),
        )
        .await?;
    let chat = created["id"]
        .as_str()
        .context("the created chat has no id")?
        .to_owned();

    let mut seen = Seen::default();
    let mut live: Option<Live> = None;
    let mut last_id = None;
    let mut deltas = 0;
    let mut events_on_connection = 0;
    loop {
        ensure!(
            Instant::now() < shared.deadline,
            "chat {chat} never settled"
        );
        let connection = match &mut live {
            Some(connection) => connection,
            None => {
                let api = shared.any().api.clone();
                match Live::open(&api, &chat, last_id).await {
                    Ok(connection) => {
                        if last_id.is_some() {
                            seen.view.reconnected();
                        }
                        events_on_connection = 0;
                        live.insert(connection)
                    }
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        let event = match connection.next(Duration::from_secs(2)).await {
            Ok(event) => event,
            Err(_) => {
                // A broken or silent stream: resume it, and look at the chat meanwhile.
                last_id = connection.last_id;
                live = None;
                if settle(shared, &chat, scenario).await? {
                    break;
                }
                continue;
            }
        };
        last_id = connection.last_id;
        events_on_connection += 1;
        match event.kind.as_str() {
            "message" | "branch" => seen.view.apply_event(&event.kind, &event.data())?,
            "stream_reset" => {
                shared.resets.fetch_add(1, Ordering::Relaxed);
                seen.view.apply_event(&event.kind, &event.data())?;
            }
            "part" => {
                seen.view.apply_event(&event.kind, &event.data())?;
                deltas += 1;
                if behaviour.interrupt_after == Some(deltas) && !seen.interrupted {
                    seen.interrupted = true;
                    shared
                        .call(
                            reqwest::Method::POST,
                            &format!("/chats/{chat}/interrupt"),
                            Some(&json!({})),
                            None,
                        )
                        .await?;
                }
            }
            "status" => {
                let data = event.data();
                let status = data["status"].as_str().unwrap_or_default();
                if matches!(status, "waiting" | "error" | "requires_action")
                    && settle(shared, &chat, scenario).await?
                {
                    break;
                }
            }
            _ => {}
        }
        if behaviour
            .disconnect_every
            .is_some_and(|every| events_on_connection % every == 0)
        {
            live = None;
        }
    }
    // Read what is left of the stream so the client's view is complete, then compare.
    seen.position = last_id;
    catch_up(shared, &chat, &mut seen, last_id).await?;
    verify(shared, &chat, scenario, &seen)
        .await
        .with_context(|| format!("chat {chat}"))?;
    Ok(chat)
}

/// Whether the chat has reached its end state; answers client-side tool calls on the way.
async fn settle(shared: &Target, chat: &str, scenario: &Scenario) -> anyhow::Result<bool> {
    let state = shared
        .call(reqwest::Method::GET, &format!("/chats/{chat}"), None, None)
        .await?;
    match state["status"].as_str().unwrap_or_default() {
        "waiting" | "error" => Ok(true),
        "requires_action" if !scenario.client_tools.is_empty() => {
            let results: Vec<Value> = state["pending_tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|call| json!({"tool_call_id": call["tool_call_id"], "result": {"meaning": 42}, "is_error": false}))
                .collect();
            let answer = shared
                .request(
                    reqwest::Method::POST,
                    &format!("/chats/{chat}/tool-results"),
                    Some(&json!({"results": results})),
                    None,
                )
                .await?;
            // A conflict: the deadline for answers passed while the daemon was down, and
            // it answered the calls with errors itself (checked in `verify`).
            ensure!(
                answer.status.is_success() || answer.status == reqwest::StatusCode::CONFLICT,
                "tool results answered {}: {}",
                answer.status,
                answer.body
            );
            Ok(false)
        }
        "requires_action" => Ok(true),
        _ => Ok(false),
    }
}

/// Reads the events after `after` until the stream falls silent: the committed messages the
/// client has not seen yet.
async fn catch_up(
    shared: &Target,
    chat: &str,
    seen: &mut Seen,
    after: Option<i64>,
) -> anyhow::Result<()> {
    // The chat is settled: its history is final. Read until the stream has delivered all of
    // it, resuming across broken connections (the daemon may be killed meanwhile), or until
    // nothing new arrives for long: then the comparison in `verify` reports what is missing.
    let committed: Vec<i64> = committed_messages(shared, chat)
        .await?
        .iter()
        .filter_map(|m| m["id"].as_i64())
        .collect();
    let mut position = after;
    let mut last_progress = Instant::now();
    let patience = Duration::from_secs(10);
    let log = &mut seen.catch_up;
    *log = CatchUpLog::default();
    while !committed
        .iter()
        .all(|id| seen.view.messages.contains_key(id))
        && shared.patient(last_progress, patience)
    {
        let api = shared.any().api.clone();
        let mut live = match Live::open(&api, chat, position).await {
            Ok(live) => {
                if position.is_some() {
                    seen.view.reconnected();
                }
                live
            }
            Err(error) => {
                log.refused += 1;
                log.last_end = Some(format!("{error:#}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        log.opened += 1;
        loop {
            let event = match live.next(patience).await {
                Ok(event) => event,
                Err(error) => {
                    log.last_end = Some(format!("{error:#}"));
                    break;
                }
            };
            log.events += 1;
            log.last_event = Some((event.kind.clone(), Instant::now()));
            position = live.last_id;
            if matches!(event.kind.as_str(), "message" | "branch" | "stream_reset") {
                last_progress = Instant::now();
            }
            seen.view.apply_event(&event.kind, &event.data())?;
            if committed
                .iter()
                .all(|id| seen.view.messages.contains_key(id))
            {
                break;
            }
        }
    }
    log.lasted = log.started.elapsed();
    Ok(())
}

/// The chat's committed history, as `GET /messages` lists it.
async fn committed_messages(shared: &Target, chat: &str) -> anyhow::Result<Vec<Value>> {
    let listed = shared
        .call(
            reqwest::Method::GET,
            &format!("/chats/{chat}/messages"),
            None,
            None,
        )
        .await?;
    Ok(listed["messages"].as_array().cloned().unwrap_or_default())
}

/// The invariants of one settled chat.
async fn verify(
    shared: &Target,
    chat: &str,
    scenario: &Scenario,
    seen: &Seen,
) -> anyhow::Result<()> {
    let state = shared
        .call(reqwest::Method::GET, &format!("/chats/{chat}"), None, None)
        .await?;
    let messages = committed_messages(shared, chat).await?;
    let status = state["status"].as_str().unwrap_or_default();

    if let Err(error) = seen.view.check(&messages) {
        bail!(
            "{error:#} (client at event {:?}; the messages' event ids: {:?}; {})",
            seen.position,
            message_event_ids(shared, chat).await,
            seen.catch_up
        );
    }
    tool_calls_pair_up(&messages)?;

    let last_assistant = messages.iter().rev().find(|m| m["role"] == "assistant");
    // Calls the daemon answered for a client too slow (or down) end the turn as an interrupt.
    let client_tools: Vec<&str> = scenario
        .client_tools
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    let interrupted =
        seen.interrupted || answered_by_daemon(&messages.iter().collect::<Vec<_>>(), &client_tools);
    match &scenario.expect {
        Expect::Failure => ensure!(status == "error", "expected status error, found {status}"),
        Expect::Reply(expected) => {
            ensure!(
                status == "waiting",
                "expected status waiting, found {status} ({})",
                state["last_error"]
            );
            let Some(last) = last_assistant else {
                // An interrupt that lands before the first delta leaves nothing to keep.
                ensure!(interrupted, "no assistant reply");
                return Ok(());
            };
            let text = text_of(last);
            if last["interrupted"] == true {
                ensure!(
                    interrupted,
                    "a reply was marked interrupted that nobody interrupted"
                );
                ensure!(
                    expected.starts_with(&text) || scenario.name.contains("tool"),
                    "interrupted reply {text:?} is not a prefix of {expected:?}"
                );
            } else if !interrupted || text == *expected {
                ensure!(
                    text == *expected,
                    "final reply {text:?}, expected {expected:?}"
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catch_up_log_says_whether_the_daemon_answered() {
        let mut log = CatchUpLog {
            refused: 2,
            last_end: Some("connection refused".to_owned()),
            ..CatchUpLog::default()
        };
        let text = log.to_string();
        assert!(
            text.contains("0 streams opened, 2 refused, 0 events"),
            "{text}"
        );
        assert!(
            text.ends_with("the last read ended: connection refused"),
            "{text}"
        );

        log.opened = 1;
        log.events = 3;
        log.lasted = Duration::from_millis(2_500);
        log.last_event = Some(("status".to_owned(), log.started));
        log.last_end = Some("no live event arrived in time".to_owned());
        let text = log.to_string();
        assert!(
            text.starts_with(
                "catch-up over 2.5 s: 1 streams opened, 2 refused, 3 events (the last `status` at 0.0 s)"
            ),
            "{text}"
        );
    }
}
