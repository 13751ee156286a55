//! What a client reads of its chats: the list of them, one with its usage, and a chat's
//! messages by page or branch, with the checks of the page asked for.

use keel_store::{Chat, StoredMessage, UsageTotals};

use crate::api::dto::MAX_PAGE;
use crate::api::state::AppState;
use crate::service::chats::Owned;
use crate::service::error::ServiceError;

/// The caller's chats, newest first: `limit` of them (50 when absent, within 1 to 200)
/// before the chat `before` (a chat id), if given.
pub(crate) async fn list_chats(
    state: &AppState,
    owner: &str,
    before: Option<&str>,
    limit: Option<u32>,
) -> Result<Vec<Chat>, ServiceError> {
    let (before, limit) = chat_page(before, limit)?;
    Ok(state.store.list_chats(Some(owner), before, limit).await?)
}

fn chat_page(
    before: Option<&str>,
    limit: Option<u32>,
) -> Result<(Option<uuid::Uuid>, u32), ServiceError> {
    let before = match before {
        Some(raw) => Some(
            uuid::Uuid::parse_str(raw)
                .map_err(|_| ServiceError::Invalid("`before` must be a chat id".into()))?,
        ),
        None => None,
    };
    Ok((before, limit.unwrap_or(50).clamp(1, 200)))
}

/// The usage of a chat's runs so far.
pub(crate) async fn chat_usage(
    state: &AppState,
    chat: &Owned,
) -> Result<UsageTotals, ServiceError> {
    Ok(state.store.chat_usage(chat.id).await?)
}

/// Which messages a client asks for: after a message id, at most `limit`, of the branch
/// through a message (else the current one).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MessagesPage {
    pub after: Option<i64>,
    pub limit: Option<usize>,
    pub branch: Option<i64>,
}

/// The page asked for, checked: a non-negative `after`, a `limit` of 1 to [`MAX_PAGE`].
pub(crate) fn messages_page(
    after: Option<i64>,
    limit: Option<i64>,
    branch: Option<i64>,
) -> Result<MessagesPage, ServiceError> {
    if after.is_some_and(|a| a < 0) {
        return Err(ServiceError::Invalid(
            "`after` must be a non-negative integer".into(),
        ));
    }
    let limit = match limit {
        None => None,
        Some(limit @ 1..=MAX_PAGE) => usize::try_from(limit).ok(),
        Some(_) => {
            return Err(ServiceError::Invalid(format!(
                "`limit` must be between 1 and {MAX_PAGE}"
            )));
        }
    };
    Ok(MessagesPage {
        after,
        limit,
        branch,
    })
}

/// The committed messages of a page, in order.
pub(crate) async fn messages(
    state: &AppState,
    chat: &Owned,
    page: MessagesPage,
) -> Result<Vec<StoredMessage>, ServiceError> {
    let store = &state.store;
    Ok(match (page.branch, page.limit) {
        (Some(through), limit) => {
            store
                .branch_messages(chat.id, through, page.after, limit)
                .await?
        }
        (None, Some(limit)) => {
            let after = page.after.unwrap_or(0);
            store.messages_page(chat.id, after, false, limit).await?
        }
        (None, None) => store.list_messages(chat.id, page.after).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_page_has_a_chat_id_and_a_bounded_limit() {
        assert_eq!(chat_page(None, None).unwrap(), (None, 50));
        assert_eq!(chat_page(None, Some(0)).unwrap().1, 1);
        assert_eq!(chat_page(None, Some(5000)).unwrap().1, 200);
        assert!(matches!(
            chat_page(Some("nope"), None),
            Err(ServiceError::Invalid(_))
        ));
    }

    #[test]
    fn a_message_page_is_checked_before_any_read() {
        let page = messages_page(Some(3), Some(MAX_PAGE), Some(9)).unwrap();
        assert_eq!(
            (page.after, page.limit, page.branch),
            (Some(3), Some(1000), Some(9))
        );
        assert!(messages_page(Some(-1), None, None).is_err());
        assert!(messages_page(None, Some(0), None).is_err());
        assert!(messages_page(None, Some(MAX_PAGE + 1), None).is_err());
    }
}
