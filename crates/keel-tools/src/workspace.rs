//! Path confinement: the one directory the built-in tools may touch.
//!
//! Every path a model passes goes through [`Workspace::resolve`] before any file is opened.
//! The existing part of the path is resolved by the operating system (`canonicalize`), so `..`
//! segments and symbolic links are followed exactly as the kernel would follow them, and the
//! result must still lie inside the canonical workspace root. The part that does not exist yet
//! (a file or directories about to be created) may only contain plain names: a `..` there
//! could not be checked against the real directory tree.
//!
//! The check and the later open are two steps, so a process that swaps a directory for a
//! symbolic link in between could still redirect a write; the workspace is assumed not to be
//! shared with a hostile local process.

use std::io;
use std::path::{Path, PathBuf};

/// Why a path was refused or could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("path contains a NUL byte")]
    NulByte,
    #[error("path `{path}` is outside the workspace")]
    OutsideWorkspace { path: String },
    #[error("path `{path}` does not exist")]
    NotFound { path: String },
    #[error("cannot resolve path `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// The workspace could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot use workspace directory `{path}`: {source}")]
pub struct WorkspaceError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// A directory that confines every path the built-in tools use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Canonical: absolute, without symbolic links, so prefix checks are meaningful.
    root: PathBuf,
}

impl Workspace {
    /// Opens `root`, creating it when missing.
    pub fn new(root: &Path) -> Result<Self, WorkspaceError> {
        let error = |source| WorkspaceError {
            path: root.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(root).map_err(error)?;
        let root = root.canonicalize().map_err(error)?;
        if !root.is_dir() {
            return Err(error(io::Error::other("not a directory")));
        }
        Ok(Self { root })
    }

    /// The workspace of one user: the directory [`user_dir_name`] names below the root,
    /// created when missing. It must be a real directory, not a symbolic link: a link would let
    /// one user's directory point into another's.
    pub fn for_user(&self, user: &str) -> Result<Self, WorkspaceError> {
        let dir = self.root.join(user_dir_name(user));
        let error = |source| WorkspaceError {
            path: dir.clone(),
            source,
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(error(e)),
        }
        if !std::fs::symlink_metadata(&dir).map_err(error)?.is_dir() {
            return Err(error(io::Error::other(
                "a user's workspace must be a directory, not a link or a file",
            )));
        }
        Ok(Self { root: dir })
    }

    /// Whether `path` (existing or not) lies inside the workspace once every link of its
    /// existing part is followed.
    pub fn contains(&self, path: &Path) -> bool {
        let Ok(absolute) = std::path::absolute(path) else {
            return false;
        };
        let mut existing = absolute.as_path();
        let mut missing = Vec::new();
        let real = loop {
            if let Ok(real) = existing.canonicalize() {
                break real;
            }
            let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                return false;
            };
            missing.push(name);
            existing = parent;
        };
        let mut full = real;
        full.extend(missing.iter().rev());
        full.starts_with(&self.root)
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `path` (relative to the root, or absolute inside it) to an absolute path
    /// inside the workspace. The path need not exist; an empty path is the root itself.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, PathError> {
        if path.contains('\0') {
            return Err(PathError::NulByte);
        }
        let outside = || PathError::OutsideWorkspace {
            path: path.to_owned(),
        };
        let joined = self.root.join(path);

        // Split into the longest prefix that exists (as a directory entry, possibly a dangling
        // link) and the names below it that do not exist yet.
        let mut existing = joined.as_path();
        let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
        loop {
            match std::fs::symlink_metadata(existing) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(PathError::Io {
                        path: path.to_owned(),
                        source,
                    });
                }
            }
            // `file_name` is `None` for a trailing `..` (and the filesystem root): a `..` below
            // a missing directory cannot be checked against the real tree, and `parent` would
            // silently drop it.
            let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                return Err(outside());
            };
            missing.push(name);
            existing = parent;
        }

        let real = existing
            .canonicalize()
            .map_err(|source| match source.kind() {
                // The prefix exists as an entry but does not resolve: a dangling symbolic link,
                // which a write would follow to wherever it points.
                io::ErrorKind::NotFound => outside(),
                _ => PathError::Io {
                    path: path.to_owned(),
                    source,
                },
            })?;
        if !real.starts_with(&self.root) {
            return Err(outside());
        }
        let mut resolved = real;
        resolved.extend(missing.iter().rev());
        Ok(resolved)
    }

    /// Like [`Workspace::resolve`], for a path that must exist.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, PathError> {
        let resolved = self.resolve(path)?;
        if std::fs::symlink_metadata(&resolved).is_err() {
            return Err(PathError::NotFound {
                path: path.to_owned(),
            });
        }
        Ok(resolved)
    }

    /// How a resolved path is shown to the model: relative to the root.
    pub fn display(&self, resolved: &Path) -> String {
        match resolved.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => resolved.display().to_string(),
        }
    }
}

/// The directory name of a user's workspace: the name itself when it is a plain name of
/// letters, digits, `-`, `_` and `.` (not starting with a dot), else every other byte written
/// as `%XX`. Distinct users always get distinct directories and no name can reach outside the
/// root (`..`, `/` and NUL are always encoded).
pub fn user_dir_name(user: &str) -> String {
    let mut out = String::with_capacity(user.len());
    for (i, byte) in user.bytes().enumerate() {
        let plain =
            byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' || (byte == b'.' && i > 0);
        if plain {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if out.is_empty() {
        // An empty name never authenticates; it still gets a name that is not the root.
        out.push('%');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        (dir, ws)
    }

    #[test]
    fn plain_relative_paths_resolve_inside() {
        let (_dir, ws) = workspace();
        assert_eq!(ws.resolve("a/b.txt").unwrap(), ws.root().join("a/b.txt"));
        assert_eq!(ws.resolve("").unwrap(), ws.root());
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
        std::fs::create_dir(ws.root().join("d")).unwrap();
        assert_eq!(ws.resolve("d/../x").unwrap(), ws.root().join("x"));
    }

    #[test]
    fn absolute_path_inside_is_accepted() {
        let (_dir, ws) = workspace();
        let inside = ws.root().join("f.txt");
        assert_eq!(ws.resolve(inside.to_str().unwrap()).unwrap(), inside);
    }

    #[test]
    fn dot_dot_escapes_are_refused() {
        let (_dir, ws) = workspace();
        for p in [
            "..",
            "../x",
            "a/../../x",
            "../ws/../../etc/passwd",
            "new/../../x",
        ] {
            let err = ws.resolve(p).unwrap_err();
            assert!(
                matches!(err, PathError::OutsideWorkspace { .. }),
                "{p}: {err}"
            );
        }
    }

    #[test]
    fn absolute_path_outside_is_refused() {
        let (_dir, ws) = workspace();
        for p in ["/etc/passwd", "/", "/nonexistent/dir/file"] {
            assert!(matches!(
                ws.resolve(p).unwrap_err(),
                PathError::OutsideWorkspace { .. }
            ));
        }
    }

    #[test]
    fn symlinks_pointing_out_are_refused() {
        let (dir, ws) = workspace();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(&outside, ws.root().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("gone"), ws.root().join("dangling")).unwrap();
        for p in ["link", "link/secret", "link/new-file", "dangling"] {
            assert!(
                matches!(
                    ws.resolve(p).unwrap_err(),
                    PathError::OutsideWorkspace { .. }
                ),
                "{p}"
            );
        }
    }

    #[test]
    fn symlinks_inside_are_followed() {
        let (_dir, ws) = workspace();
        std::fs::create_dir(ws.root().join("real")).unwrap();
        std::os::unix::fs::symlink(ws.root().join("real"), ws.root().join("alias")).unwrap();
        assert_eq!(
            ws.resolve("alias/f").unwrap(),
            ws.root().join("real").join("f")
        );
    }

    #[test]
    fn nul_bytes_are_refused() {
        let (_dir, ws) = workspace();
        assert!(matches!(
            ws.resolve("a\0b").unwrap_err(),
            PathError::NulByte
        ));
    }

    #[test]
    fn user_directory_names_are_plain_and_distinct() {
        assert_eq!(user_dir_name("alice"), "alice");
        assert_eq!(user_dir_name("bob.smith-2_x"), "bob.smith-2_x");
        assert_eq!(user_dir_name(".."), "%2E.");
        assert_eq!(user_dir_name("."), "%2E");
        assert_eq!(user_dir_name("a/b"), "a%2Fb");
        assert_eq!(user_dir_name("a%2Fb"), "a%252Fb");
        assert_eq!(user_dir_name("é"), "%C3%A9");
        assert_eq!(user_dir_name(""), "%");
        let names = ["a/b", "a%2Fb", "a_b", "a.b", ".a", "%2Ea", "", "%"];
        let dirs: std::collections::HashSet<String> =
            names.iter().map(|n| user_dir_name(n)).collect();
        assert_eq!(dirs.len(), names.len());
    }

    #[test]
    fn each_user_gets_a_directory_of_their_own() {
        let (_dir, ws) = workspace();
        let alice = ws.for_user("alice").unwrap();
        let bob = ws.for_user("bob").unwrap();
        assert_eq!(alice.root(), ws.root().join("alice"));
        std::fs::write(bob.root().join("secret"), "s").unwrap();
        for path in ["../bob/secret", "/../bob/secret"] {
            assert!(alice.resolve(path).is_err(), "{path}");
        }
        let abs = bob.root().join("secret");
        assert!(alice.resolve(abs.to_str().unwrap()).is_err());
        // A link placed in alice's directory does not lead into bob's.
        std::os::unix::fs::symlink(bob.root(), alice.root().join("to-bob")).unwrap();
        assert!(alice.resolve("to-bob/secret").is_err());
        // And a user's directory that is itself a link is refused.
        std::os::unix::fs::symlink(bob.root(), ws.root().join("carol")).unwrap();
        assert!(ws.for_user("carol").is_err());
    }

    #[test]
    fn contains_follows_links_and_accepts_missing_paths() {
        let (dir, ws) = workspace();
        assert!(ws.contains(&ws.root().join("db/keel.db")));
        assert!(ws.contains(ws.root()));
        assert!(!ws.contains(&dir.path().join("keel.db")));
        std::os::unix::fs::symlink(ws.root(), dir.path().join("alias")).unwrap();
        assert!(ws.contains(&dir.path().join("alias/keel-data/keel.db")));
    }

    #[test]
    fn resolve_existing_reports_missing_files() {
        let (_dir, ws) = workspace();
        let err = ws.resolve_existing("missing.txt").unwrap_err();
        assert_eq!(err.to_string(), "path `missing.txt` does not exist");
    }
}
