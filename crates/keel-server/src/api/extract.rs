//! Request extraction with contract errors: JSON bodies, ids, the caller.

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use keel_core::{Part, PartKind};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::api::error::ApiError;

/// A JSON body whose every rejection is a contract error (400, 413 or 415).
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(Self(value))
    }
}

/// The authenticated caller (or the single local user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(ApiError::unauthorized)
    }
}

/// Parses a chat or queue id; a malformed id names nothing, so it is a 404.
pub(super) fn parse_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found(format!("{what} {raw} not found")))
}

/// The parts of a new user message: `text` or `parts` (text and file parts only).
pub fn user_parts(text: Option<String>, parts: Option<Vec<Part>>) -> Result<Vec<Part>, ApiError> {
    let parts = match (text, parts) {
        (Some(text), None) => vec![Part::text(text)],
        (None, Some(parts)) => parts,
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give either `text` or `parts`, not both"));
        }
        (None, None) => return Err(ApiError::invalid("a message needs `text` or `parts`")),
    };
    if parts.is_empty() {
        return Err(ApiError::invalid("`parts` must not be empty"));
    }
    let mut has_content = false;
    for (i, part) in parts.iter().enumerate() {
        match &part.kind {
            PartKind::Text { text } => has_content |= !text.trim().is_empty(),
            PartKind::File {
                media_type,
                data,
                url,
            } => {
                if media_type.trim().is_empty() || data.is_none() == url.is_none() {
                    return Err(ApiError::invalid(format!(
                        "parts[{i}]: a file part needs a media_type and exactly one of data or url"
                    )));
                }
                has_content = true;
            }
            _ => {
                return Err(ApiError::invalid(format!(
                    "parts[{i}]: a user message may hold only text and file parts"
                )));
            }
        }
    }
    if !has_content {
        return Err(ApiError::invalid("the message is empty"));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_parts_are_validated() {
        assert!(user_parts(Some("hi".into()), None).is_ok());
        assert!(user_parts(None, None).is_err());
        assert!(user_parts(Some("hi".into()), Some(vec![])).is_err());
        assert!(user_parts(Some("   ".into()), None).is_err());
        assert!(user_parts(None, Some(vec![Part::tool_call("a", "b", "{}", false)])).is_err());
        let file = Part::new(PartKind::File {
            media_type: "image/png".into(),
            data: None,
            url: None,
        });
        assert!(user_parts(None, Some(vec![file])).is_err());
    }

    #[test]
    fn malformed_ids_are_not_found() {
        assert_eq!(
            parse_id("nope", "chat").unwrap_err().code,
            crate::api::error::Code::NotFound
        );
    }
}
