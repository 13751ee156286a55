//! The environment a tool's child process gets: an allow-list of the daemon's variables, never
//! the whole of it (API keys and database URLs live there).

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Variables passed from the daemon's environment to `run_command` children and MCP servers.
pub const ALLOWED: &[&str] = &[
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM",
];

/// The allowed variables that are set in the daemon's environment.
pub fn allowed() -> Vec<(OsString, OsString)> {
    pick(ALLOWED.iter().copied())
}

/// The environment of an MCP server: the allow-list, the variables its configuration passes
/// through by name, and the values it sets (which win).
pub fn for_server(
    passthrough: &[String],
    set: &BTreeMap<String, String>,
) -> Vec<(OsString, OsString)> {
    let mut vars: BTreeMap<OsString, OsString> = allowed().into_iter().collect();
    vars.extend(pick(passthrough.iter().map(String::as_str)));
    vars.extend(
        set.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    vars.into_iter().collect()
}

fn pick<'a>(names: impl Iterator<Item = &'a str>) -> Vec<(OsString, OsString)> {
    names
        .filter_map(|name| Some((OsString::from(name), std::env::var_os(name)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names in backquotes in the parenthesis that follows each "allow-list" of `text`.
    fn documented_lists(text: &str) -> Vec<Vec<String>> {
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        flat.match_indices("allow-list")
            .filter_map(|(at, _)| {
                let after = &flat[at..];
                let open = after.find('(')?;
                let close = open + after[open..].find(')')?;
                let inside = &after[open + 1..close];
                let names: Vec<String> = inside
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect();
                (open < 80 && !names.is_empty()).then_some(names)
            })
            .collect()
    }

    #[test]
    fn the_docs_list_the_allowed_variables_as_the_code_does() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut found = 0;
        for doc in ["README.md", "docs/security.md", "docs/configuration.md"] {
            let text = std::fs::read_to_string(root.join(doc)).unwrap();
            for names in documented_lists(&text) {
                assert_eq!(names, ALLOWED, "the allow-list in {doc}");
                found += 1;
            }
        }
        assert!(
            found >= 3,
            "the allow-list is written out in {found} places"
        );
    }

    #[test]
    fn a_server_gets_the_allow_list_its_passthrough_and_its_values() {
        // PATH is set in any test environment; a variable nobody lists is never passed.
        let unlisted = std::env::vars()
            .map(|(k, _)| k)
            .find(|k| !ALLOWED.contains(&k.as_str()))
            .expect("the test process has some variable outside the allow-list");
        let set = BTreeMap::from([("PATH".to_owned(), "/opt/x".to_owned())]);
        let env = for_server(&[], &set);
        let names: Vec<String> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert!(!names.contains(&unlisted), "{names:?}");
        assert!(env.contains(&(OsString::from("PATH"), OsString::from("/opt/x"))));
        let env = for_server(std::slice::from_ref(&unlisted), &BTreeMap::new());
        assert!(env.iter().any(|(k, _)| k.to_string_lossy() == unlisted));
    }
}
