//! The two documents a newcomer reads first stay short enough to read and never point at
//! a file that is gone: `ARCHITECTURE.md` (the code map) and `docs/benchmarks.md` (the
//! current figures); and every picture a document shows (`![…](PATH)`) is in the
//! repository. They live here, in the crate with the fewest dependencies, because they only
//! read files.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

const ARCHITECTURE: &str = "ARCHITECTURE.md";
const BENCHMARKS: &str = "docs/benchmarks.md";
const MAX_WIDTH: usize = 100;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(doc: &str) -> String {
    std::fs::read_to_string(root().join(doc)).expect("the document is in the repository")
}

#[test]
fn the_architecture_and_the_benchmarks_stay_within_their_line_budgets() {
    for (doc, budget) in [(ARCHITECTURE, 350), (BENCHMARKS, 300)] {
        let lines = read(doc).lines().count();
        assert!(
            lines < budget,
            "{doc} has {lines} lines; keep it under {budget}"
        );
    }
}

#[test]
fn the_architecture_and_the_benchmarks_wrap_their_lines() {
    for doc in [ARCHITECTURE, BENCHMARKS] {
        let long: Vec<String> = read(doc)
            .lines()
            .enumerate()
            // A table row cannot be wrapped; everything else can.
            .filter(|(_, line)| !line.starts_with('|') && line.chars().count() > MAX_WIDTH)
            .map(|(number, line)| format!("{doc}:{}: {line}", number + 1))
            .collect();
        assert!(
            long.is_empty(),
            "lines over {MAX_WIDTH} characters:\n{}",
            long.join("\n")
        );
    }
}

#[test]
fn every_path_the_architecture_and_the_benchmarks_name_exists() {
    let root = root();
    let mut missing = Vec::new();
    for doc in [ARCHITECTURE, BENCHMARKS] {
        for named in named_paths(&read(doc)) {
            if !resolves(&root, &named) {
                missing.push(format!("{doc}:{}: `{}`", named.line, named.path));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_picture_a_document_shows_is_in_the_repository() {
    let root = root();
    let mut docs = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/ is in the repository") {
        let path = entry.expect("docs/ can be listed").path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    let mut missing = Vec::new();
    let mut shown = 0;
    for doc in docs {
        let text = std::fs::read_to_string(&doc).expect("the document can be read");
        for target in pictures(&text) {
            shown += 1;
            let local = !target.contains("://") && !target.starts_with('/');
            let dir = doc.parent().expect("a document is in a folder");
            if !local || !dir.join(&target).is_file() {
                missing.push(format!("{}: {target}", doc.display()));
            }
        }
    }
    assert!(shown > 0, "no document shows a picture");
    assert!(
        missing.is_empty(),
        "pictures that are not in the repository:\n{}",
        missing.join("\n")
    );
}

/// The targets of the Markdown images in `text` (`![alt](target)`, the alt text on one line
/// or several).
fn pictures(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("![") {
        rest = &rest[start + 2..];
        let Some(close) = rest.find("](") else {
            break;
        };
        let after = &rest[close + 2..];
        if let Some(end) = after.find(')') {
            found.push(after[..end].trim().to_owned());
        }
        rest = after;
    }
    found
}

#[test]
fn a_file_name_in_a_crates_section_is_looked_for_in_that_crate() {
    let doc = "## Map\n`docs/api.md`\n### `crates/keel-core`\n`cancel.rs`, `Cancel`, `a/b`\n";
    let named = named_paths(doc);
    let found: Vec<(Option<&str>, &str)> = named
        .iter()
        .map(|n| (n.krate.as_deref(), n.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (None, "docs/api.md"),
            (Some("keel-core"), "cancel.rs"),
            (Some("keel-core"), "a/b")
        ]
    );
    assert!(resolves(&root(), &named[1]));
    assert!(!resolves(&root(), &named[2]));
}

/// A path a document names in backticks, with the crate whose section names it.
#[derive(Debug)]
struct Named {
    path: String,
    line: usize,
    krate: Option<String>,
}

/// The backticked spans outside code blocks that look like repository paths: a file name
/// with an extension, or anything with a slash that is not a URL, an absolute path or a
/// command line. A heading `### `crates/NAME`` opens that crate's section, any other
/// heading closes it.
fn named_paths(doc: &str) -> Vec<Named> {
    let mut named = Vec::new();
    let mut krate = None;
    let mut in_code = false;
    for (number, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if line.starts_with('#') {
            krate = line
                .trim_start_matches('#')
                .trim()
                .strip_prefix("`crates/")
                .and_then(|rest| rest.strip_suffix('`'))
                .map(str::to_owned);
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            if looks_like_a_path(span) {
                named.push(Named {
                    path: span.to_owned(),
                    line: number + 1,
                    krate: krate.clone(),
                });
            }
        }
    }
    named
}

fn looks_like_a_path(span: &str) -> bool {
    const EXTENSIONS: [&str; 8] = [".rs", ".md", ".toml", ".sh", ".sql", ".json", ".js", ".py"];
    let plain = span
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c));
    plain
        && !span.starts_with('/')
        && (span.contains('/') || EXTENSIONS.iter().any(|ext| span.ends_with(ext)))
}

/// A path resolves from the repository's root, or, in a crate's section, as the tail of a
/// path inside that crate (`worker/run.rs` for `crates/keel-server/src/worker/run.rs`).
fn resolves(root: &Path, named: &Named) -> bool {
    if root.join(&named.path).exists() {
        return true;
    }
    let Some(krate) = &named.krate else {
        return false;
    };
    let tail = format!("/{}", named.path.trim_end_matches('/'));
    let mut entries = Vec::new();
    walk(&root.join("crates").join(krate), &mut entries);
    entries
        .iter()
        .any(|entry| entry.to_string_lossy().ends_with(&tail))
}

fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, into);
        }
        into.push(path);
    }
}
