//! The transitions of an existing chat a client asks for: sending a message, editing one,
//! answering client-side tool calls, interrupting the run, switching branches, regenerating,
//! continuing, retrying, compacting, and managing the queue. Each is one store transition;
//! the checks before it are here.

use keel_core::Part;
use keel_store::{Busy, Chat, ChatId, ChatStatus, QueueId, SendOutcome, ToolResultInput};

use crate::api::state::AppState;
use crate::service::chats::Owned;
use crate::service::error::ServiceError;

/// A message to send to a chat.
#[derive(Debug)]
pub struct SendInput<'a> {
    pub chat: ChatId,
    /// The caller, whose chat it must be; `None` when the caller already proved it.
    pub owner: Option<&'a str>,
    pub parts: Vec<Part>,
    /// What to do when the chat is busy.
    pub busy: Busy,
    /// Already scoped to the owner (see `chats::idempotency_key`).
    pub idempotency_key: Option<&'a str>,
}

/// Sends a message: a run starts, or the message waits in the chat's queue. Ownership is
/// checked by the transition itself: no read of the chat before it.
pub async fn send_message(
    state: &AppState,
    input: SendInput<'_>,
) -> Result<SendOutcome, ServiceError> {
    let chat = input.chat;
    state
        .store
        .send_message(
            chat,
            input.owner,
            input.parts,
            input.busy,
            input.idempotency_key,
        )
        .await
        .map_err(|error| ServiceError::of_chat(chat, error))
}

/// What a protocol without a choice of its own does with new text for a chat in `status`:
/// it answers client-side calls that wait with errors, else it waits in the queue while a
/// run is busy.
pub fn busy_for_new_text(status: ChatStatus) -> Busy {
    match status {
        ChatStatus::RequiresAction => Busy::Interrupt,
        _ => Busy::Queue,
    }
}

/// A message id as a path names it: one that is not a number names no message.
pub(crate) fn message_id(raw: &str) -> Result<i64, ServiceError> {
    raw.parse()
        .map_err(|_| ServiceError::NotFound(format!("message {raw} not found")))
}

/// Replaces a user message by a new version, a branch beside the old one; a run starts on it.
pub async fn edit_message(
    state: &AppState,
    chat: &Owned,
    message: i64,
    parts: Vec<Part>,
) -> Result<Chat, ServiceError> {
    Ok(state.store.edit_message(chat.id, message, parts).await?)
}

/// Answers the chat's pending client-side tool calls; the run goes on.
pub async fn submit_tool_results(
    state: &AppState,
    chat: &Owned,
    results: Vec<ToolResultInput>,
) -> Result<Chat, ServiceError> {
    Ok(state.store.submit_tool_results(chat.id, results).await?)
}

/// Interrupts the chat's active run (idempotent).
pub async fn interrupt(state: &AppState, chat: &Owned) -> Result<Chat, ServiceError> {
    Ok(state.store.interrupt(chat.id).await?)
}

/// Makes the branch through `message` (to its newest message) the chat's current one.
pub async fn switch_branch(
    state: &AppState,
    chat: &Owned,
    message: i64,
) -> Result<Chat, ServiceError> {
    Ok(state.store.switch_branch(chat.id, message).await?)
}

/// Writes a new reply beside a reply (named by the reply or by the user message before it).
pub async fn regenerate(
    state: &AppState,
    chat: &Owned,
    message: i64,
) -> Result<Chat, ServiceError> {
    Ok(state.store.regenerate(chat.id, message).await?)
}

/// Has the model carry on the reply the user stopped.
pub(crate) async fn continue_reply(state: &AppState, chat: &Owned) -> Result<Chat, ServiceError> {
    Ok(state.store.continue_reply(chat.id).await?)
}

/// Runs the failed turn again, as the history stands.
pub(crate) async fn retry(state: &AppState, chat: &Owned) -> Result<Chat, ServiceError> {
    Ok(state.store.retry_run(chat.id).await?)
}

/// Asks for a compaction of an idle chat: the worker summarises older history.
pub(crate) async fn compact(state: &AppState, chat: &Owned) -> Result<Chat, ServiceError> {
    Ok(state.store.request_compaction(chat.id).await?)
}

/// Deletes a message waiting in the chat's queue.
pub(crate) async fn delete_queued(
    state: &AppState,
    chat: &Owned,
    queued: QueueId,
) -> Result<Chat, ServiceError> {
    Ok(state.store.delete_queued(chat.id, queued).await?)
}

/// Makes a queued message the next one.
pub(crate) async fn promote_queued(
    state: &AppState,
    chat: &Owned,
    queued: QueueId,
) -> Result<Chat, ServiceError> {
    Ok(state.store.promote_queued(chat.id, queued).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_text_answers_waiting_calls_and_else_queues() {
        assert_eq!(
            busy_for_new_text(ChatStatus::RequiresAction),
            Busy::Interrupt
        );
        for status in [ChatStatus::Waiting, ChatStatus::Running, ChatStatus::Error] {
            assert_eq!(busy_for_new_text(status), Busy::Queue);
        }
    }

    #[test]
    fn a_message_id_that_is_no_number_is_not_found() {
        assert_eq!(message_id("42").unwrap(), 42);
        let error = message_id("x1").unwrap_err();
        assert!(matches!(&error, ServiceError::NotFound(m) if m == "message x1 not found"));
    }
}
