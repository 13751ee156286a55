//! `docs/configuration.md` checked against the loader: the keys it documents are exactly the
//! keys the loader accepts, and every TOML example in it and in the README loads.
//!
//! The accepted keys come from the configuration types themselves, so there is no second
//! list to keep: an unknown key is written into each table and `deny_unknown_fields` answers
//! with the names it would have accepted there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::config::{Config, Env, FileConfig, Overrides, RunsConfig, ServerConfig};

/// A key no configuration type has.
const PROBE: &str = "keel_probe_unknown_key";

/// How a table sits in the file: `[runs]` or `[[providers]]`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Table,
    Array,
}

/// The fields the loader accepts in the table at `path` (from the top of the file), or `None`
/// when the value there is not a table of named fields (a string, a list, a free map).
fn accepted_fields(path: &[(String, Shape)]) -> Option<Vec<String>> {
    let wrap = |shape: Shape, value: String| match shape {
        Shape::Table => value,
        Shape::Array => format!("[{value}]"),
    };
    let text = match path.split_first() {
        None => format!("{PROBE} = 1"),
        Some(((top, top_shape), rest)) => {
            let mut value = format!("{{ {PROBE} = 1 }}");
            for (key, shape) in rest.iter().rev() {
                value = format!("{{ {key} = {} }}", wrap(*shape, value));
            }
            format!("{top} = {}", wrap(*top_shape, value))
        }
    };
    let error = FileConfig::parse(&text, Path::new("probe"))
        .err()?
        .to_string();
    let (_, expected) = error.split_once(&format!("unknown field `{PROBE}`"))?;
    let expected = expected.lines().next().unwrap_or_default();
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Every leaf key the loader accepts, spelt as the documentation spells it: `listen`,
/// `runs.max_steps`, `providers[].name`.
fn accepted_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    walk(&mut Vec::new(), &mut keys);
    keys
}

fn walk(path: &mut Vec<(String, Shape)>, keys: &mut BTreeSet<String>) {
    let Some(fields) = accepted_fields(path) else {
        return;
    };
    for field in fields {
        let mut is_table = false;
        for shape in [Shape::Table, Shape::Array] {
            path.push((field.clone(), shape));
            if accepted_fields(path).is_some() {
                is_table = true;
                walk(path, keys);
            }
            path.pop();
            if is_table {
                break;
            }
        }
        if !is_table {
            keys.insert(spell(path, &field));
        }
    }
}

fn spell(path: &[(String, Shape)], field: &str) -> String {
    let mut spelt = String::new();
    for (key, shape) in path {
        spelt.push_str(key);
        if *shape == Shape::Array {
            spelt.push_str("[]");
        }
        spelt.push('.');
    }
    spelt.push_str(field);
    spelt
}

fn repository_file(name: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    (path, text)
}

/// The keys in the first column of the documentation's tables: rows that start with a
/// backquoted name.
fn documented_keys(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(key, _)| key.to_owned())
        .collect()
}

/// The ```toml blocks of a Markdown text, with the line each starts on.
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim() == "```toml" => current = Some((index + 1, String::new())),
            None => {}
            Some(_) if line.trim() == "```" => blocks.extend(current.take()),
            Some((_, block)) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

/// Every API key variable (`*_KEY`) is set, so examples that name one load; nothing else is,
/// so the examples alone decide the rest.
struct EveryKeySet;

impl Env for EveryKeySet {
    fn var(&self, name: &str) -> Option<String> {
        name.ends_with("_KEY").then(|| "example-key".to_owned())
    }
}

#[test]
fn the_probe_finds_keys_at_every_depth() {
    let keys = accepted_keys();
    for key in [
        "listen",
        "runs.max_steps",
        "providers[].kind",
        "mcp_servers[].env",
    ] {
        assert!(keys.contains(key), "{key} not found in {keys:?}");
    }
    assert!(!keys.iter().any(|k| k == "runs" || k == "providers"));
}

#[test]
fn the_configuration_page_documents_every_key_the_loader_accepts_and_no_other() {
    let (path, doc) = repository_file("docs/configuration.md");
    let accepted = accepted_keys();
    let documented = documented_keys(&doc);
    let undocumented: Vec<_> = accepted.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    let mut problems = String::new();
    for key in undocumented {
        problems.push_str(&format!(
            "\n  the loader accepts `{key}` but {} does not document it: add a row \
             \"| `{key}` | DEFAULT | MEANING |\" to its section",
            path.display()
        ));
    }
    for key in unknown {
        problems.push_str(&format!(
            "\n  {} documents `{key}` but the loader rejects it: remove or rename the row",
            path.display()
        ));
    }
    assert!(
        problems.is_empty(),
        "configuration keys out of step:{problems}"
    );
}

#[test]
fn every_toml_example_in_the_docs_loads() {
    let mut checked = 0;
    for name in ["docs/configuration.md", "README.md"] {
        let (path, text) = repository_file(name);
        for (line, block) in toml_blocks(&text) {
            let loaded = FileConfig::parse(&block, &path)
                .and_then(|file| Config::resolve(file, None, &Overrides::default(), &EveryKeySet));
            if let Err(error) = loaded {
                panic!(
                    "the TOML example at {}:{line} does not load: {error}",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} TOML examples found");
}

#[test]
fn the_complete_files_runs_and_server_tables_hold_the_defaults() {
    let (path, doc) = repository_file("docs/configuration.md");
    let (_, complete) = doc
        .split_once("## A complete file")
        .expect("the page has a complete file");
    let (_, block) = toml_blocks(complete)
        .into_iter()
        .next()
        .expect("the complete file is a TOML block");
    let file = FileConfig::parse(&block, &path).expect("the complete file parses");
    assert_eq!(
        file.runs,
        RunsConfig::default(),
        "[runs] of the complete file"
    );
    assert_eq!(
        file.server,
        ServerConfig::default(),
        "[server] of the complete file"
    );
}
