//! OpenAI Responses: continuing a stored response and replaying reasoning.
//!
//! From the API reference for `POST /v1/responses`
//! (https://platform.openai.com/docs/api-reference/responses/create) and the reasoning guide
//! (https://platform.openai.com/docs/guides/reasoning#encrypted-reasoning-items):
//!
//! * `previous_response_id` must name a response the server stored (`store` true, not
//!   expired); otherwise `400 previous_response_not_found`.
//! * With `store: false` nothing is kept server-side, so a reasoning item can be replayed
//!   only with the `encrypted_content` the earlier response returned — which it returns only
//!   when asked with `include: ["reasoning.encrypted_content"]`. A reasoning item sent by id
//!   alone is then an unknown item: `400`.

use serde_json::Value;

use super::Violation;

/// The include value that asks for encrypted reasoning.
pub(crate) const ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// Checks a Responses request; `stored` says whether a response id is known.
pub(crate) fn check(request: &Value, stored: impl Fn(&str) -> bool) -> Result<(), Violation> {
    if let Some(id) = request["previous_response_id"].as_str()
        && !stored(id)
    {
        return Err(
            Violation::new(format!("Previous response with id '{id}' not found."))
                .code("previous_response_not_found")
                .param("previous_response_id"),
        );
    }
    if request["store"].as_bool() == Some(false) {
        let unreplayable = request["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["type"] == "reasoning")
            .find(|item| item["encrypted_content"].as_str().is_none_or(str::is_empty));
        if let Some(item) = unreplayable {
            let id = item["id"].as_str().unwrap_or_default();
            return Err(Violation::new(format!(
                "Item with id '{id}' not found. Items are not persisted when `store` is set to \
                 false. Try again with `store` set to true, or remove this item from your input."
            ))
            .param("input"));
        }
    }
    Ok(())
}

/// Whether the response may carry reasoning's `encrypted_content`: only when asked for.
pub(crate) fn returns_encrypted_reasoning(request: &Value) -> bool {
    request["include"]
        .as_array()
        .is_some_and(|include| include.iter().any(|v| v == ENCRYPTED_REASONING))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn known(id: &str) -> bool {
        id == "resp_1"
    }

    #[test]
    fn an_unknown_previous_response_is_refused() {
        let request = json!({"previous_response_id": "resp_gone", "input": []});
        let violation = check(&request, known).unwrap_err();
        assert_eq!(violation.code, Some("previous_response_not_found"));
        assert_eq!(
            violation.message,
            "Previous response with id 'resp_gone' not found."
        );
        assert!(check(&json!({"previous_response_id": "resp_1"}), known).is_ok());
        assert!(check(&json!({"input": []}), known).is_ok());
    }

    #[test]
    fn reasoning_replayed_without_storage_needs_its_encrypted_content() {
        let by_id = json!({"store": false, "input": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ]});
        let violation = check(&by_id, known).unwrap_err();
        assert!(violation.message.contains("Item with id 'rs_1' not found"));
        let encrypted = json!({"store": false, "input": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        ]});
        assert!(check(&encrypted, known).is_ok());
        let stored = json!({"store": true, "input": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ]});
        assert!(check(&stored, known).is_ok());
    }

    #[test]
    fn encrypted_reasoning_is_returned_only_when_included() {
        assert!(returns_encrypted_reasoning(
            &json!({"include": ["reasoning.encrypted_content"]})
        ));
        assert!(!returns_encrypted_reasoning(&json!({"include": []})));
        assert!(!returns_encrypted_reasoning(&json!({})));
    }
}
