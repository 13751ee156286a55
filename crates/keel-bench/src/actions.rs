//! The soak's menu of user actions beyond reading: what a simulated user does to a chat
//! while it runs (branching it too: edits, regenerates, switches back), and when. Choosing a program is a pure function of a random number
//! generator, so a seed reproduces the choices (their timing against the daemon varies).

use rand::{Rng, RngExt};

/// One thing the user does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Sends a message with `busy: "queue"`.
    Send,
    /// Promotes the newest queued message the user knows of.
    Promote,
    /// Deletes the newest queued message the user knows of.
    DeleteQueued,
    /// Edits the latest user message while a reply streams.
    EditMidReply,
    /// Edits the latest user message while a tool call streams or runs.
    EditMidTool,
    Interrupt,
    /// `POST .../compact` once the chat is idle.
    Compact,
    /// Regenerates the last reply once the chat is idle: a sibling branch.
    Regenerate,
    /// Switches back to a branch an edit or a regenerate left, once the chat is idle.
    SwitchBranch,
    /// Deletes the chat while it runs; ends the program.
    DeleteChat,
}

/// When an action happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// After the client has seen this many live parts (or a short wait, if fewer come).
    Parts(usize),
    /// Once a tool call has streamed (or a short wait, if none comes).
    ToolCall,
    /// After this many milliseconds.
    Delay(u64),
    /// Once the chat is idle (`waiting` or `error`).
    Idle,
}

/// How the user answers calls of client-side tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ToolAnswers {
    Prompt,
    /// After a pause shorter than the daemon's deadline for answers.
    Late,
    /// Never: the daemon's deadline answers them with errors.
    Never,
    /// Interrupts first, then answers: the daemon must refuse the answer (`409`).
    AfterInterrupt,
}

/// Everything one user does to one chat.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub steps: Vec<(Trigger, Action)>,
    pub tools: ToolAnswers,
    /// The chat uses the model with a small context limit, so it compacts on its own.
    pub small_context: bool,
    /// An Anthropic chat uses a Claude 4.6 model configured to continue cut replies by
    /// prefill, which that model refuses: the daemon must learn to continue by instruction.
    pub refuses_prefill: bool,
}

#[cfg(test)]
const ACTIONS: [Action; 10] = [
    Action::Send,
    Action::Promote,
    Action::DeleteQueued,
    Action::EditMidReply,
    Action::EditMidTool,
    Action::Interrupt,
    Action::Compact,
    Action::Regenerate,
    Action::SwitchBranch,
    Action::DeleteChat,
];

/// A random program of one to four actions. Promotions and deletes of queued messages
/// come after a send (they need something queued); a switch of branch after an edit or a
/// regenerate (it needs a branch to go back to), usually followed by a send, so that the
/// actions after it (and the kills) meet a chat on a branch other than its first; a chat
/// delete only ever comes last.
pub fn choose(rng: &mut impl Rng) -> Program {
    let count = rng.random_range(1..=4);
    let mut steps = Vec::with_capacity(count + 1);
    for _ in 0..count {
        let action = match rng.random_range(0..100) {
            0..26 => Action::Send,
            26..34 => Action::Promote,
            34..42 => Action::DeleteQueued,
            42..52 => Action::EditMidReply,
            52..59 => Action::EditMidTool,
            59..69 => Action::Interrupt,
            69..80 => Action::Compact,
            80..88 => Action::Regenerate,
            88..97 => Action::SwitchBranch,
            _ => Action::DeleteChat,
        };
        if matches!(action, Action::Promote | Action::DeleteQueued) {
            // Back to back: the first may start a run, the others queue behind it.
            for _ in 0..3 {
                steps.push((Trigger::Delay(0), Action::Send));
            }
        }
        let branched = steps.iter().any(|(_, a)| {
            matches!(
                a,
                Action::EditMidReply | Action::EditMidTool | Action::Regenerate
            )
        });
        if action == Action::SwitchBranch && !branched {
            steps.push((Trigger::Idle, Action::Regenerate));
        }
        let trigger = match action {
            Action::Send => match rng.random_bool(0.7) {
                true => Trigger::Parts(rng.random_range(1..8)),
                false => Trigger::Delay(rng.random_range(0..1_500)),
            },
            Action::Promote | Action::DeleteQueued => Trigger::Delay(rng.random_range(0..100)),
            Action::EditMidReply => Trigger::Parts(rng.random_range(1..6)),
            Action::EditMidTool => Trigger::ToolCall,
            Action::Interrupt => Trigger::Parts(rng.random_range(1..8)),
            Action::Compact | Action::Regenerate | Action::SwitchBranch => Trigger::Idle,
            Action::DeleteChat => Trigger::Parts(rng.random_range(1..4)),
        };
        steps.push((trigger, action));
        if action == Action::SwitchBranch && rng.random_bool(0.7) {
            steps.push((Trigger::Delay(0), Action::Send));
        }
        if action == Action::DeleteChat {
            break;
        }
    }
    // Something to answer after a compaction, so the summary is used.
    if steps.last().is_some_and(|(_, a)| *a == Action::Compact) && rng.random_bool(0.7) {
        steps.push((Trigger::Idle, Action::Send));
    }
    let tools = [
        ToolAnswers::Prompt,
        ToolAnswers::Late,
        ToolAnswers::Never,
        ToolAnswers::AfterInterrupt,
    ][rng.random_range(0..4)];
    Program {
        steps,
        tools,
        small_context: rng.random_bool(0.2),
        refuses_prefill: rng.random_bool(0.3),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn a_seed_chooses_the_same_programs() {
        let programs = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..50).map(|_| choose(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(programs(3), programs(3));
        assert_ne!(programs(3), programs(4));
    }

    #[test]
    fn every_action_and_answer_policy_is_reachable() {
        let mut rng = StdRng::seed_from_u64(1);
        let (mut actions, mut answers) = (BTreeSet::new(), BTreeSet::new());
        let (mut small, mut refusing) = (false, false);
        for _ in 0..500 {
            let program = choose(&mut rng);
            actions.extend(program.steps.iter().map(|(_, a)| *a));
            answers.insert(program.tools);
            small |= program.small_context;
            refusing |= program.refuses_prefill;
        }
        assert_eq!(actions.len(), ACTIONS.len());
        assert_eq!(answers.len(), 4);
        assert!(small && refusing);
    }

    #[test]
    fn queue_actions_follow_a_send_and_a_chat_delete_comes_last() {
        let mut rng = StdRng::seed_from_u64(2);
        for _ in 0..500 {
            let program = choose(&mut rng);
            for (at, (_, action)) in program.steps.iter().enumerate() {
                if matches!(action, Action::Promote | Action::DeleteQueued) {
                    assert!(program.steps[..at].iter().any(|(_, a)| *a == Action::Send));
                }
                if *action == Action::SwitchBranch {
                    assert!(program.steps[..at].iter().any(|(_, a)| matches!(
                        a,
                        Action::EditMidReply | Action::EditMidTool | Action::Regenerate
                    )));
                }
                if *action == Action::DeleteChat {
                    assert_eq!(at, program.steps.len() - 1);
                }
            }
        }
    }
}
