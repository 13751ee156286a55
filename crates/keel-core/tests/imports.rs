//! No two source files of a crate import each other. A pair that does is one module split in
//! two, or two modules each owning half of a concept; either way a reader cannot understand
//! one without the other. The check reads the sources as text: every `crate::`, `super::`
//! and `self::` path outside comments and test modules names the file it reaches.
#![allow(clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let mut pairs = Vec::new();
    for entry in std::fs::read_dir(crates_dir()).expect("the crates folder is readable") {
        let src = entry.expect("a crate folder").path().join("src");
        if src.is_dir() {
            pairs.extend(mutual_imports(&src));
        }
    }
    assert!(
        pairs.is_empty(),
        "files that import each other:\n{}",
        pairs.join("\n")
    );
}

#[test]
fn a_pair_that_imports_each_other_is_found() {
    let dir = tempfile_dir("pair");
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").expect("write");
    std::fs::write(dir.join("a.rs"), "use crate::b::B;\npub struct A;\n").expect("write");
    std::fs::write(
        dir.join("b.rs"),
        "// crate::a::A in a comment does not count\npub struct B(super::a::A);\n",
    )
    .expect("write");
    let pairs = mutual_imports(&dir);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    std::fs::write(dir.join("b.rs"), "// use crate::a::A;\npub struct B;\n").expect("write");
    assert!(mutual_imports(&dir).is_empty());
    std::fs::remove_dir_all(&dir).expect("clean up");
}

fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-imports-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

/// The pairs of files under `src` that import each other, as `a <-> b`.
fn mutual_imports(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut edges: HashMap<PathBuf, BTreeSet<PathBuf>> = HashMap::new();
    for file in &files {
        let module = module_path(src, file);
        let text = std::fs::read_to_string(file).expect("a source file is readable");
        for path in referenced_paths(&code_outside_tests(&text)) {
            let (anchor, rest) = path.split_first().expect("a path has a first segment");
            let base: Vec<String> = match anchor.as_str() {
                "crate" => Vec::new(),
                "super" => module[..module.len().saturating_sub(1)].to_vec(),
                _ => module.clone(),
            };
            let segments: Vec<String> = base.into_iter().chain(rest.iter().cloned()).collect();
            if let Some(target) = resolve(src, &segments)
                && target != *file
            {
                edges.entry(file.clone()).or_default().insert(target);
            }
        }
    }
    let mut pairs = BTreeSet::new();
    for (from, targets) in &edges {
        for to in targets {
            if edges.get(to).is_some_and(|back| back.contains(from)) {
                let (a, b) = if from < to { (from, to) } else { (to, from) };
                pairs.insert(format!("{} <-> {}", a.display(), b.display()));
            }
        }
    }
    pairs.into_iter().collect()
}

/// A file's module path from the crate root: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("the file is under src");
    let mut segments: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(
        segments.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segments.pop();
    }
    segments
}

/// The source without comment lines and without an inline `mod tests` (tests may reach
/// anywhere in the crate).
fn code_outside_tests(text: &str) -> String {
    let code = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b`, `super::a` or `self::a` path, as its segments.
fn referenced_paths(code: &str) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut paths = Vec::new();
    for anchor in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(anchor) {
            let start = from + found;
            from = start + anchor.len();
            // `$crate::` and `my_crate::` are not this crate's paths.
            if code[..start].ends_with(|c: char| is_ident(c) || c == '$') {
                continue;
            }
            let mut segments = vec![anchor.trim_end_matches("::").to_owned()];
            let mut rest = &code[from..];
            loop {
                let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
                if len == 0 {
                    break;
                }
                segments.push(rest[..len].to_owned());
                rest = &rest[len..];
                match rest.strip_prefix("::") {
                    Some(next) => rest = next,
                    None => break,
                }
            }
            paths.push(segments);
        }
    }
    paths
}

/// The file that holds the longest prefix of `segments` that names a module.
fn resolve(src: &Path, segments: &[String]) -> Option<PathBuf> {
    (1..=segments.len()).rev().find_map(|len| {
        let base = segments[..len]
            .iter()
            .fold(src.to_path_buf(), |path, s| path.join(s));
        [base.with_extension("rs"), base.join("mod.rs")]
            .into_iter()
            .find(|candidate| candidate.is_file())
    })
}

fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            // A module's `tests.rs` may reach anywhere in the crate, as inline tests may.
            into.push(path);
        }
    }
}
