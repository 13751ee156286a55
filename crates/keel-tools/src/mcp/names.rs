//! Tool names as the model sees them: `SERVER__TOOL`, restricted to `[a-zA-Z0-9_-]{1,64}`,
//! which every provider accepts.
//!
//! Names must be stable across restarts (a stored conversation refers to them), so
//! shortening uses a fixed hash (FNV-1a) of the original name rather than a counter.

use std::collections::HashSet;

/// The longest name providers accept.
pub const MAX_NAME_LEN: usize = 64;
const SEPARATOR: &str = "__";

/// `name` with every character outside `[a-zA-Z0-9_-]` replaced by `_`; `_` when empty.
pub fn sanitise(name: &str) -> String {
    let out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() { "_".to_owned() } else { out }
}

fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// `name` cut to fit with an `_XXXXXXXX` hash of `original` at the end.
fn hashed(name: &str, original: &str) -> String {
    let suffix = format!("_{:08x}", fnv1a(original));
    // `name` is ASCII after sanitising, so any byte index is a character boundary.
    let keep = name.len().min(MAX_NAME_LEN - suffix.len());
    format!("{}{suffix}", &name[..keep])
}

/// The exposed names of a server's tools, in order. `prefix` is the sanitised server name.
/// A name that is too long, or that collides with an earlier one after sanitising, gets a hash
/// of the original tool name.
pub fn exposed_names<'a>(prefix: &str, tools: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = HashSet::new();
    tools
        .into_iter()
        .map(|tool| {
            let plain = format!("{prefix}{SEPARATOR}{}", sanitise(tool));
            let mut name = if plain.len() > MAX_NAME_LEN {
                hashed(&plain, tool)
            } else {
                plain
            };
            if seen.contains(&name) {
                name = hashed(&name, &format!("{prefix}{SEPARATOR}{tool}"));
            }
            seen.insert(name.clone());
            name
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        (1..=MAX_NAME_LEN).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn plain_names_are_prefixed() {
        assert_eq!(
            exposed_names("files", ["read_file", "list-dir"]),
            ["files__read_file", "files__list-dir"]
        );
    }

    #[test]
    fn odd_characters_are_replaced() {
        assert_eq!(sanitise("my server.v2/é"), "my_server_v2__");
        assert_eq!(sanitise(""), "_");
        assert_eq!(exposed_names("s", ["a.b"]), ["s__a_b"]);
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let long = "t".repeat(100);
        let names = exposed_names("server", [long.as_str()]);
        assert_eq!(names[0].len(), MAX_NAME_LEN);
        assert!(valid(&names[0]));
        assert_eq!(names, exposed_names("server", [long.as_str()]));
        assert_ne!(
            names[0],
            exposed_names("server", [format!("{long}x").as_str()])[0]
        );
    }

    #[test]
    fn collisions_after_sanitising_are_told_apart() {
        let names = exposed_names("s", ["a.b", "a_b", "a b"]);
        assert_eq!(names[0], "s__a_b");
        assert!(names.iter().all(|n| valid(n)));
        let unique: HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), 3);
    }
}
