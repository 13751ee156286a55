//! A source file, tests and benchmarks included, stays short enough to read in one sitting:
//! one over 600 lines says near its top why it is longer ("Longer than most files: …"), so
//! that growing past the budget is a decision someone wrote down, not an accident.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

const BUDGET: usize = 600;
const REASON: &str = "Longer than most files";
/// How far from the top the reason must stand: in the module doc.
const HEAD: usize = 40;

#[test]
fn a_source_file_over_the_budget_says_why_at_its_top() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("the crates folder is readable") {
        let krate = entry.expect("a crate folder").path();
        for part in ["src", "tests", "benches"] {
            let dir = krate.join(part);
            if dir.is_dir() {
                walk(&dir, &mut files);
            }
        }
    }
    let unexplained: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).expect("a source file is readable");
            let lines = text.lines().count();
            let explained = text.lines().take(HEAD).any(|line| line.contains(REASON));
            (lines > BUDGET && !explained).then(|| format!("{} ({lines} lines)", file.display()))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "over {BUDGET} lines with no \"{REASON}: …\" in their first {HEAD} lines:\n{}",
        unexplained.join("\n")
    );
}

fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}
