//! Where a connection starts: the position a client asked for, checked against what the
//! chat has given out, and the wait for a position a run on another replica sent live but
//! has not logged yet.

use std::sync::Arc;
use std::time::Duration;

use keel_store::{Chat, ChatStatus};
use tokio::sync::watch;

use crate::api::state::AppState;
use crate::hub::{Changes, Frame};

/// How long a connection waits for a position that a run on another replica sent the
/// client but has not yet logged, before it takes the position for one the chat never
/// reached.
const AHEAD_PATIENCE: Duration = Duration::from_secs(3);

/// How often a connection waiting for such a position reads the store again when no
/// change notice wakes it first.
const AHEAD_RECHECK: Duration = Duration::from_millis(100);

/// How far ahead of what the store shows a position may be and still be waited for: the
/// parts of a step in progress that are not logged yet. A position further ahead (another
/// chat's id, one from before a change of branch) is unknown at once.
const AHEAD_MARGIN: i64 = 100_000;

/// Where a client asked to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requested {
    /// No position: everything from the start.
    Start,
    At(i64),
    /// A Last-Event-ID that is not an event id.
    Unknown,
}

/// Where a connection starts and whether it opens with `stream_reset`. `known_end` is the
/// highest event id the chat has given out (committed, logged or sent live); `step_start`
/// the position just before the current step (the one in progress, else the last committed). A position beyond `known_end` (a stale id,
/// another chat's) or an unknown one replays the step in progress from its start after a
/// reset; the client keeps its committed messages and rebuilds the step.
fn resume_from(requested: Requested, known_end: i64, step_start: i64) -> (i64, bool) {
    match requested {
        Requested::Start => (0, false),
        Requested::At(position) if position <= known_end => (position, false),
        Requested::At(_) | Requested::Unknown => (step_start.min(known_end), true),
    }
}

/// Whether a position beyond the highest id this process knows of the chat may still be
/// one the chat reached: while a run streams, the replica running it sends its parts live
/// and logs them a window later, so a client that moves to another replica can be ahead of
/// the store for that long. Reset at once, it would void parts that are not void and be
/// sent again the committed step it already holds.
fn may_be_in_flight(requested: Requested, known_end: i64, running: bool) -> bool {
    match requested {
        Requested::At(position) => {
            running && position > known_end && position - known_end <= AHEAD_MARGIN
        }
        Requested::Start | Requested::Unknown => false,
    }
}

/// The highest event id the chat gave out, and the position just before its step in
/// progress (the chat's sequence when nothing is in progress). Read after subscribing, so
/// nothing published in between is missed.
async fn where_the_step_starts(
    state: &AppState,
    chat: &Chat,
    backlog: &[Arc<Frame>],
) -> Result<(i64, i64, bool), keel_store::StoreError> {
    let current = state.store.get_chat(chat.id).await?;
    let logged = state.store.live_parts_after(chat.id, 0).await?;
    let live = backlog
        .iter()
        .map(|f| i64::try_from(f.seq).unwrap_or(i64::MAX));
    let first_live = logged.iter().map(|e| e.seq).chain(live.clone()).min();
    let known_end = live.max().unwrap_or(0).max(current.event_seq);
    let step_start = match first_live {
        Some(seq) => seq - 1,
        None => last_step_start(state, &current).await?,
    };
    let running = matches!(
        current.status,
        ChatStatus::Running | ChatStatus::Interrupting
    );
    Ok((known_end, step_start, running))
}

/// Where a resumed connection starts, and whether it opens with `stream_reset`. A position
/// that may be a run's parts not logged yet ([`may_be_in_flight`]) is waited for, woken by
/// the chat's change notices or every [`AHEAD_RECHECK`], for at most [`AHEAD_PATIENCE`].
pub(super) async fn locate(
    state: &AppState,
    chat: &Chat,
    backlog: &[Arc<Frame>],
    requested: Requested,
    changes: &mut watch::Receiver<Changes>,
) -> Result<(i64, bool), keel_store::StoreError> {
    let deadline = tokio::time::Instant::now() + AHEAD_PATIENCE;
    loop {
        let (known_end, step_start, running) = where_the_step_starts(state, chat, backlog).await?;
        let now = tokio::time::Instant::now();
        if now >= deadline || !may_be_in_flight(requested, known_end, running) {
            return Ok(resume_from(requested, known_end, step_start));
        }
        let wake = deadline.min(now + AHEAD_RECHECK);
        if let Ok(Err(_)) = tokio::time::timeout_at(wake, changes.changed()).await {
            // No more notices: the chat's channel is gone. Decide on what was read.
            return Ok(resume_from(requested, known_end, step_start));
        }
    }
}

/// With nothing in progress, the current step is the last committed one: its assistant
/// message (and the tool results that follow it), or else the last message.
async fn last_step_start(state: &AppState, chat: &Chat) -> Result<i64, keel_store::StoreError> {
    let recent = state.store.recent_messages(chat.id, 2).await?;
    let start = recent
        .iter()
        .rev()
        .find(|m| m.role == keel_core::Role::Assistant)
        .or(recent.last());
    Ok(start.map_or(chat.event_seq, |m| m.event_seq - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_position_resumes_where_it_is() {
        assert_eq!(resume_from(Requested::Start, 40, 30), (0, false));
        assert_eq!(resume_from(Requested::At(35), 40, 30), (35, false));
        assert_eq!(resume_from(Requested::At(40), 40, 30), (40, false));
        assert_eq!(resume_from(Requested::At(0), 40, 30), (0, false));
    }
    #[test]
    fn an_unknown_position_replays_the_step_after_a_reset() {
        assert_eq!(resume_from(Requested::At(41), 40, 30), (30, true));
        assert_eq!(resume_from(Requested::At(i64::MAX), 40, 30), (30, true));
        assert_eq!(resume_from(Requested::Unknown, 40, 30), (30, true));
        // Nothing in progress: the step starts at the chat's sequence.
        assert_eq!(resume_from(Requested::Unknown, 40, 40), (40, true));
    }
    #[test]
    fn a_position_just_ahead_of_a_running_chat_is_waited_for() {
        // Parts another replica sent live and logs a window later.
        assert!(may_be_in_flight(Requested::At(45), 40, true));
        assert!(may_be_in_flight(Requested::At(40 + AHEAD_MARGIN), 40, true));
        // Known already, or nothing streams that could reach it, or far beyond any step.
        assert!(!may_be_in_flight(Requested::At(40), 40, true));
        assert!(!may_be_in_flight(Requested::At(45), 40, false));
        assert!(!may_be_in_flight(
            Requested::At(41 + AHEAD_MARGIN),
            40,
            true
        ));
        assert!(!may_be_in_flight(Requested::Unknown, 40, true));
        assert!(!may_be_in_flight(Requested::Start, 40, true));
    }
}
