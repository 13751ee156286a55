//! Opening files the built-in tools read or write: regular files only.
//!
//! A FIFO with no writer blocks `open` and `read` forever, and a device may never end; a model
//! that names one would hold a blocking thread and its chat. The file is opened with
//! `O_NONBLOCK` (so opening a FIFO returns at once) and the *opened* file's type is checked, so
//! swapping the path for a FIFO between a check and the open changes nothing.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// Why a file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("`{path}` is not a regular file")]
    NotRegular { path: String },
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

/// Opens an existing regular file for reading. `shown` names it in errors.
pub fn read(path: &Path, shown: &str) -> Result<File, OpenError> {
    open(OpenOptions::new().read(true), path, shown)
}

/// Opens a regular file for writing, creating it when missing and truncating it.
pub fn write(path: &Path, shown: &str) -> Result<File, OpenError> {
    // Truncation waits until the type is known: truncating a device is not harmless.
    let file = open(OpenOptions::new().write(true).create(true), path, shown)?;
    file.set_len(0).map_err(|source| OpenError::Io {
        path: shown.to_owned(),
        source,
    })?;
    Ok(file)
}

/// Reads a whole regular file of at most `max` bytes, off the async threads.
pub async fn read_to_end(path: PathBuf, shown: String, max: u64) -> Result<Vec<u8>, ReadError> {
    tokio::task::spawn_blocking(move || {
        let mut file = read(&path, &shown)?;
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
pub async fn write_all(path: PathBuf, shown: String, bytes: Vec<u8>) -> Result<(), OpenError> {
    tokio::task::spawn_blocking(move || {
        let mut file = write(&path, &shown)?;
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

fn open(options: &mut OpenOptions, path: &Path, shown: &str) -> Result<File, OpenError> {
    let io_error = |source| OpenError::Io {
        path: shown.to_owned(),
        source,
    };
    let file = options
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            // A FIFO opened for writing with no reader.
            Some(code) if code == nix::errno::Errno::ENXIO as i32 => OpenError::NotRegular {
                path: shown.to_owned(),
            },
            _ => io_error(source),
        })?;
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
            read(&fifo, "pipe").map(drop),
            write(&fifo, "pipe").map(drop),
            read(Path::new("/dev/zero"), "/dev/zero").map(drop),
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
        write(&path, "f").unwrap().write_all(b"new").unwrap();
        let mut text = String::new();
        read(&path, "f").unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "new");
    }
}
