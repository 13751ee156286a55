//! Debug builds only: pauses at named points, so that a test of the running daemon can land
//! changes inside a window that is otherwise too short to hit.
//!
//! Each pause lasts as many milliseconds as its environment variable says, and is announced
//! in the log as it begins, so that a test acts once the window opens, not after a guess:
//! - `KEEL_DEBUG_CATCH_UP_PAUSE_MS`: a follower's catch-up waits between its read of the
//!   store and sending what it read (a commit and the next step's parts land in between).
//! - `KEEL_DEBUG_NOTICE_PAUSE_MS`: a follower woken by a change notice waits before it
//!   handles it (the run publishes meanwhile, and its frames are queued before the read).
//! - `KEEL_DEBUG_LOG_READ_PAUSE_MS`: a follower woken by logged parts alone waits before it
//!   reads the log (the step commits and the next one logs parts meanwhile).
//! - `KEEL_DEBUG_LOG_PAUSE_MS`: every write of the live-part log waits first (a run's parts
//!   are live but not yet logged, as another replica sees them for a window).
//! - `KEEL_DEBUG_FEED_PAUSE_MS`: a new list feed waits before it reads its first notice (a
//!   chat changes while the stream is open but not yet reading).
//! - `KEEL_DEBUG_PUBLISH_PAUSE_MS`: a run waits between a step's commit and publishing the
//!   committed messages (every follower hears of the commit before its frames).
//!
//! One waits for a state rather than a time, set to any value:
//! - `KEEL_DEBUG_START_SETTLE`: a Responses request that creates a chat waits, once the chat
//!   is stored, until its first run has ended (the run commits its reply before the request
//!   goes on).

use std::time::Duration;

use keel_store::{ChatId, ChatStatus, Store};

pub(crate) async fn debug_pause(variable: &str) {
    let pause = std::env::var(variable)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok());
    if let Some(ms) = pause {
        tracing::info!(variable, ms, "debug pause begins");
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Waits until `chat` has no run in progress, when `variable` is set (at most a minute:
/// a run that never ends fails the test that set it, not the daemon).
pub async fn debug_settle(variable: &str, store: &dyn Store, chat: ChatId) {
    if std::env::var_os(variable).is_none() {
        return;
    }
    tracing::info!(variable, %chat, "debug pause begins");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        match store.get_chat(chat).await {
            Ok(c) if !matches!(c.status, ChatStatus::Running | ChatStatus::Interrupting) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(_) => return,
        }
    }
}
