//! Changing an existing chat as a whole: its title, model and system prompt, archiving it,
//! deleting it.

use keel_store::{Chat, ChatUpdate};

use crate::api::state::AppState;
use crate::service::chats::{Owned, check_model};
use crate::service::error::ServiceError;

/// The longest title a client may set, in characters.
pub(crate) const TITLE_MAX_CHARS: usize = 200;

/// A title as a client sent it: trimmed, not empty, at most [`TITLE_MAX_CHARS`] characters,
/// one line without control characters. The error says what is wrong.
pub(crate) fn checked_title(title: &str) -> Result<String, String> {
    let title = title.trim();
    if title.is_empty() {
        return Err("title must not be empty".into());
    }
    if title.chars().count() > TITLE_MAX_CHARS {
        return Err(format!(
            "title must be at most {TITLE_MAX_CHARS} characters"
        ));
    }
    if title.chars().any(char::is_control) {
        return Err("title must be one line without control characters".into());
    }
    Ok(title.to_owned())
}

/// What to change about a chat; absent fields stay as they are.
#[derive(Debug, Default)]
pub struct ChatChanges {
    pub title: Option<String>,
    /// The model of the chat's next model call.
    pub model: Option<String>,
    pub system: Option<String>,
}

/// Changes a chat after checking every field, before anything is written.
pub async fn update_chat(
    state: &AppState,
    chat: &Owned,
    changes: ChatChanges,
) -> Result<Chat, ServiceError> {
    let update = checked_changes(changes)?;
    if let Some(model) = &update.model {
        check_model(state, model)?;
    }
    Ok(state.store.update_chat(chat.id, update).await?)
}

/// The store's update for `changes`: something to change, and a valid title.
fn checked_changes(changes: ChatChanges) -> Result<ChatUpdate, ServiceError> {
    if changes.title.is_none() && changes.model.is_none() && changes.system.is_none() {
        return Err(ServiceError::Invalid(
            "nothing to change: send `title` and/or `model`".into(),
        ));
    }
    let title = changes
        .title
        .as_deref()
        .map(checked_title)
        .transpose()
        .map_err(ServiceError::Invalid)?;
    Ok(ChatUpdate {
        title,
        model: changes.model,
        system: changes.system,
    })
}

/// Archives a chat, or brings it back.
pub(crate) async fn set_archived(
    state: &AppState,
    chat: &Owned,
    archived: bool,
) -> Result<Chat, ServiceError> {
    Ok(state.store.set_archived(chat.id, archived).await?)
}

/// Deletes a chat; an active run is stopped first.
pub(crate) async fn delete_chat(state: &AppState, chat: Owned) -> Result<(), ServiceError> {
    Ok(state.store.delete_chat(chat.id).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_trimmed_line_of_limited_length() {
        assert_eq!(checked_title("  Trip plans ").as_deref(), Ok("Trip plans"));
        assert!(checked_title("   ").is_err());
        assert!(checked_title("two\nlines").is_err());
        assert!(checked_title(&"é".repeat(TITLE_MAX_CHARS)).is_ok());
        assert!(checked_title(&"é".repeat(TITLE_MAX_CHARS + 1)).is_err());
    }

    #[test]
    fn a_change_names_something_and_its_title_is_checked() {
        assert!(matches!(
            checked_changes(ChatChanges::default()),
            Err(ServiceError::Invalid(_))
        ));
        let renamed = ChatChanges {
            title: Some(" New ".into()),
            ..ChatChanges::default()
        };
        assert_eq!(
            checked_changes(renamed).unwrap().title.as_deref(),
            Some("New")
        );
        let bad = ChatChanges {
            title: Some("\n".into()),
            model: Some("m".into()),
            ..ChatChanges::default()
        };
        assert!(checked_changes(bad).is_err());
        let system = ChatChanges {
            system: Some("Be brief.".into()),
            ..ChatChanges::default()
        };
        assert_eq!(
            checked_changes(system).unwrap().system.as_deref(),
            Some("Be brief.")
        );
    }
}
