//! The soak's verdicts on one settled chat, as pure functions of what the client saw and
//! what the daemon lists: the live events spell exactly the committed messages, every tool
//! call has exactly one result, and every user turn got the reply its script promises.

use std::collections::BTreeMap;

use anyhow::{bail, ensure};
use serde_json::Value;

use keel_core::SUMMARY_PREFIX;

use super::model::Turn;
use super::scenario::Expect;

/// The committed messages as a client rebuilt them from `message` events, and the text of
/// each reply as its `part` deltas spelled it before the message came.
#[derive(Debug, Default, Clone)]
pub struct EventView {
    pub messages: BTreeMap<i64, Value>,
    /// Ids delivered again unchanged: a message the client was sent twice.
    pub duplicates: Vec<i64>,
    /// The assistant text the deltas of the step in progress spelled so far.
    live_text: String,
    /// The client reconnected during the step in progress: a step committed while it was
    /// away comes as its message, so the deltas it saw need only begin the reply.
    live_gap: bool,
    /// Replies whose deltas did not spell them.
    pub spelled_wrong: Vec<String>,
    /// Set by a `stream_reset`: what follows replays the step from its start, so a message
    /// the client holds unchanged is that replay, not a second delivery. The first message
    /// it did not hold ends the replay.
    pub replaying: bool,
}

impl EventView {
    /// One durable event: a `message`, or a `branch` (the current branch changed; the
    /// messages shown go, and the branch's messages follow). Others change no message.
    pub fn apply_event(&mut self, kind: &str, data: &Value) -> anyhow::Result<()> {
        match kind {
            "message" => {
                self.check_spelling(data);
                self.apply(data)
            }
            "part" => {
                let part = &data["part"];
                if data["role"] == "assistant" && part["type"] == "text" {
                    self.live_text
                        .push_str(part["text"].as_str().unwrap_or_default());
                }
                Ok(())
            }
            "branch" => {
                self.messages.clear();
                self.end_step();
                Ok(())
            }
            "stream_reset" => {
                self.replaying = true;
                self.end_step();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The client dropped its connection and resumes from its last event.
    pub fn reconnected(&mut self) {
        self.live_gap = true;
    }

    /// A committed assistant message must be what its deltas spelled: exactly, or (when the
    /// client was away for part of the step) as far as they went. A reply delivered whole,
    /// with no delta, spells nothing to compare.
    fn check_spelling(&mut self, message: &Value) {
        if message["role"] == "assistant" && !self.live_text.is_empty() {
            let committed = text_of(message);
            let spelled = if self.live_gap {
                committed.starts_with(&self.live_text)
            } else {
                committed == self.live_text
            };
            if !spelled {
                self.spelled_wrong.push(format!(
                    "message {} was streamed as {:?} but committed as {committed:?}",
                    message["id"], self.live_text
                ));
            }
        }
        self.end_step();
    }

    fn end_step(&mut self) {
        self.live_text.clear();
        self.live_gap = false;
    }

    /// A `message` event. A known id with new content replaces the message and drops
    /// everything after it, as a client that knows no branches does.
    pub fn apply(&mut self, data: &Value) -> anyhow::Result<()> {
        let Some(id) = data["id"].as_i64() else {
            bail!("a message event without an id: {data}");
        };
        if let Some(known) = self.messages.get(&id) {
            if known == data {
                if !self.replaying {
                    self.duplicates.push(id);
                }
                return Ok(());
            }
            self.messages.split_off(&id);
        }
        self.replaying = false;
        self.messages.insert(id, data.clone());
        Ok(())
    }

    /// Whether the view holds exactly these messages.
    pub fn matches(&self, committed: &[Value]) -> bool {
        self.differs(committed).is_none()
    }

    /// Exactly the committed messages, each as committed, none twice.
    pub fn check(&self, committed: &[Value]) -> anyhow::Result<()> {
        ensure!(
            self.duplicates.is_empty(),
            "messages delivered twice: {:?}",
            self.duplicates
        );
        ensure!(
            self.spelled_wrong.is_empty(),
            "live deltas differ from the committed text: {}",
            self.spelled_wrong.join("; ")
        );
        match self.differs(committed) {
            Some(difference) => bail!(difference),
            None => Ok(()),
        }
    }

    fn differs(&self, committed: &[Value]) -> Option<String> {
        let listed: BTreeMap<i64, &Value> = committed
            .iter()
            .filter_map(|m| Some((m["id"].as_i64()?, m)))
            .collect();
        if !listed.keys().eq(self.messages.keys()) {
            return Some(format!(
                "the client saw messages {:?}, the chat has {:?}",
                self.messages.keys().collect::<Vec<_>>(),
                listed.keys().collect::<Vec<_>>()
            ));
        }
        listed.iter().find_map(|(id, message)| {
            let delivered = &self.messages[id];
            (delivered["parts"] != message["parts"]
                || delivered["interrupted"] != message["interrupted"])
                .then(|| {
                    format!("message {id} was delivered as {delivered} but committed as {message}")
                })
        })
    }
}

/// Every tool call has exactly one result, and every result answers a call. This holds for
/// a branch a switch brings back too: a branch is left with its open calls answered.
pub fn tool_calls_pair_up(messages: &[Value]) -> anyhow::Result<()> {
    let mut calls = BTreeMap::<String, usize>::new();
    let mut results = BTreeMap::<String, usize>::new();
    for part in messages
        .iter()
        .flat_map(|message| message["parts"].as_array().into_iter().flatten())
    {
        let id = part["tool_call_id"].as_str().unwrap_or_default().to_owned();
        match part["type"].as_str() {
            Some("tool_call") => *calls.entry(id).or_default() += 1,
            Some("tool_result") => *results.entry(id).or_default() += 1,
            _ => {}
        }
    }
    ensure!(
        calls.values().all(|n| *n == 1),
        "a tool call id appears twice: {calls:?}"
    );
    ensure!(
        calls == results,
        "tool calls {calls:?} and results {results:?} do not pair up"
    );
    Ok(())
}

/// The text of a message's text parts.
pub fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// One user message of the listed history and what answers it.
#[derive(Debug)]
pub struct TurnView<'a> {
    pub text: String,
    pub answers: Vec<&'a Value>,
    /// A compaction happened during the turn (it never adds a reply: a run ends after
    /// summarising its final reply).
    pub compacted: bool,
}

/// The listed history cut into user turns. System messages (compaction notes) belong to
/// no turn but mark the turn they fall in.
pub fn turns(messages: &[Value]) -> Vec<TurnView<'_>> {
    let mut turns: Vec<TurnView<'_>> = Vec::new();
    for message in messages {
        match message["role"].as_str() {
            Some("user") => turns.push(TurnView {
                text: text_of(message),
                answers: Vec::new(),
                compacted: false,
            }),
            Some("system") => {
                if let Some(turn) = turns.last_mut() {
                    turn.compacted = true;
                }
            }
            _ => {
                if let Some(turn) = turns.last_mut() {
                    turn.answers.push(message);
                }
            }
        }
    }
    turns
}

/// Whether the daemon answered a client-side call for the user (an interrupt, or the
/// deadline for answers passing): such results are errors, and the user's never are.
pub fn answered_by_daemon(answers: &[&Value], client_tools: &[&str]) -> bool {
    answers
        .iter()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .any(|part| {
            part["type"] == "tool_result"
                && part["is_error"] == true
                && part["tool_name"]
                    .as_str()
                    .is_some_and(|name| client_tools.contains(&name))
        })
}

/// A reply is the scripted text; an echo may carry a compaction summary in front, since
/// after a compaction the summary and the user's message reach the model as one turn.
fn is_reply(text: &str, expected: &str) -> bool {
    text == expected
        || (text.starts_with(SUMMARY_PREFIX) && text.ends_with(&format!("\n{expected}")))
}

/// What a turn is answered with when `lead` (user messages left unanswered right before
/// it) reaches the model together with it: the mock echoes them all, one per line.
fn with_lead(lead: &[String], expected: &str) -> String {
    lead.iter()
        .map(String::as_str)
        .chain([expected])
        .collect::<Vec<_>>()
        .join("\n")
}

/// One turn's reply against its script. `last` turns decide the chat's final `status`;
/// `tools` turns may end in text other than the scripted one when a tool call was cut off.
pub fn check_turn(
    turn: &Turn,
    view: &TurnView<'_>,
    lead: &[String],
    last: bool,
    status: &str,
    tools: bool,
) -> anyhow::Result<()> {
    let assistant = || view.answers.iter().filter(|m| m["role"] == "assistant");
    let reply = assistant().next_back();
    match &turn.expect {
        Expect::Failure => {
            // A compaction the user asked for after the failure ends the chat `waiting`:
            // the failed message stays unanswered and goes to the model with the next one.
            ensure!(
                !last || turn.exposed || view.compacted || status == "error",
                "expected status error, found {status}"
            );
        }
        Expect::Reply(expected) => {
            let expected = &with_lead(lead, expected);
            ensure!(
                !last || status == "waiting",
                "expected status waiting, found {status}"
            );
            let Some(reply) = reply else {
                ensure!(turn.exposed, "no assistant reply to {:?}", turn.text);
                return Ok(());
            };
            let text = text_of(reply);
            if reply["interrupted"] == true {
                ensure!(
                    turn.exposed,
                    "a reply was marked interrupted that nobody interrupted"
                );
                ensure!(
                    tools || expected.starts_with(&text) || text.starts_with(SUMMARY_PREFIX),
                    "interrupted reply {text:?} is not a prefix of {expected:?}"
                );
            } else {
                ensure!(
                    turn.exposed || is_reply(&text, expected),
                    "final reply {text:?}, expected {expected:?}"
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(id: i64, role: &str, text: &str) -> Value {
        json!({"id": id, "role": role, "parts": [{"type": "text", "text": text}], "interrupted": false})
    }

    #[test]
    fn a_message_delivered_twice_unchanged_is_a_duplicate() {
        let mut view = EventView::default();
        view.apply(&message(1, "user", "hi")).unwrap();
        view.apply(&message(1, "user", "hi")).unwrap();
        assert_eq!(view.duplicates, [1]);
        assert!(view.check(&[message(1, "user", "hi")]).is_err());
    }

    fn delta(text: &str) -> Value {
        json!({"role": "assistant", "part": {"type": "text", "text": text}})
    }

    fn streamed(view: &mut EventView, deltas: &[&str], reply: &str) -> anyhow::Result<()> {
        view.apply_event("message", &message(1, "user", "hi"))?;
        for text in deltas {
            view.apply_event("part", &delta(text))?;
        }
        view.apply_event("message", &message(2, "assistant", reply))?;
        view.check(&[message(1, "user", "hi"), message(2, "assistant", reply)])
    }

    #[test]
    fn a_reply_must_be_what_its_deltas_spelled() {
        assert!(streamed(&mut EventView::default(), &["The ", "trees"], "The trees").is_ok());
        // A delta lost in the middle, or one shown twice.
        let lost = streamed(
            &mut EventView::default(),
            &["The ", "trees"],
            "The tall trees",
        );
        assert!(lost.is_err());
        let twice = streamed(
            &mut EventView::default(),
            &["The ", "The ", "trees"],
            "The trees",
        );
        assert!(twice.is_err());
        // A reply delivered whole spells nothing to compare.
        assert!(streamed(&mut EventView::default(), &[], "The trees").is_ok());
    }

    #[test]
    fn after_a_reconnect_the_deltas_need_only_begin_the_reply() {
        let mut view = EventView::default();
        view.apply_event("message", &message(1, "user", "hi"))
            .unwrap();
        view.apply_event("part", &delta("The ")).unwrap();
        view.reconnected();
        view.apply_event("message", &message(2, "assistant", "The trees"))
            .unwrap();
        assert!(view.spelled_wrong.is_empty(), "{:?}", view.spelled_wrong);
        // The next step is followed whole again.
        view.apply_event("part", &delta("Then")).unwrap();
        view.apply_event("message", &message(3, "assistant", "Then more"))
            .unwrap();
        assert!(!view.spelled_wrong.is_empty());
    }

    #[test]
    fn a_reset_voids_the_deltas_before_it() {
        let mut view = EventView::default();
        view.apply_event("part", &delta("Once upon")).unwrap();
        view.apply_event("stream_reset", &json!({})).unwrap();
        assert!(streamed(&mut view, &["The ", "trees"], "The trees").is_ok());
    }

    #[test]
    fn a_reset_replays_the_step_and_only_its_replay_may_repeat_a_message() {
        let mut view = EventView::default();
        let reset = json!({});
        view.apply(&message(1, "user", "hi")).unwrap();
        view.apply(&message(2, "assistant", "hi")).unwrap();
        view.apply_event("stream_reset", &reset).unwrap();
        // The replay of the step from its start: held already, not a second delivery.
        view.apply(&message(2, "assistant", "hi")).unwrap();
        view.apply(&message(3, "user", "more")).unwrap();
        assert!(view.duplicates.is_empty());
        // The replay ended with the first message the client did not hold.
        view.apply(&message(3, "user", "more")).unwrap();
        assert_eq!(view.duplicates, [3]);
    }

    #[test]
    fn an_edited_message_replaces_it_and_drops_what_followed() {
        let mut view = EventView::default();
        for m in [
            message(1, "user", "hi"),
            message(2, "assistant", "hi"),
            message(1, "user", "ho"),
            message(3, "assistant", "ho"),
        ] {
            view.apply(&m).unwrap();
        }
        assert!(view.duplicates.is_empty());
        view.check(&[message(1, "user", "ho"), message(3, "assistant", "ho")])
            .unwrap();
    }

    #[test]
    fn a_branch_event_drops_the_messages_shown_and_the_branch_follows() {
        let mut view = EventView::default();
        for m in [message(1, "user", "hi"), message(2, "assistant", "hi")] {
            view.apply_event("message", &m).unwrap();
        }
        view.apply_event("branch", &json!({"leaf_id": 4})).unwrap();
        for m in [message(3, "user", "ho"), message(4, "assistant", "ho")] {
            view.apply_event("message", &m).unwrap();
        }
        view.check(&[message(3, "user", "ho"), message(4, "assistant", "ho")])
            .unwrap();
        // Brought back after a switch, a message is no duplicate.
        view.apply_event("branch", &json!({"leaf_id": 2})).unwrap();
        for m in [message(1, "user", "hi"), message(2, "assistant", "hi")] {
            view.apply_event("message", &m).unwrap();
        }
        view.check(&[message(1, "user", "hi"), message(2, "assistant", "hi")])
            .unwrap();
    }

    #[test]
    fn a_missing_or_altered_message_fails_the_check() {
        let mut view = EventView::default();
        view.apply(&message(1, "user", "hi")).unwrap();
        let committed = [message(1, "user", "hi"), message(2, "assistant", "a")];
        assert!(!view.matches(&committed));
        assert!(view.check(&committed).is_err());
        view.apply(&message(2, "assistant", "b")).unwrap();
        assert!(view.check(&committed).is_err());
        assert!(view.apply(&json!({"role": "user"})).is_err());
    }

    #[test]
    fn tool_calls_need_exactly_one_result() {
        let call = json!({"parts": [{"type": "tool_call", "tool_call_id": "c1"}]});
        let result = json!({"parts": [{"type": "tool_result", "tool_call_id": "c1"}]});
        assert!(tool_calls_pair_up(&[call.clone(), result.clone()]).is_ok());
        assert!(tool_calls_pair_up(std::slice::from_ref(&call)).is_err());
        assert!(tool_calls_pair_up(&[call.clone(), result.clone(), result]).is_err());
        assert!(tool_calls_pair_up(&[call.clone(), call]).is_err());
    }

    #[test]
    fn turns_start_at_user_messages_and_skip_system_notes() {
        let messages = [
            message(1, "user", "a"),
            message(2, "assistant", "a"),
            message(3, "system", "summarised"),
            message(4, "user", "b"),
        ];
        let turns = turns(&messages);
        assert_eq!(turns.len(), 2);
        assert_eq!((turns[0].text.as_str(), turns[0].answers.len()), ("a", 1));
        assert_eq!((turns[1].text.as_str(), turns[1].answers.len()), ("b", 0));
        assert!(turns[0].compacted && !turns[1].compacted);
    }

    fn view<'a>(answers: &[&'a Value]) -> TurnView<'a> {
        TurnView {
            text: "x".into(),
            answers: answers.to_vec(),
            compacted: false,
        }
    }

    #[test]
    fn a_reply_answered_again_from_the_summary_fails_the_turn() {
        let turn = Turn::new("x", Expect::Reply("one two".into()));
        let reply = message(2, "assistant", "one two");
        let carry_on = message(4, "assistant", &format!("{SUMMARY_PREFIX}\n\nearlier"));
        let mut compacted = view(&[&reply, &carry_on]);
        assert!(check_turn(&turn, &compacted, &[], true, "waiting", false).is_err());
        compacted.compacted = true;
        assert!(check_turn(&turn, &compacted, &[], true, "waiting", false).is_err());
        let answered_once = TurnView {
            compacted: true,
            ..view(&[&reply])
        };
        assert!(check_turn(&turn, &answered_once, &[], true, "waiting", false).is_ok());
        let only_carry_on = TurnView {
            compacted: true,
            ..view(&[&carry_on])
        };
        assert!(check_turn(&turn, &only_carry_on, &[], true, "waiting", false).is_err());
    }

    #[test]
    fn a_turn_needs_its_scripted_reply_unless_it_was_exposed() {
        let turn = Turn::new("x", Expect::Reply("one two".into()));
        let full = message(2, "assistant", "one two");
        let other = message(2, "assistant", "three");
        let mut cut = message(2, "assistant", "one");
        cut["interrupted"] = json!(true);
        assert!(check_turn(&turn, &view(&[&full]), &[], true, "waiting", false).is_ok());
        assert!(check_turn(&turn, &view(&[&full]), &[], true, "running", false).is_err());
        assert!(check_turn(&turn, &view(&[&other]), &[], false, "waiting", false).is_err());
        assert!(check_turn(&turn, &view(&[]), &[], false, "waiting", false).is_err());
        assert!(check_turn(&turn, &view(&[&cut]), &[], false, "waiting", false).is_err());
        let exposed = Turn {
            exposed: true,
            ..turn
        };
        assert!(check_turn(&exposed, &view(&[&cut]), &[], false, "waiting", false).is_ok());
        assert!(check_turn(&exposed, &view(&[]), &[], false, "waiting", false).is_ok());
        let mut wrong_cut = other.clone();
        wrong_cut["interrupted"] = json!(true);
        assert!(check_turn(&exposed, &view(&[&wrong_cut]), &[], false, "waiting", false).is_err());
        assert!(check_turn(&exposed, &view(&[&wrong_cut]), &[], false, "waiting", true).is_ok());
    }

    #[test]
    fn an_echo_may_follow_a_compaction_summary_but_a_summary_is_no_reply() {
        let turn = Turn::new("x", Expect::Reply("one two".into()));
        let led = message(
            2,
            "assistant",
            &format!("{SUMMARY_PREFIX}\n\nearlier\none two"),
        );
        let summary = message(2, "assistant", &format!("{SUMMARY_PREFIX}\n\nearlier"));
        assert!(check_turn(&turn, &view(&[&led]), &[], true, "waiting", false).is_ok());
        assert!(check_turn(&turn, &view(&[&summary]), &[], true, "waiting", false).is_err());
    }

    #[test]
    fn only_error_results_of_client_tools_count_as_answered_by_the_daemon() {
        let result = |name: &str, is_error: bool| json!({"role": "tool", "parts": [{"type": "tool_result", "tool_name": name, "is_error": is_error}]});
        let (mine, theirs, builtin) = (
            result("lookup", false),
            result("lookup", true),
            result("read_file", true),
        );
        assert!(!answered_by_daemon(&[&mine], &["lookup"]));
        assert!(answered_by_daemon(&[&mine, &theirs], &["lookup"]));
        assert!(!answered_by_daemon(&[&builtin], &["lookup"]));
    }

    #[test]
    fn a_reply_behind_unanswered_messages_echoes_them_too() {
        let turn = Turn::new("x", Expect::Reply("b".into()));
        let both = message(3, "assistant", "a\nb");
        let lead = ["a".to_owned()];
        assert!(check_turn(&turn, &view(&[&both]), &lead, true, "waiting", false).is_ok());
        assert!(check_turn(&turn, &view(&[&both]), &[], true, "waiting", false).is_err());
    }

    #[test]
    fn a_failing_script_must_leave_the_chat_in_error() {
        let turn = Turn::new("x", Expect::Failure);
        assert!(check_turn(&turn, &view(&[]), &[], true, "error", false).is_ok());
        assert!(check_turn(&turn, &view(&[]), &[], true, "waiting", false).is_err());
        assert!(check_turn(&turn, &view(&[]), &[], false, "waiting", false).is_ok());
        let compacted = TurnView {
            compacted: true,
            ..view(&[])
        };
        assert!(check_turn(&turn, &compacted, &[], true, "waiting", false).is_ok());
    }
}
