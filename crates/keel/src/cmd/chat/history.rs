//! The prompt's input history, kept across runs in a file of the user's state directory:
//! `$XDG_STATE_HOME/keel/history`, or `~/.local/state/keel/history` when that variable is
//! unset (the XDG Base Directory default).
//!
//! One entry per line, oldest first; a pasted block keeps its newlines as `\n` (and a
//! backslash is written `\\`), so every entry is one line of the file. Entries are appended
//! as they are typed; loading keeps the last [`MAX_ENTRIES`] and rewrites a longer file.
//! The directory is made private (0700) and the file readable by its owner only (0600):
//! what was typed can be as private as the chats.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// Entries kept.
pub const MAX_ENTRIES: usize = 1000;

/// Where the history lives, from `XDG_STATE_HOME` and `HOME` (a relative `XDG_STATE_HOME` is
/// ignored, as the specification says); `None` when neither gives a place.
pub fn path(state_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let state = state_home
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            home.map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local/state"))
        })?;
    Some(state.join("keel").join("history"))
}

/// The history file of this user, from the environment.
pub fn default_path() -> Option<PathBuf> {
    path(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

/// One entry as one line of the file.
pub fn encode(entry: &str) -> String {
    let mut line = String::with_capacity(entry.len());
    for c in entry.chars() {
        match c {
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            c => line.push(c),
        }
    }
    line
}

/// The entry a line of the file holds.
pub fn decode(line: &str) -> String {
    let mut entry = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            entry.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => entry.push('\n'),
            Some('r') => entry.push('\r'),
            Some(other) => entry.push(other),
            None => entry.push('\\'),
        }
    }
    entry
}

/// The history file.
pub struct History {
    path: PathBuf,
}

impl History {
    pub fn at(path: PathBuf) -> Self {
        Self { path }
    }

    /// The last [`MAX_ENTRIES`] entries, oldest first; none when there is no file yet.
    pub fn load(&self) -> Vec<String> {
        let Ok(text) = fs::read_to_string(&self.path) else {
            return Vec::new();
        };
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        let keep = &lines[lines.len().saturating_sub(MAX_ENTRIES)..];
        if keep.len() < lines.len() {
            let mut kept = keep.join("\n");
            kept.push('\n');
            // Best effort: a history that cannot be shortened still works.
            let _ = write_private(&self.path, kept.as_bytes(), false);
        }
        keep.iter().map(|l| decode(l)).collect()
    }

    /// Adds an entry at the end of the file, creating it (and its directory) when needed.
    pub fn append(&self, entry: &str) -> std::io::Result<()> {
        if entry.trim().is_empty() {
            return Ok(());
        }
        let mut line = encode(entry);
        line.push('\n');
        write_private(&self.path, line.as_bytes(), true)
    }
}

fn write_private(path: &Path, bytes: &[u8], append: bool) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_under_the_state_directory() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            path(os("/s"), os("/home/u")),
            Some(PathBuf::from("/s/keel/history"))
        );
        assert_eq!(
            path(None, os("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/keel/history"))
        );
        assert_eq!(
            path(os("relative"), os("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/keel/history")),
            "a relative XDG_STATE_HOME is ignored"
        );
        assert_eq!(path(None, None), None);
    }

    #[test]
    fn entries_with_newlines_and_backslashes_round_trip_as_one_line() {
        for entry in [
            "plain",
            "one\ntwo\nthree",
            "C:\\path\\n not a newline",
            "end\\",
            "\r\n",
        ] {
            let line = encode(entry);
            assert!(!line.contains('\n'), "{line:?}");
            assert_eq!(decode(&line), entry);
        }
    }

    #[test]
    fn appended_entries_load_in_order_and_only_the_last_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::at(dir.path().join("keel/history"));
        assert!(history.load().is_empty());
        history.append("first").unwrap();
        history.append("  ").unwrap();
        history.append("two\nlines").unwrap();
        assert_eq!(history.load(), ["first", "two\nlines"]);
        for i in 0..MAX_ENTRIES {
            history.append(&format!("e{i}")).unwrap();
        }
        let loaded = history.load();
        assert_eq!(loaded.len(), MAX_ENTRIES);
        assert_eq!(loaded.last().map(String::as_str), Some("e999"));
        assert_eq!(History::at(dir.path().join("keel/history")).load(), loaded);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = fs::metadata(dir.path().join("keel/history"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
