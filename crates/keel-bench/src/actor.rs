//! A soak user who does more than read: carries out a [`Program`] of actions (sends with
//! `busy: "queue"`, promotions, queue deletes, edits, interrupts, compactions, regenerates,
//! switches back to a branch the chat left, chat deletes) against a chat while its reply
//! streams, answers client-side tool calls as the
//! program says, keeps a [`UserModel`] of what it did, and at the end checks the chat
//! against that model and against what its event stream delivered.
//!
//! Longer than most files: one action per `match` arm, each with the model update and the
//! check it implies; apart, the model and the actions would drift.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use rand::RngExt;
use rand::rngs::StdRng;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::actions::{Action, Program, ToolAnswers, Trigger};
use super::check::{answered_by_daemon, check_turn, text_of, tool_calls_pair_up, turns};
use super::model::{Turn, UserModel};
use super::reader::{Reader, message_event_ids, resumed};
use super::scenario::{Expect, Scenario};
use super::target::Target;

/// What a chat's user got done, for the soak's summary.
#[derive(Debug, Default)]
pub struct Done {
    /// Actions the daemon carried out (skipped ones, such as a promotion with nothing
    /// queued, do not count).
    pub actions: Vec<Action>,
    pub tool_answers: Option<ToolAnswers>,
}

/// The parts of a chat's run the user acts on.
struct User<'a> {
    target: &'a Target,
    chat: String,
    model: UserModel,
    reader: Reader,
    tools: ToolAnswers,
    answered: HashSet<String>,
    /// Texts are unique per chat: `tag` names the chat, `sent` counts.
    tag: String,
    sent: usize,
    rng: StdRng,
    done: Done,
    /// A compaction the user asked for has not been seen to end.
    compacting: bool,
    /// Names of the client-side tools offered.
    client_tools: Vec<String>,
    /// Branches the chat left (by an edit, a regenerate or a switch), as listed then: each
    /// must stay intact, and a switch may bring one back.
    left: Vec<Vec<Value>>,
    /// Whether the chat's provider gets consecutive user messages as one turn (see
    /// [`super::scenario::Model::merges_user_turns`]).
    merges_user_turns: bool,
}

/// Creates the chat, runs `program` against it and checks the outcome.
pub async fn drive(
    target: Arc<Target>,
    scenario: &Scenario,
    program: &Program,
    disconnect_every: Option<usize>,
    key: &str,
    rng: StdRng,
) -> anyhow::Result<Done> {
    let model = match scenario.model.id() {
        "mock" if program.small_context => "mock-small",
        "mock-anthropic" if program.refuses_prefill => "mock-claude-4-6",
        id => id,
    };
    let mut body = json!({"text": scenario.text, "model": model});
    if !scenario.client_tools.is_empty() {
        body["tools"] = json!(scenario.client_tools);
    }
    let created = target
        .call(Method::POST, "/chats", Some(&body), Some(key))
        .await?;
    let chat = created["id"]
        .as_str()
        .context("the created chat has no id")?
        .to_owned();
    let tools = scenario.name.contains("tool");
    let mut user = User {
        target: &target,
        chat: chat.clone(),
        model: UserModel::new(Turn::new(scenario.text.clone(), scenario.expect.clone())),
        reader: Reader::start(target.clone(), chat.clone(), disconnect_every),
        tools: program.tools,
        answered: HashSet::new(),
        tag: key.to_owned(),
        sent: 0,
        rng,
        done: Done::default(),
        compacting: false,
        client_tools: scenario
            .client_tools
            .iter()
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect(),
        left: Vec::new(),
        merges_user_turns: scenario.model.merges_user_turns(),
    };
    let outcome = user.run(program, tools).await;
    if user.compacting {
        target.compacting.fetch_sub(1, Ordering::Relaxed);
    }
    outcome.with_context(|| format!("chat {chat}"))?;
    Ok(user.done)
}

impl User<'_> {
    async fn run(&mut self, program: &Program, tools: bool) -> anyhow::Result<()> {
        for (trigger, action) in &program.steps {
            self.wait(*trigger).await?;
            if self.act(*action).await? {
                self.done.actions.push(*action);
            }
            if *action == Action::DeleteChat {
                return self.check_deleted().await;
            }
        }
        let state = self.idle().await?;
        self.verify(&state, tools).await
    }

    async fn wait(&mut self, trigger: Trigger) -> anyhow::Result<()> {
        let patience = Instant::now() + Duration::from_secs(3);
        match trigger {
            Trigger::Delay(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            Trigger::Idle => {
                self.idle().await?;
            }
            Trigger::Parts(n) => {
                let goal = self.reader.with(|r| r.parts) + n;
                while self.reader.with(|r| r.parts) < goal && self.may_stream(patience) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Trigger::ToolCall => {
                let before = self.reader.with(|r| r.tool_calls);
                while self.reader.with(|r| r.tool_calls) == before && self.may_stream(patience) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        // A user who waits for something else still answers the calls of client tools.
        if self.reader.status.borrow().as_str() == "requires_action" {
            let state = self
                .target
                .call(Method::GET, &self.path(""), None, None)
                .await?;
            self.reconcile(&state)?;
            if state["status"] == "requires_action" {
                self.answer_tools(&state).await?;
            }
        }
        Ok(())
    }

    /// Whether more live parts may come before `patience` runs out: not once the stream
    /// says the chat stopped.
    fn may_stream(&self, patience: Instant) -> bool {
        let stopped = matches!(
            self.reader.status.borrow().as_str(),
            "waiting" | "error" | "requires_action"
        );
        !stopped && Instant::now() < patience
    }

    fn path(&self, rest: &str) -> String {
        format!("/chats/{}{rest}", self.chat)
    }

    fn next_text(&mut self, kind: &str) -> String {
        self.sent += 1;
        let words = self.rng.random_range(8..40);
        let mut text = format!("{}-{kind}{}", self.tag, self.sent);
        for word in 1..=words {
            text.push_str(&format!(" w{word}"));
        }
        text
    }

    /// Performs one action; false when it was skipped or refused.
    async fn act(&mut self, action: Action) -> anyhow::Result<bool> {
        let target = self.target;
        match action {
            Action::Send => {
                let text = self.next_text("m");
                let key = format!("{}-send{}", self.tag, self.sent);
                let body = json!({"text": text, "busy": "queue"});
                let sent = target
                    .call(
                        Method::POST,
                        &self.path("/messages"),
                        Some(&body),
                        Some(&key),
                    )
                    .await?;
                let turn = Turn::new(text.clone(), Expect::Reply(text));
                match sent["queue_id"].as_str() {
                    Some(queue_id) => self.model.queued(queue_id.to_owned(), turn),
                    None => self.model.started(turn),
                }
                Ok(true)
            }
            Action::Promote => {
                let Some(queue_id) = self.model.queued_ids().pop() else {
                    return Ok(false);
                };
                let path = self.path(&format!("/queue/{queue_id}/promote"));
                let answer = target.request(Method::POST, &path, None, None).await?;
                match answer.status {
                    StatusCode::ACCEPTED => {
                        let snapshot = queue_of(&answer.body);
                        self.model
                            .promoted(&queue_id, &snapshot)
                            .map_err(anyhow::Error::msg)?;
                        Ok(true)
                    }
                    // The lost attempt may have promoted it: then it started first, and
                    // those queued ahead of it did not.
                    StatusCode::NOT_FOUND if answer.retried => {
                        let state = target.call(Method::GET, &self.path(""), None, None).await?;
                        let listed: Vec<String> = turns(&self.current().await?)
                            .iter()
                            .map(|turn| turn.text.clone())
                            .collect();
                        self.model
                            .promotion_lost(&queue_id, &queue_of(&state), &listed)
                            .map_err(anyhow::Error::msg)?;
                        Ok(false)
                    }
                    StatusCode::NOT_FOUND => {
                        self.model.left_queue(&queue_id);
                        Ok(false)
                    }
                    other => bail!("promote answered {other}: {}", answer.body),
                }
            }
            Action::DeleteQueued => {
                let Some(queue_id) = self.model.queued_ids().pop() else {
                    return Ok(false);
                };
                let path = self.path(&format!("/queue/{queue_id}"));
                let answer = target.request(Method::DELETE, &path, None, None).await?;
                match answer.status {
                    // Whichever attempt did it, the message was deleted.
                    StatusCode::NO_CONTENT => {
                        self.model.deleted(&queue_id, true);
                        Ok(true)
                    }
                    StatusCode::NOT_FOUND if answer.retried => {
                        self.model.deleted(&queue_id, false);
                        Ok(false)
                    }
                    StatusCode::NOT_FOUND => {
                        self.model.left_queue(&queue_id);
                        Ok(false)
                    }
                    other => bail!(
                        "deleting a queued message answered {other}: {}",
                        answer.body
                    ),
                }
            }
            Action::EditMidReply | Action::EditMidTool => self.edit().await,
            Action::Regenerate => self.regenerate().await,
            Action::SwitchBranch => self.switch_branch().await,
            Action::Interrupt => {
                let state = target
                    .call(Method::POST, &self.path("/interrupt"), None, None)
                    .await?;
                self.model.expose();
                self.reconcile(&state)?;
                Ok(true)
            }
            Action::Compact => {
                let answer = target
                    .request(Method::POST, &self.path("/compact"), None, None)
                    .await?;
                match answer.status {
                    StatusCode::ACCEPTED => {
                        if !self.compacting {
                            self.compacting = true;
                            target.compacting.fetch_add(1, Ordering::Relaxed);
                        }
                        self.reconcile(&answer.body)?;
                        Ok(true)
                    }
                    // Not idle any more (a queued message started), or a retry after the
                    // first attempt already started the compaction.
                    StatusCode::CONFLICT => Ok(false),
                    other => bail!("compact answered {other}: {}", answer.body),
                }
            }
            Action::DeleteChat => {
                let answer = target
                    .request(Method::DELETE, &self.path(""), None, None)
                    .await?;
                ensure!(
                    answer.status == StatusCode::NO_CONTENT
                        || (answer.retried && answer.status == StatusCode::NOT_FOUND),
                    "deleting the chat answered {}: {}",
                    answer.status,
                    answer.body
                );
                Ok(true)
            }
        }
    }

    /// Replaces the latest user message with a new text.
    async fn edit(&mut self) -> anyhow::Result<bool> {
        let listed = self
            .target
            .call(Method::GET, &self.path("/messages"), None, None)
            .await?;
        let Some(last) = listed["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
            .find(|m| m["role"] == "user")
            .cloned()
        else {
            return Ok(false);
        };
        let id = last["id"].as_i64().context("a message without an id")?;
        let text = self.next_text("e");
        let path = self.path(&format!("/messages/{id}"));
        let body = json!({"text": text});
        let answer = self
            .target
            .request(Method::PUT, &path, Some(&body), None)
            .await?;
        match answer.status {
            StatusCode::ACCEPTED => {
                let old = text_of(&last);
                ensure!(
                    self.model
                        .edited(&old, Turn::new(text.clone(), Expect::Reply(text))),
                    "edited {old:?}, which the user never sent"
                );
                self.reconcile(&answer.body)?;
                let old_branch = self.branch_through(id).await?;
                self.remember(old_branch);
                Ok(true)
            }
            StatusCode::CONFLICT => Ok(false),
            other => bail!("edit answered {other}: {}", answer.body),
        }
    }

    /// The messages of the current branch.
    async fn current(&self) -> anyhow::Result<Vec<Value>> {
        let listed = self
            .target
            .call(Method::GET, &self.path("/messages"), None, None)
            .await?;
        Ok(listed["messages"].as_array().cloned().unwrap_or_default())
    }

    /// The messages of the branch through `message`, to its newest message.
    async fn branch_through(&self, message: i64) -> anyhow::Result<Vec<Value>> {
        let listed = self
            .target
            .call(
                Method::GET,
                &self.path(&format!("/messages?branch={message}")),
                None,
                None,
            )
            .await?;
        Ok(listed["messages"].as_array().cloned().unwrap_or_default())
    }

    /// Remembers a branch the chat left. One remembered before that it continues (its
    /// last message is on it) is the same branch, grown: it goes.
    fn remember(&mut self, branch: Vec<Value>) {
        let on_it: HashSet<i64> = branch.iter().filter_map(|m| m["id"].as_i64()).collect();
        self.left.retain(|old| {
            old.last()
                .and_then(|m| m["id"].as_i64())
                .is_some_and(|id| !on_it.contains(&id))
        });
        if !branch.is_empty() {
            self.left.push(branch);
        }
    }

    /// Regenerates the last reply of an idle chat (one whose last turn was answered); the
    /// user's turns stay what they were.
    async fn regenerate(&mut self) -> anyhow::Result<bool> {
        let current = self.current().await?;
        let last_user = current.iter().rposition(|m| m["role"] == "user");
        let Some(reply) = current
            .iter()
            .enumerate()
            .rev()
            .find(|(at, m)| m["role"] == "assistant" && last_user.is_some_and(|u| u < *at))
            .and_then(|(_, m)| m["id"].as_i64())
        else {
            return Ok(false);
        };
        let path = self.path(&format!("/messages/{reply}/regenerate"));
        let answer = self.target.request(Method::POST, &path, None, None).await?;
        match answer.status {
            StatusCode::ACCEPTED => {
                self.reconcile(&answer.body)?;
                let old_branch = self.branch_through(reply).await?;
                self.remember(old_branch);
                Ok(true)
            }
            // Not idle any more, or a retry after the first attempt started the run.
            StatusCode::CONFLICT => Ok(false),
            other => bail!("regenerate answered {other}: {}", answer.body),
        }
    }

    /// Switches an idle chat back to a branch it left; the branch must come back as it
    /// was left, and the user's turns become its turns.
    async fn switch_branch(&mut self) -> anyhow::Result<bool> {
        let current = self.current().await?;
        let on_current: HashSet<i64> = current.iter().filter_map(|m| m["id"].as_i64()).collect();
        let others: Vec<&Vec<Value>> = self
            .left
            .iter()
            .filter(|branch| {
                branch
                    .last()
                    .and_then(|m| m["id"].as_i64())
                    .is_some_and(|id| !on_current.contains(&id))
            })
            .collect();
        if others.is_empty() {
            return Ok(false);
        }
        let back = others[self.rng.random_range(0..others.len())].clone();
        let to = back.last().and_then(|m| m["id"].as_i64()).unwrap_or(0);
        let body = json!({ "message_id": to });
        let answer = self
            .target
            .request(Method::POST, &self.path("/branch"), Some(&body), None)
            .await?;
        match answer.status {
            StatusCode::OK => {
                self.reconcile(&answer.body)?;
                self.remember(current);
                let now = self.current().await?;
                ensure!(
                    continues(&now, &back),
                    "switched to the branch {back:?}, the chat lists {now:?}"
                );
                let texts: Vec<String> = turns(&now).iter().map(|t| t.text.clone()).collect();
                self.model.switched(&texts).map_err(anyhow::Error::msg)?;
                Ok(true)
            }
            // Not idle any more (a queued message started).
            StatusCode::CONFLICT => Ok(false),
            other => bail!("switching branch answered {other}: {}", answer.body),
        }
    }

    fn reconcile(&mut self, chat: &Value) -> anyhow::Result<()> {
        self.model
            .reconcile(&queue_of(chat))
            .map_err(anyhow::Error::msg)
    }

    /// Waits until the chat is `waiting` or `error`, answering client-side tool calls as
    /// the program says; returns the chat.
    async fn idle(&mut self) -> anyhow::Result<Value> {
        loop {
            ensure!(
                Instant::now() < self.target.deadline,
                "chat {} never settled",
                self.chat
            );
            let state = self
                .target
                .call(Method::GET, &self.path(""), None, None)
                .await?;
            self.reconcile(&state)?;
            match state["status"].as_str().unwrap_or_default() {
                "waiting" | "error" => {
                    if self.compacting {
                        self.compacting = false;
                        self.target.compacting.fetch_sub(1, Ordering::Relaxed);
                    }
                    return Ok(state);
                }
                "requires_action" if self.answer_tools(&state).await? => {}
                // Running, or calls already answered (or left unanswered on purpose).
                _ => {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), self.reader.status.changed())
                            .await;
                }
            }
        }
    }

    /// Answers the calls pending in `state` as the program says; false when there were
    /// none the user had not already dealt with.
    async fn answer_tools(&mut self, state: &Value) -> anyhow::Result<bool> {
        let pending: Vec<String> = state["pending_tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|call| call["tool_call_id"].as_str().map(str::to_owned))
            .filter(|id| !self.answered.contains(id))
            .collect();
        if pending.is_empty() {
            return Ok(false);
        }
        self.answered.extend(pending.iter().cloned());
        self.done.tool_answers = Some(self.tools);
        let results: Vec<Value> = pending
            .iter()
            .map(|id| json!({"tool_call_id": id, "result": {"meaning": 42}, "is_error": false}))
            .collect();
        let body = json!({"results": results});
        let path = self.path("/tool-results");
        match self.tools {
            ToolAnswers::Never => {
                self.model.expose();
                return Ok(true);
            }
            ToolAnswers::Late => {
                let pause = self.rng.random_range(200..1_500);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            ToolAnswers::AfterInterrupt => {
                let interrupted = self
                    .target
                    .call(Method::POST, &self.path("/interrupt"), None, None)
                    .await?;
                self.model.expose();
                self.reconcile(&interrupted)?;
                let answer = self
                    .target
                    .request(Method::POST, &path, Some(&body), None)
                    .await?;
                ensure!(
                    answer.status == StatusCode::CONFLICT,
                    "tool results after an interrupt answered {}: {}",
                    answer.status,
                    answer.body
                );
                return Ok(true);
            }
            ToolAnswers::Prompt => {}
        }
        let answer = self
            .target
            .request(Method::POST, &path, Some(&body), None)
            .await?;
        match answer.status {
            StatusCode::ACCEPTED => self.reconcile(&answer.body)?,
            // The deadline for answers passed (the daemon answered the calls with errors),
            // or a retry after the first attempt was taken.
            StatusCode::CONFLICT => self.model.expose(),
            other => bail!("tool results answered {other}: {}", answer.body),
        }
        Ok(true)
    }

    /// A deleted chat is gone for good, for every replica.
    async fn check_deleted(&self) -> anyhow::Result<()> {
        for rest in ["", "/messages"] {
            let answer = self
                .target
                .request(Method::GET, &self.path(rest), None, None)
                .await?;
            ensure!(
                answer.status == StatusCode::NOT_FOUND,
                "GET {} of a deleted chat answered {}",
                self.path(rest),
                answer.status
            );
        }
        Ok(())
    }

    /// The settled chat against the user's model and against the client's events.
    async fn verify(&mut self, state: &Value, tools: bool) -> anyhow::Result<()> {
        let status = state["status"].as_str().unwrap_or_default();
        let queue = queue_of(state);
        ensure!(
            status != "waiting" || queue.is_empty(),
            "the chat is waiting with messages queued: {queue:?}"
        );
        let listed = self
            .target
            .call(Method::GET, &self.path("/messages"), None, None)
            .await?;
        let messages = listed["messages"].as_array().cloned().unwrap_or_default();
        let turns = turns(&messages);
        let texts: Vec<String> = turns.iter().map(|turn| turn.text.clone()).collect();
        let expected = self
            .model
            .settle(&texts, &queue)
            .map_err(anyhow::Error::msg)?;
        let client_tools: Vec<&str> = self.client_tools.iter().map(String::as_str).collect();
        // A scripted failure never answered stays in the prompt of the turns after it, so
        // the mock fails those too.
        let mut unanswered_failure = false;
        // Unanswered user messages reach the model together with the next one. The mock
        // echoes its request's last user turn: all of them where the provider's format
        // makes consecutive user messages one turn, else the last message alone (the
        // daemon still sent the others, as separate messages).
        let mut lead: Vec<String> = Vec::new();
        for (at, (turn, view)) in expected.iter().zip(&turns).enumerate() {
            let last = at + 1 == turns.len() && queue.is_empty();
            // Answers the user was too slow to give: the deadline answered for them.
            let mut turn = turn.clone();
            turn.exposed |= answered_by_daemon(&view.answers, &client_tools);
            // Behind an unanswered script the mock follows the script: no echo to expect.
            turn.exposed |= lead.iter().any(|text| text.contains("#mock"));
            let echoed: &[String] = if self.merges_user_turns { &lead } else { &[] };
            let verdict = check_turn(&turn, view, echoed, last, status, tools && at == 0);
            let failed = Turn {
                expect: Expect::Failure,
                ..turn.clone()
            };
            if !(unanswered_failure
                && check_turn(&failed, view, echoed, last, status, false).is_ok())
            {
                verdict.with_context(|| format!("turn {at} ({:?})", turn.text))?;
            }
            unanswered_failure =
                view.answers.is_empty() && (unanswered_failure || turn.expect == Expect::Failure);
            if view.answers.is_empty() {
                lead.push(turn.text.clone());
            } else {
                lead.clear();
            }
        }
        tool_calls_pair_up(&messages)?;
        for branch in &self.left {
            let through = branch.last().and_then(|m| m["id"].as_i64()).unwrap_or(0);
            let now = self.branch_through(through).await?;
            ensure!(
                continues(&now, branch),
                "a branch the chat left changed: it was {branch:?}, it is {now:?}"
            );
        }
        // The stream delivers the last messages shortly after the status; wait for them.
        let since = Instant::now();
        while !self.reader.with(|r| r.view.matches(&messages))
            && self.target.patient(since, Duration::from_secs(15))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let read = self
            .reader
            .read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(error) = &read.error {
            bail!("{error}");
        }
        if read.view.matches(&messages) {
            if let Err(error) = read.view.check(&messages) {
                bail!(
                    "{error:#}; what the client read: {}; the messages' event ids: {:?}",
                    read.trail.join(" "),
                    message_event_ids(self.target, &self.chat).await
                );
            }
            return Ok(());
        }
        // A client whose stream falls silent reconnects from its last event id: what that
        // gets decides whether anything was lost.
        let view = resumed(
            self.target,
            &self.chat,
            &read,
            &messages,
            Duration::from_secs(15),
        )
        .await?;
        let silent = read
            .last_event
            .map(|(at, replica)| format!("{} ms on replica {replica}", at.elapsed().as_millis()));
        if let Err(error) = view.check(&messages) {
            let ids = message_event_ids(self.target, &self.chat).await;
            bail!(
                "{error:#} (client at event {:?} after {:?}, silent for {silent:?}); the messages' event ids: {ids:?}",
                read.position,
                read.recent
            );
        }
        self.target.stalls.fetch_add(1, Ordering::Relaxed);
        println!(
            "chat {}: its stream fell silent ({silent:?}) before message(s) after event {:?}; a reconnect delivered them",
            self.chat, read.position
        );
        Ok(())
    }
}

/// Whether `listed` begins with the messages of `branch`, each as it was (the branch may
/// have grown since; its messages' sibling lists may have too).
fn continues(listed: &[Value], branch: &[Value]) -> bool {
    let same = |a: &Value, b: &Value| {
        ["id", "role", "parts", "interrupted", "parent_id"]
            .iter()
            .all(|key| a[key] == b[key])
    };
    listed.len() >= branch.len() && listed.iter().zip(branch).all(|(a, b)| same(a, b))
}

/// The queue ids of a `Chat` answer, in queue order.
fn queue_of(chat: &Value) -> Vec<String> {
    let mut queued: Vec<(i64, String)> = chat["queued"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| Some((q["position"].as_i64()?, q["id"].as_str()?.to_owned())))
        .collect();
    queued.sort();
    queued.into_iter().map(|(_, id)| id).collect()
}
