//! Errors of the mock's own making: directives it cannot understand.

/// A `#mock` directive that cannot be used. The server answers it with a 400 naming the
/// problem, so a typo in a test fails loudly instead of silently echoing.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("invalid #mock directive: {0}")]
    Json(#[source] serde_json::Error),
    #[error("invalid #mock directive: expected a JSON object")]
    NotAnObject,
    #[error("invalid #mock directive: `steps` cannot be combined with step field `{0}`")]
    StepsAndFields(String),
}
