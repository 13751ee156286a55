//! Making a chat and finding the caller's: the checks every way of making a chat shares
//! (model, step limit, client-side tools, idempotency key), and ownership.

use std::collections::HashSet;
use std::ops::Deref;

use keel_core::Part;
use keel_store::{Chat, ChatId, NewChat, NewMessage, StoreError};

use crate::api::dto::ClientTool;
use crate::api::state::AppState;
use crate::service::error::ServiceError;

/// A chat read for its owner: what the operations on an existing chat take, so none runs
/// on a chat whose ownership was not checked.
#[derive(Debug)]
pub struct Owned(Chat);

impl Owned {
    pub fn into_inner(self) -> Chat {
        self.0
    }
}

impl Deref for Owned {
    type Target = Chat;

    fn deref(&self) -> &Chat {
        &self.0
    }
}

/// The chat, if it exists and belongs to `owner` (others' chats do not exist).
pub async fn owned_chat(state: &AppState, owner: &str, id: ChatId) -> Result<Owned, ServiceError> {
    match state.store.get_chat(id).await {
        Ok(chat) if chat.owner == owner => Ok(Owned(chat)),
        // Any not-found of the read, as the chat's own.
        Ok(_) | Err(StoreError::NotFound { .. }) => Err(ServiceError::chat_not_found(id)),
        Err(error) => Err(error.into()),
    }
}

/// What a client may choose about a new chat.
#[derive(Debug, Default)]
pub struct ChatSettings {
    /// The model, or the default one when absent.
    pub model: Option<String>,
    pub title: Option<String>,
    pub system: Option<String>,
    pub tools: Vec<ClientTool>,
    pub max_steps: Option<i64>,
}

/// A chat to create: `history` (turns a client brings along), then `parts` (the new user
/// message, or nothing when `history` ends with tool results).
#[derive(Debug)]
pub struct NewChatInput {
    pub owner: String,
    pub settings: ChatSettings,
    pub history: Vec<NewMessage>,
    pub parts: Vec<Part>,
    /// Already scoped to the owner (see `idempotency_key`).
    pub idempotency_key: Option<String>,
}

/// Creates a chat after the checks of its settings, in one transaction.
pub async fn create_chat(state: &AppState, input: NewChatInput) -> Result<Chat, ServiceError> {
    let settings = input.settings;
    let model = check_settings(state, settings.model, settings.max_steps, &settings.tools)?;
    let chat = state
        .store
        .create_chat(NewChat {
            owner: input.owner,
            title: settings.title,
            model,
            system: settings.system,
            tools: serde_json::to_value(&settings.tools).unwrap_or_default(),
            max_steps: settings.max_steps,
            history: input.history,
            parts: input.parts,
            idempotency_key: input.idempotency_key,
        })
        .await?;
    Ok(chat)
}

/// Creates a chat under a client's own id for it (`alias`, unique per owner). When a
/// concurrent request named another chat by the same alias first, the chat made here goes
/// again and the answer is a conflict.
pub async fn create_aliased_chat(
    state: &AppState,
    input: NewChatInput,
    alias: &str,
) -> Result<Chat, ServiceError> {
    let owner = input.owner.clone();
    let chat = create_chat(state, input).await?;
    let named = state.store.claim_alias(&owner, alias, chat.id).await?;
    if named != chat.id {
        state.store.delete_chat(chat.id).await?;
        return Err(ServiceError::Conflict(
            "another request started this chat at the same time".into(),
        ));
    }
    Ok(chat)
}

/// The model a new chat runs (`model`, or the default one when absent), after checking it,
/// the chat's step limit and its client-side tools as every way of making a chat does.
pub(crate) fn check_settings(
    state: &AppState,
    model: Option<String>,
    max_steps: Option<i64>,
    tools: &[ClientTool],
) -> Result<String, ServiceError> {
    let model = model.unwrap_or_else(|| state.models.default_id().to_owned());
    check_model(state, &model)?;
    check_steps_and_tools(max_steps, tools)?;
    Ok(model)
}

/// `model` is one the daemon serves.
pub(crate) fn check_model(state: &AppState, model: &str) -> Result<(), ServiceError> {
    match state.models.get(model) {
        Some(_) => Ok(()),
        None => Err(ServiceError::Invalid(format!(
            "unknown model `{model}`; see GET /api/v1/models"
        ))),
    }
}

/// A step limit of 1 to 1000, and client-side tools of unique names whose parameters are a
/// JSON Schema object (or absent).
fn check_steps_and_tools(max_steps: Option<i64>, tools: &[ClientTool]) -> Result<(), ServiceError> {
    if let Some(steps) = max_steps
        && !(1..=1000).contains(&steps)
    {
        return Err(ServiceError::Invalid(
            "max_steps must be between 1 and 1000".into(),
        ));
    }
    let mut names = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let valid = !tool.name.is_empty()
            && tool.name.len() <= 64
            && tool
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid || !names.insert(tool.name.as_str()) {
            return Err(ServiceError::Invalid(format!(
                "tools[{i}].name must be a unique name of 1 to 64 letters, digits, _ or -"
            )));
        }
        if !(tool.parameters.is_null() || tool.parameters.is_object()) {
            return Err(ServiceError::Invalid(format!(
                "tools[{i}].parameters must be a JSON Schema object"
            )));
        }
    }
    Ok(())
}

/// 1 to 255 visible ASCII characters, spaces allowed inside (as the OpenAPI pattern says).
fn is_idempotency_key(key: &str) -> bool {
    let visible = |c: char| c.is_ascii_graphic();
    (1..=255).contains(&key.len())
        && key.chars().all(|c| c == ' ' || visible(c))
        && key.starts_with(visible)
        && key.ends_with(visible)
}

/// The idempotency key a client sent (`raw`, the header's bytes), scoped to `owner` so two
/// users' keys never meet.
pub(crate) fn idempotency_key(
    owner: &str,
    raw: Option<&[u8]>,
) -> Result<Option<String>, ServiceError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let key = std::str::from_utf8(raw)
        .ok()
        .filter(|k| is_idempotency_key(k))
        .ok_or_else(|| {
            ServiceError::Invalid("Idempotency-Key must be 1 to 255 visible characters".into())
        })?;
    Ok(Some(format!("{owner}:{key}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, parameters: serde_json::Value) -> ClientTool {
        serde_json::from_value(serde_json::json!({"name": name, "parameters": parameters})).unwrap()
    }

    #[test]
    fn idempotency_keys_are_visible_ascii_with_inner_spaces() {
        assert!(is_idempotency_key("a"));
        assert!(is_idempotency_key("order 42/retry"));
        for bad in ["", " a", "a ", "a\tb", "é", &"x".repeat(256)] {
            assert!(!is_idempotency_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_idempotency_key_is_scoped_to_its_owner() {
        assert_eq!(idempotency_key("ann", None).unwrap(), None);
        let key = idempotency_key("ann", Some(b"k 1")).unwrap();
        assert_eq!(key.as_deref(), Some("ann:k 1"));
        assert!(matches!(
            idempotency_key("ann", Some(b" k")),
            Err(ServiceError::Invalid(_))
        ));
    }

    #[test]
    fn steps_and_tools_are_checked_before_a_chat_is_made() {
        let ok = [tool("a_b-1", serde_json::json!({"type": "object"}))];
        assert!(check_steps_and_tools(Some(1000), &ok).is_ok());
        assert!(check_steps_and_tools(Some(0), &ok).is_err());
        let twice = [
            tool("a", serde_json::Value::Null),
            tool("a", serde_json::Value::Null),
        ];
        let error = check_steps_and_tools(None, &twice).unwrap_err();
        assert!(error.to_string().starts_with("tools[1].name"));
        let bad = [tool("a", serde_json::json!([]))];
        assert!(check_steps_and_tools(None, &bad).is_err());
        assert!(check_steps_and_tools(None, &[tool("a b", serde_json::Value::Null)]).is_err());
    }
}
