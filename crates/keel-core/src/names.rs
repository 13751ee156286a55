//! The names serde gives an enum's unit variants, after its renames: the one spelling of a
//! value on the wire, in the database, in metrics and in logs, written once in the enum's
//! serde attributes.

use serde::Serialize;

/// The serialised name of the unit variant `value`.
pub fn serde_name<T: Serialize>(value: &T) -> &'static str {
    // Callers pass unit variants, which always serialise as their name; anything else would
    // be a caller's mistake that tests of its enum catch as an empty name.
    serde_variant::to_variant_name(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Shade {
        DeepBlue,
        #[serde(rename = "red/ish")]
        Red,
    }

    #[test]
    fn a_variant_is_named_as_serde_writes_it() {
        assert_eq!(serde_name(&Shade::DeepBlue), "deep_blue");
        assert_eq!(serde_name(&Shade::Red), "red/ish");
        assert_eq!(serde_json::to_value(Shade::DeepBlue).unwrap(), "deep_blue");
    }
}
