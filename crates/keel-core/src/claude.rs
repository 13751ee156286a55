//! What Keel knows of Claude's model generations from a model's name alone.
//!
//! Anthropic's migration guide
//! (https://platform.claude.com/docs/en/about-claude/models/migration-guide): "Prefilling
//! assistant messages returns a 400 error on Claude 4.6 models." Later generations keep
//! that rule. Keel continues those models by instruction from the start; the mock provider
//! refuses their prefill as the API does. A name read wrongly costs one refused request:
//! the loop learns from the 400 ([`crate::classify::is_prefill_refusal`]).
//!
//! | name | version |
//! |---|---|
//! | `claude-sonnet-4-6`, `claude-opus-4-6-20260205`, `anthropic.claude-opus-4-6-v1:0` | 4.6 |
//! | `claude-3-7-sonnet-20250219`, `anthropic/claude-3.7-sonnet` | 3.7 |
//! | `claude-sonnet-4-20250514` (a date, not a minor version) | 4.0 |
//! | `claude-sonnet-5` | 5.0 |
//! | `claude-sonnet-latest`, `gpt-5` | none |

/// The first Claude version that refuses assistant prefill.
const NO_PREFILL_FROM: (u32, u32) = (4, 6);

/// The (major, minor) version of a Claude model named `model`, or `None` when the name is
/// not a versioned Claude name. Providers' spellings (Bedrock's `anthropic.` prefix and
/// `-v1:0` suffix, Vertex's `@date`, gateways' `vendor/` prefix, dots for dashes) read alike.
pub fn version(model: &str) -> Option<(u32, u32)> {
    let name = model.to_ascii_lowercase();
    let (_, rest) = name.split_once("claude")?;
    let mut tokens = rest
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .skip_while(|t| !is_number(t));
    let major = tokens.next().filter(|t| t.len() <= 2)?.parse().ok()?;
    // A date (`20250514`) after the major version is not a minor one.
    let minor = tokens
        .next()
        .filter(|t| is_number(t) && t.len() <= 2)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    Some((major, minor))
}

/// Whether the API refuses assistant prefill on `model`: Claude 4.6 and later.
pub fn refuses_prefill(model: &str) -> bool {
    version(model).is_some_and(|v| v >= NO_PREFILL_FROM)
}

fn is_number(token: &str) -> bool {
    token.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_every_providers_spelling() {
        for (name, expected) in [
            ("claude-sonnet-4-6", Some((4, 6))),
            ("claude-opus-4-6", Some((4, 6))),
            ("claude-opus-4-6-20260205", Some((4, 6))),
            ("anthropic.claude-opus-4-6-v1:0", Some((4, 6))),
            ("claude-sonnet-4-6@20260217", Some((4, 6))),
            ("anthropic/claude-sonnet-4.6", Some((4, 6))),
            ("anthropic/claude-4.6-sonnet", Some((4, 6))),
            ("claude-opus-4-7", Some((4, 7))),
            ("claude-sonnet-5", Some((5, 0))),
            ("Claude-Opus-4-6", Some((4, 6))),
            ("claude-haiku-4-5-20251001", Some((4, 5))),
            ("claude-sonnet-4-5", Some((4, 5))),
            ("claude-opus-4-1-20250805", Some((4, 1))),
            ("claude-sonnet-4-20250514", Some((4, 0))),
            ("claude-3-7-sonnet-20250219", Some((3, 7))),
            ("claude-3-5-haiku-latest", Some((3, 5))),
            ("claude-2.1", Some((2, 1))),
            ("claude-sonnet-latest", None),
            ("claude-20250514", None),
            ("gpt-5", None),
            ("mock", None),
        ] {
            assert_eq!(version(name), expected, "{name}");
        }
    }

    #[test]
    fn claude_4_6_and_later_refuse_prefill() {
        for name in ["claude-sonnet-4-6", "claude-opus-4-7", "claude-sonnet-5"] {
            assert!(refuses_prefill(name), "{name}");
        }
        for name in [
            "claude-sonnet-4-5",
            "claude-opus-4-1-20250805",
            "claude-3-7-sonnet-20250219",
            "claude-sonnet-latest",
            "mock",
        ] {
            assert!(!refuses_prefill(name), "{name}");
        }
    }
}
