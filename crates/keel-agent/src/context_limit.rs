//! Finds a model's context limit in provider metadata.
//!
//! Providers report it under many names (`context_limit`, `contextWindow`,
//! `max_input_tokens`, "max context tokens", ...) and at any depth. Keys are compared as
//! normalised words so spelling conventions do not matter; the largest positive integer
//! found wins.

use serde_json::Value;

/// The largest context limit found anywhere in `metadata`.
pub fn discover(metadata: &Value) -> Option<u64> {
    let mut best = None;
    visit(metadata, &mut best);
    best
}

/// The discovered limit, else the configured fallback.
pub fn resolve(metadata: Option<&Value>, fallback: Option<u64>) -> Option<u64> {
    metadata.and_then(discover).or(fallback.filter(|l| *l > 0))
}

fn visit(value: &Value, best: &mut Option<u64>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if means_context_limit(key)
                    && let Some(n) = positive_integer(child)
                {
                    *best = Some(best.map_or(n, |b: u64| b.max(n)));
                }
                visit(child, best);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| visit(item, best)),
        _ => {}
    }
}

fn positive_integer(value: &Value) -> Option<u64> {
    let n = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f > 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }?;
    (n > 0).then_some(n)
}

fn means_context_limit(key: &str) -> bool {
    let words = words(key);
    let has = |w: &str| words.iter().any(|x| x == w);
    let context = has("context") || has("ctx");
    let sized = has("limit") || has("window") || has("length") || has("size") || has("tokens");
    (context && sized) || (has("max") && has("input") && has("tokens"))
}

/// Splits a key into lowercase words at case changes, digits boundaries and punctuation.
fn words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for ch in key.chars() {
        if !ch.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if ch.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = ch.is_lowercase() || ch.is_ascii_digit();
        current.extend(ch.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_limits_under_many_spellings_and_depths() {
        assert_eq!(discover(&json!({"context_limit": 8192})), Some(8192));
        assert_eq!(
            discover(&json!({"openai": {"contextWindow": 128000}})),
            Some(128000)
        );
        assert_eq!(
            discover(&json!({"a": [{"model": {"max_input_tokens": "200000"}}]})),
            Some(200000)
        );
        assert_eq!(discover(&json!({"Max Context Tokens": 4096})), Some(4096));
        assert_eq!(
            discover(&json!({"x": {"context_length": 1000}, "contextLimit": 5000})),
            Some(5000)
        );
    }

    #[test]
    fn ignores_unrelated_and_non_positive_values() {
        assert_eq!(
            discover(&json!({"max_tokens": 4096, "context_limit": 0})),
            None
        );
        assert_eq!(discover(&json!({"context_limit": -5})), None);
        assert_eq!(discover(&json!({"context": "big"})), None);
    }

    #[test]
    fn falls_back_when_metadata_has_none() {
        assert_eq!(resolve(Some(&json!({})), Some(4096)), Some(4096));
        assert_eq!(resolve(None, None), None);
        assert_eq!(
            resolve(Some(&json!({"context_window": 10})), Some(4096)),
            Some(10)
        );
    }
}
