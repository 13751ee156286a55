//! The soak's model of what one simulated user did to a chat: which user messages must end
//! up in its history, in which order, and which are still queued. The user's actions are
//! applied as they are answered; the daemon's snapshots of the queue (every `Chat` answer
//! carries one) tell which queued messages have started meanwhile, and must agree with the
//! model's order. Pure: no I/O, no clock.

use std::collections::BTreeMap;

use super::scenario::Expect;

/// One user message the user wants answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Unique within the chat, so a listed message names its turn.
    pub text: String,
    pub expect: Expect,
    /// An interrupt, a promotion or an unanswered tool call may have cut its reply short.
    pub exposed: bool,
    /// A request whose answer was lost (the daemon died) may or may not have removed it.
    pub optional: bool,
}

impl Turn {
    pub fn new(text: impl Into<String>, expect: Expect) -> Self {
        Self {
            text: text.into(),
            expect,
            exposed: false,
            optional: false,
        }
    }
}

/// A user's chat as the user's own actions shaped it: the turns of the current branch.
#[derive(Debug, Clone)]
pub struct UserModel {
    /// Turns that have started on the current branch, in history order.
    history: Vec<Turn>,
    /// Queued turns by queue id, in queue order.
    queue: Vec<(String, Turn)>,
    /// Every turn the user sent, by text: what a switch to another branch brings back.
    sent: BTreeMap<String, Turn>,
}

impl UserModel {
    pub fn new(first: Turn) -> Self {
        Self {
            sent: BTreeMap::from([(first.text.clone(), first.clone())]),
            history: vec![first],
            queue: Vec::new(),
        }
    }

    /// The user switched the chat to a branch whose user messages are `listed` (texts, in
    /// order): they are its history now, each as the user sent it. Every one may have had
    /// its reply cut short when the chat left that branch (an edit mid-reply). Err when a
    /// listed message is none the user sent.
    pub fn switched(&mut self, listed: &[String]) -> Result<(), String> {
        let history = listed
            .iter()
            .map(|text| {
                self.sent.get(text).cloned().map(|turn| Turn {
                    exposed: true,
                    ..turn
                })
            })
            .collect::<Option<Vec<Turn>>>()
            .ok_or_else(|| format!("the branch switched to lists {listed:?}, not all sent"))?;
        self.history = history;
        Ok(())
    }

    #[cfg(test)]
    pub fn history(&self) -> &[Turn] {
        &self.history
    }

    pub fn queued_ids(&self) -> Vec<String> {
        self.queue.iter().map(|(id, _)| id.clone()).collect()
    }

    /// A message that started at once: nothing was queued ahead of it any more.
    pub fn started(&mut self, turn: Turn) {
        self.sent.insert(turn.text.clone(), turn.clone());
        self.history.extend(self.queue.drain(..).map(|(_, t)| t));
        self.history.push(turn);
    }

    pub fn queued(&mut self, queue_id: String, turn: Turn) {
        self.sent.insert(turn.text.clone(), turn.clone());
        self.queue.push((queue_id, turn));
    }

    /// Applies the daemon's view of the queue: what left it has started, and that must be
    /// its head (the queue runs head first), the rest in the model's order. An entry whose
    /// delete is uncertain may be gone from anywhere: deleted, or started with the head.
    pub fn reconcile(&mut self, snapshot: &[String]) -> Result<(), String> {
        let first_kept = snapshot.first().map_or(Some(self.queue.len()), |head| {
            self.queue.iter().position(|(id, _)| id == head)
        });
        let rest_matches = first_kept.is_some_and(|at| {
            self.queue[..at]
                .iter()
                .all(|(id, _)| !snapshot.contains(id))
                && self.queue[at..]
                    .iter()
                    .filter(|(id, turn)| !turn.optional || snapshot.contains(id))
                    .map(|(id, _)| id)
                    .eq(snapshot.iter())
        });
        let Some(at) = first_kept.filter(|_| rest_matches) else {
            return Err(format!(
                "the queue is {snapshot:?}, the user's actions leave {:?}",
                self.queued_ids()
            ));
        };
        self.history
            .extend(self.queue.drain(..at).map(|(_, turn)| turn));
        self.queue.retain(|(id, _)| snapshot.contains(id));
        Ok(())
    }

    /// A queued message that is no longer queued (a 404 for it): it and everything ahead
    /// of it have started.
    pub fn left_queue(&mut self, queue_id: &str) {
        if let Some(at) = self.queue.iter().position(|(id, _)| id == queue_id) {
            self.history
                .extend(self.queue.drain(..=at).map(|(_, turn)| turn));
        }
    }

    /// A queued message the daemon deleted (`204`); `certain` is false when the answer
    /// was lost and the delete may or may not have happened.
    pub fn deleted(&mut self, queue_id: &str, certain: bool) {
        if let Some(at) = self.queue.iter().position(|(id, _)| id == queue_id) {
            if certain {
                self.queue.remove(at);
            } else {
                self.queue[at].1.optional = true;
            }
        }
    }

    /// A promotion the daemon accepted, with the queue it answered with: the promoted
    /// message is next (or already started, when the snapshot no longer has it).
    pub fn promoted(&mut self, queue_id: &str, snapshot: &[String]) -> Result<(), String> {
        let Some(at) = self.queue.iter().position(|(id, _)| id == queue_id) else {
            return Ok(());
        };
        let promoted = self.queue.remove(at);
        let others: Vec<String> = snapshot
            .iter()
            .filter(|id| *id != queue_id)
            .cloned()
            .collect();
        self.reconcile(&others)?;
        if snapshot.iter().any(|id| id == queue_id) {
            self.queue.insert(0, promoted);
        } else {
            self.history.push(promoted.1);
        }
        self.expose();
        Ok(())
    }

    /// A promotion whose answer was lost (a daemon died) and whose retry found the message
    /// no longer queued. Either the lost attempt promoted it, and it started ahead of those
    /// queued before it (which may still wait), or it never reached the daemon and the
    /// queue ran up to it. A 404 alone cannot tell which, so the daemon's queue
    /// (`snapshot`, read first) and then its listed user messages (`listed`, in order) do:
    /// whatever left the queue is listed, in the order it started.
    pub fn promotion_lost(
        &mut self,
        queue_id: &str,
        snapshot: &[String],
        listed: &[String],
    ) -> Result<(), String> {
        let Some(at) = self.queue.iter().position(|(id, _)| id == queue_id) else {
            return Ok(());
        };
        let mut started: Vec<(usize, Turn)> = Vec::new();
        let mut waiting = Vec::new();
        for (index, (id, turn)) in self.queue.drain(..).enumerate() {
            let place = listed.iter().position(|text| *text == turn.text);
            match place {
                Some(place) if index <= at && !snapshot.contains(&id) => {
                    started.push((place, turn));
                }
                _ => waiting.push((id, turn)),
            }
        }
        started.sort_by_key(|(place, _)| *place);
        self.history
            .extend(started.into_iter().map(|(_, turn)| turn));
        self.queue = waiting;
        self.expose();
        self.reconcile(snapshot)
    }

    /// The user edited the message with text `old`: the current branch ends before it and
    /// continues with `new` (the old version and what followed it stay on their own
    /// branch); the queue is gone. False when `old` names no turn of the model.
    pub fn edited(&mut self, old: &str, new: Turn) -> bool {
        self.sent.insert(new.text.clone(), new.clone());
        if let Some(at) = self.queue.iter().position(|(_, t)| t.text == old) {
            self.history
                .extend(self.queue.drain(..=at).map(|(_, turn)| turn));
        }
        let Some(at) = self.history.iter().position(|t| t.text == old) else {
            return false;
        };
        self.history.truncate(at);
        self.history.push(new);
        self.queue.clear();
        true
    }

    /// An interrupt (or anything that interrupts): every turn that may be running now may
    /// end short.
    pub fn expose(&mut self) {
        for turn in self
            .history
            .iter_mut()
            .chain(self.queue.iter_mut().map(|(_, t)| t))
        {
            turn.exposed = true;
        }
    }

    /// The final comparison: the user messages listed (in order) and the final queue.
    /// Returns the turns in history order, matched to the listed texts.
    pub fn settle(&mut self, listed: &[String], queue: &[String]) -> Result<Vec<Turn>, String> {
        self.reconcile(queue)?;
        let mut expected = self.history.iter().peekable();
        let mut matched = Vec::new();
        for text in listed {
            loop {
                match expected.next() {
                    Some(turn) if turn.text == *text => {
                        matched.push(turn.clone());
                        break;
                    }
                    Some(turn) if turn.optional => continue,
                    _ => return Err(self.mismatch(listed)),
                }
            }
        }
        if expected.any(|turn| !turn.optional) {
            return Err(self.mismatch(listed));
        }
        Ok(matched)
    }

    fn mismatch(&self, listed: &[String]) -> String {
        let wanted: Vec<&str> = self.history.iter().map(|t| t.text.as_str()).collect();
        format!("the chat's user messages are {listed:?}, the user's actions make {wanted:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(text: &str) -> Turn {
        Turn::new(text, Expect::Reply(text.into()))
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn texts(turns: &[Turn]) -> Vec<&str> {
        turns.iter().map(|t| t.text.as_str()).collect()
    }

    fn with_queue(queued: &[&str]) -> UserModel {
        let mut model = UserModel::new(turn("first"));
        for id in queued {
            model.queued(id.to_string(), turn(&format!("m{id}")));
        }
        model
    }

    #[test]
    fn queued_messages_run_in_the_order_they_were_sent() {
        let mut model = with_queue(&["a", "b"]);
        let turns = model.settle(&ids(&["first", "ma", "mb"]), &[]).unwrap();
        assert_eq!(texts(&turns), ["first", "ma", "mb"]);
        let mut model = with_queue(&["a", "b"]);
        assert!(model.settle(&ids(&["first", "mb", "ma"]), &[]).is_err());
    }

    #[test]
    fn a_snapshot_may_only_drop_the_head_of_the_queue() {
        let mut model = with_queue(&["a", "b", "c"]);
        model.reconcile(&ids(&["b", "c"])).unwrap();
        assert_eq!(texts(model.history()), ["first", "ma"]);
        assert!(model.reconcile(&ids(&["c", "b"])).is_err());
        assert!(with_queue(&["a", "b"]).reconcile(&ids(&["a"])).is_err());
        assert!(with_queue(&["a"]).reconcile(&ids(&["a", "x"])).is_err());
    }

    #[test]
    fn a_promoted_message_runs_before_those_queued_ahead_of_it() {
        let mut model = with_queue(&["a", "b", "c"]);
        model.promoted("c", &ids(&["c", "a", "b"])).unwrap();
        assert_eq!(model.queued_ids(), ["c", "a", "b"]);
        let turns = model
            .settle(&ids(&["first", "mc", "ma", "mb"]), &[])
            .unwrap();
        assert!(turns.iter().all(|t| t.exposed));
    }

    #[test]
    fn a_promotion_after_the_head_started_keeps_the_head_first() {
        let mut model = with_queue(&["a", "b"]);
        model.promoted("b", &ids(&["b"])).unwrap();
        assert_eq!(texts(model.history()), ["first", "ma"]);
        assert_eq!(model.queued_ids(), ["b"]);
        model.promoted("b", &[]).unwrap();
        assert_eq!(texts(model.history()), ["first", "ma", "mb"]);
    }

    #[test]
    fn a_lost_promotion_is_told_apart_by_the_queue_and_the_listed_messages() {
        // The lost attempt promoted `c`: it started, `a` and `b` still wait behind it.
        let mut model = with_queue(&["a", "b", "c"]);
        model
            .promotion_lost("c", &ids(&["a", "b"]), &ids(&["first", "mc"]))
            .unwrap();
        assert_eq!(texts(model.history()), ["first", "mc"]);
        assert_eq!(model.queued_ids(), ["a", "b"]);
        assert!(
            model
                .settle(&ids(&["first", "mc", "ma", "mb"]), &[])
                .unwrap()
                .iter()
                .all(|t| t.exposed)
        );
        // It promoted `b`, which ran, and `a` ran after it.
        let mut model = with_queue(&["a", "b", "c"]);
        model
            .promotion_lost("b", &ids(&["c"]), &ids(&["first", "mb", "ma"]))
            .unwrap();
        assert_eq!(texts(model.history()), ["first", "mb", "ma"]);
        assert_eq!(model.queued_ids(), ["c"]);
        // It never arrived: the queue ran up to `b` in order.
        let mut model = with_queue(&["a", "b", "c"]);
        model
            .promotion_lost("b", &ids(&["c"]), &ids(&["first", "ma", "mb"]))
            .unwrap();
        assert_eq!(texts(model.history()), ["first", "ma", "mb"]);
        // Read as a plain 404 (the queue ran up to `b`), the first case breaks the model.
        let mut model = with_queue(&["a", "b", "c"]);
        model.left_queue("c");
        assert!(model.reconcile(&ids(&["a", "b"])).is_err());
    }

    #[test]
    fn a_deleted_queued_message_never_runs_unless_the_delete_is_uncertain() {
        let mut model = with_queue(&["a", "b"]);
        model.deleted("a", true);
        assert!(model.settle(&ids(&["first", "mb"]), &[]).is_ok());
        let mut model = with_queue(&["a", "b"]);
        model.deleted("a", false);
        assert!(
            model.clone().settle(&ids(&["first", "mb"]), &[]).is_ok()
                && model.settle(&ids(&["first", "ma", "mb"]), &[]).is_ok()
        );
    }

    #[test]
    fn an_uncertain_delete_may_have_removed_the_entry_from_anywhere() {
        let mut model = with_queue(&["a", "b", "c"]);
        model.deleted("c", false);
        model.reconcile(&ids(&["a", "b"])).unwrap();
        assert_eq!(model.queued_ids(), ["a", "b"]);
        let mut model = with_queue(&["a", "b", "c"]);
        model.deleted("b", false);
        model.reconcile(&ids(&["c"])).unwrap();
        assert!(model.settle(&ids(&["first", "ma", "mc"]), &[]).is_ok());
        let mut model = with_queue(&["a", "b"]);
        assert!(model.reconcile(&ids(&["a"])).is_err());
    }

    #[test]
    fn a_message_gone_from_the_queue_started_with_those_ahead_of_it() {
        let mut model = with_queue(&["a", "b", "c"]);
        model.left_queue("b");
        assert_eq!(texts(model.history()), ["first", "ma", "mb"]);
        assert_eq!(model.queued_ids(), ["c"]);
    }

    #[test]
    fn an_edit_drops_later_turns_and_the_queue() {
        let mut model = with_queue(&["a", "b"]);
        model.reconcile(&ids(&["b"])).unwrap();
        assert!(model.edited("first", turn("second")));
        assert!(model.queued_ids().is_empty());
        assert!(model.settle(&ids(&["second"]), &[]).is_ok());
        assert!(!with_queue(&[]).edited("nobody said this", turn("x")));
    }

    #[test]
    fn an_edit_of_a_message_that_left_the_queue_unseen_keeps_those_before_it() {
        let mut model = with_queue(&["a", "b"]);
        assert!(model.edited("mb", turn("nb")));
        assert!(model.settle(&ids(&["first", "ma", "nb"]), &[]).is_ok());
    }

    #[test]
    fn a_switch_brings_back_the_turns_of_the_branch_the_user_left() {
        let mut model = with_queue(&[]);
        model.started(turn("second"));
        assert!(model.edited("second", turn("second, edited")));
        model
            .switched(&ids(&["first", "second"]))
            .expect("both were sent");
        assert_eq!(texts(model.history()), ["first", "second"]);
        assert!(model.history().iter().all(|t| t.exposed));
        model.started(turn("third"));
        assert!(
            model
                .clone()
                .settle(&ids(&["first", "second", "third"]), &[])
                .is_ok()
        );
        assert!(model.switched(&ids(&["first", "never sent"])).is_err());
    }

    #[test]
    fn a_message_sent_to_an_idle_chat_follows_every_queued_one() {
        let mut model = with_queue(&["a"]);
        model.started(turn("late"));
        assert_eq!(texts(model.history()), ["first", "ma", "late"]);
    }

    #[test]
    fn missing_or_extra_user_messages_are_reported() {
        assert!(with_queue(&["a"]).settle(&ids(&["first"]), &[]).is_err());
        assert!(
            with_queue(&[])
                .settle(&ids(&["first", "stranger"]), &[])
                .is_err()
        );
        assert!(
            with_queue(&["a"])
                .settle(&ids(&["first"]), &ids(&["a"]))
                .is_ok()
        );
    }

    #[test]
    fn only_turns_present_at_an_interrupt_are_exposed() {
        let mut model = with_queue(&["a"]);
        model.expose();
        model.queued("b".into(), turn("mb"));
        let turns = model.settle(&ids(&["first", "ma", "mb"]), &[]).unwrap();
        assert_eq!(
            turns.iter().map(|t| t.exposed).collect::<Vec<_>>(),
            [true, true, false]
        );
    }
}
