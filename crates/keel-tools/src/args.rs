//! The model-facing side of a built-in tool's arguments: the JSON Schema offered to the model
//! (generated from the Rust argument struct) and parsing of the JSON text it sends back.

use std::sync::OnceLock;

use keel_agent::ToolError;
use keel_core::ToolDefinition;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A function tool definition whose parameters are the JSON Schema of `T`, generated once
/// into `cache`: a run asks for its tools' definitions at every step.
pub(crate) fn definition<T: JsonSchema>(
    cache: &'static OnceLock<ToolDefinition>,
    name: &str,
    description: &str,
) -> ToolDefinition {
    cache
        .get_or_init(|| {
            let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut schema {
                // Metadata about the schema, not the arguments; some providers reject unknown
                // keys.
                map.remove("$schema");
                map.remove("title");
            }
            ToolDefinition::function(name, description, schema)
        })
        .clone()
}

/// The [`definition`] of a tool whose arguments are `$args`, with the cache it needs: each
/// expansion holds its own.
macro_rules! tool_definition {
    ($args:ty, $name:expr, $description:expr $(,)?) => {{
        static DEFINITION: std::sync::OnceLock<keel_core::ToolDefinition> =
            std::sync::OnceLock::new();
        $crate::args::definition::<$args>(&DEFINITION, $name, $description)
    }};
}
pub(crate) use tool_definition;

/// Parses the model's argument text. Empty text counts as `{}`, which models send for tools
/// without required parameters.
pub(crate) fn parse<T: DeserializeOwned>(tool: &str, args: &str) -> Result<T, ToolError> {
    let text = if args.trim().is_empty() { "{}" } else { args };
    serde_json::from_str(text).map_err(|e| ToolError(format!("invalid arguments for {tool}: {e}")))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// A path.
        path: String,
        count: Option<u32>,
    }

    #[test]
    fn schema_is_an_object_schema_without_metadata() {
        static CACHE: OnceLock<ToolDefinition> = OnceLock::new();
        let def = definition::<Args>(&CACHE, "t", "d");
        // Generated once, then the same definition.
        assert_eq!(definition::<Args>(&CACHE, "t", "d"), def);
        let p = &def.parameters;
        assert_eq!(p["type"], "object");
        assert!(p.get("$schema").is_none());
        assert!(p.get("title").is_none());
        assert_eq!(p["required"], serde_json::json!(["path"]));
        assert_eq!(p["properties"]["path"]["description"], "A path.");
    }

    #[test]
    fn malformed_arguments_are_a_clear_error() {
        let err = parse::<Args>("t", "{not json").unwrap_err();
        assert!(err.0.starts_with("invalid arguments for t: "), "{err}");
        let err = parse::<Args>("t", "{}").unwrap_err();
        assert!(err.0.contains("missing field `path`"), "{err}");
        let err = parse::<Args>("t", "[1]").unwrap_err();
        assert!(err.0.starts_with("invalid arguments for t"), "{err}");
    }
}
