//! Opening files the built-in tools read or write: regular files only.
//!
//! A FIFO with no writer blocks `open` and `read` forever, and a device may never end; a model
//! that names one would hold a blocking thread and its chat. The file is opened with
//! `O_NONBLOCK` (so opening a FIFO returns at once) and the *opened* file's type is checked, so
//! swapping the path for a FIFO between a check and the open changes nothing.
//!
//! The open itself is confined too: `openat2` with `RESOLVE_BENEATH` from the workspace root,
//! so a directory swapped for a symbolic link after [`crate::Workspace::resolve`] checked the
//! path cannot lead the open outside the workspace (the kernel refuses with `EXDEV`). Kernels
//! older than 5.6 lack `openat2`; there the resolve check stands alone.

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Why a file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("`{path}` is not a regular file")]
    NotRegular { path: String },
    #[error("path `{path}` is outside the workspace")]
    OutsideWorkspace { path: String },
    #[error("cannot open `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Why a whole file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("the file is {size} bytes")]
    TooLarge { size: u64 },
}

/// Opens an existing regular file below `root` (an absolute path inside it) for reading.
/// `shown` names it in errors.
pub fn read(root: &Path, path: &Path, shown: &str) -> Result<File, OpenError> {
    open(root, path, OFlags::RDONLY, shown)
}

/// Opens a regular file below `root` for writing, creating it when missing and truncating it.
pub fn write(root: &Path, path: &Path, shown: &str) -> Result<File, OpenError> {
    // Truncation waits until the type is known: truncating a device is not harmless.
    let file = open(root, path, OFlags::WRONLY | OFlags::CREATE, shown)?;
    file.set_len(0).map_err(|source| OpenError::Io {
        path: shown.to_owned(),
        source,
    })?;
    Ok(file)
}

/// Reads a whole regular file of at most `max` bytes, off the async threads.
pub async fn read_to_end(
    root: PathBuf,
    path: PathBuf,
    shown: String,
    max: u64,
) -> Result<Vec<u8>, ReadError> {
    tokio::task::spawn_blocking(move || {
        let mut file = read(&root, &path, &shown)?;
        let io_error = |source| OpenError::Io {
            path: shown.clone(),
            source,
        };
        let size = file.metadata().map_err(io_error)?.len();
        if size > max {
            return Err(ReadError::TooLarge { size });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.read_to_end(&mut bytes).map_err(io_error)?;
        Ok(bytes)
    })
    .await
    .map_err(|e| {
        ReadError::Open(OpenError::Io {
            path: String::new(),
            source: io::Error::other(e),
        })
    })?
}

/// Writes `bytes` as the whole content of a regular file, off the async threads.
pub async fn write_all(
    root: PathBuf,
    path: PathBuf,
    shown: String,
    bytes: Vec<u8>,
) -> Result<(), OpenError> {
    tokio::task::spawn_blocking(move || {
        let mut file = write(&root, &path, &shown)?;
        file.write_all(&bytes).map_err(|source| OpenError::Io {
            path: shown.clone(),
            source,
        })
    })
    .await
    .map_err(|e| OpenError::Io {
        path: String::new(),
        source: io::Error::other(e),
    })?
}

fn open(root: &Path, path: &Path, flags: OFlags, shown: &str) -> Result<File, OpenError> {
    let io_error = |source: io::Error| OpenError::Io {
        path: shown.to_owned(),
        source,
    };
    let outside = || OpenError::OutsideWorkspace {
        path: shown.to_owned(),
    };
    let relative = path.strip_prefix(root).map_err(|_| outside())?;
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_error(e.into()))?;
    let flags = flags | OFlags::NONBLOCK | OFlags::CLOEXEC;
    // openat2 refuses a mode without O_CREAT.
    let mode = if flags.contains(OFlags::CREATE) {
        Mode::from_raw_mode(0o666)
    } else {
        Mode::empty()
    };
    let opened = match rustix::fs::openat2(
        &dir,
        relative,
        flags,
        mode,
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(Errno::NOSYS) => rustix::fs::openat(&dir, relative, flags, mode),
        other => other,
    };
    let fd = opened.map_err(|errno| match errno {
        Errno::XDEV => outside(),
        // A FIFO opened for writing with no reader.
        Errno::NXIO => OpenError::NotRegular {
            path: shown.to_owned(),
        },
        other => io_error(other.into()),
    })?;
    let file = File::from(fd);
    if !file.metadata().map_err(io_error)?.is_file() {
        return Err(OpenError::NotRegular {
            path: shown.to_owned(),
        });
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use nix::sys::stat::Mode;
    use nix::unistd::mkfifo;

    use super::*;

    #[test]
    fn fifos_and_devices_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        mkfifo(&fifo, Mode::S_IRWXU).unwrap();
        for result in [
            read(dir.path(), &fifo, "pipe").map(drop),
            write(dir.path(), &fifo, "pipe").map(drop),
            read(Path::new("/dev"), Path::new("/dev/zero"), "/dev/zero").map(drop),
        ] {
            assert!(
                matches!(result, Err(OpenError::NotRegular { .. })),
                "{result:?}"
            );
        }
    }

    #[test]
    fn regular_files_open_and_writes_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "long old content").unwrap();
        write(dir.path(), &path, "f")
            .unwrap()
            .write_all(b"new")
            .unwrap();
        let mut text = String::new();
        read(dir.path(), &path, "f")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "new");
    }

    #[test]
    fn a_link_swapped_in_after_the_check_does_not_lead_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        // What a racing process leaves behind: `d` was a directory when the path was checked.
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        let checked = root.join("d/secret");
        for result in [
            read(&root, &checked, "d/secret").map(drop),
            write(&root, &checked, "d/secret").map(drop),
            read(&root, &outside.join("secret"), "../outside/secret").map(drop),
        ] {
            assert!(
                matches!(result, Err(OpenError::OutsideWorkspace { .. })),
                "{result:?}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "s"
        );
    }
}
