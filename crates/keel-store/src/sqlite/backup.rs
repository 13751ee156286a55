//! Copies of an SQLite database: `keel backup` takes one from a running daemon's file,
//! `keel restore` puts one in place of a file no daemon is using.
//!
//! A backup is `VACUUM INTO`: one read transaction, so in WAL mode it sees one committed
//! state while the daemon goes on writing, and the copy is a compact file with nothing
//! pending in a WAL. A restore checks the copy is a Keel database this binary can run
//! (its applied migrations are this binary's, none newer), copies it beside the target,
//! makes sure no process has the target open, and renames the copy over it.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteLockingMode};
use sqlx::{Connection, Executor, SqliteConnection};

use super::MIGRATOR;

/// Why a backup or a restore did not happen. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "{0} is not an SQLite database URL: back up PostgreSQL with pg_dump and restore it \
         with pg_restore (docs/deploy.md)"
    )]
    NotSqlite(String),
    #[error("there is no database at {0}")]
    Missing(PathBuf),
    #[error("{0} exists: choose a file that does not")]
    Exists(PathBuf),
    #[error("{path} is not a Keel database: {reason}")]
    NotKeel { path: PathBuf, reason: String },
    #[error(
        "{path} was written by a newer Keel (schema version {found}; this keel knows up to \
         {known}): restore it with that version or a later one"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("{0} is in use (a daemon has it open): stop every daemon using it, then restore")]
    InUse(PathBuf),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The file of an `sqlite:` URL; any other URL is [`BackupError::NotSqlite`].
fn database_file(url: &str) -> Result<PathBuf, BackupError> {
    let redacted = || crate::redact_url(url);
    if !url.starts_with("sqlite:") {
        return Err(BackupError::NotSqlite(redacted()));
    }
    let options = SqliteConnectOptions::from_str(url)?;
    let file = options.get_filename().to_path_buf();
    if file.as_os_str().is_empty() || file.to_string_lossy().contains(":memory:") {
        return Err(BackupError::NotSqlite(redacted()));
    }
    Ok(file)
}

/// A connection to an existing database file that changes nothing by opening it.
async fn open_existing(file: &Path) -> Result<SqliteConnection, BackupError> {
    if !file.is_file() {
        return Err(BackupError::Missing(file.to_path_buf()));
    }
    let options = SqliteConnectOptions::new()
        .filename(file)
        .create_if_missing(false)
        .busy_timeout(std::time::Duration::from_secs(10));
    Ok(SqliteConnection::connect_with(&options).await?)
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BackupError {
    let path = path.to_path_buf();
    move |source| BackupError::Io { what, path, source }
}

/// Copies the database of `url` into `file`, which must not exist, while daemons may be
/// using it. The copy is written beside `file` and renamed into place once complete.
pub async fn backup(url: &str, file: &Path) -> Result<(), BackupError> {
    let source = database_file(url)?;
    if file.symlink_metadata().is_ok() {
        return Err(BackupError::Exists(file.to_path_buf()));
    }
    let mut conn = open_existing(&source).await?;
    schema_version(&mut conn, &source).await?;
    let partial = sibling(file, "partial");
    remove_if_present(&partial)?;
    let copied = vacuum_into(&mut conn, &partial).await;
    conn.close().await?;
    copied?;
    if file.symlink_metadata().is_ok() {
        remove_if_present(&partial)?;
        return Err(BackupError::Exists(file.to_path_buf()));
    }
    std::fs::rename(&partial, file).map_err(io("cannot move the copy to", file))
}

/// Puts the database in `file` (a backup) in place of the database of `url`, which no
/// process may have open. `file` is checked first and left as it is.
pub async fn restore(url: &str, file: &Path) -> Result<(), BackupError> {
    let target = database_file(url)?;
    let mut conn = open_existing(file).await?;
    let checked = schema_version(&mut conn, file).await;
    let staged = sibling(&target, "restoring");
    let copied = match checked {
        Ok(_) => {
            if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
            }
            remove_if_present(&staged)?;
            vacuum_into(&mut conn, &staged).await
        }
        Err(error) => Err(error),
    };
    conn.close().await?;
    copied?;
    let replaced = replace(&staged, &target).await;
    if replaced.is_err() {
        // The staged copy is ours; the target is as it was.
        let _ = std::fs::remove_file(&staged);
    }
    replaced
}

/// Renames `staged` over `target` once no process has `target` open, with the target's
/// WAL and shared-memory files gone (they belong to the replaced database).
async fn replace(staged: &Path, target: &Path) -> Result<(), BackupError> {
    if target.is_file() {
        ensure_unused(target).await?;
    }
    for suffix in ["-wal", "-shm"] {
        remove_if_present(&with_suffix(target, suffix))?;
    }
    std::fs::rename(staged, target).map_err(io("cannot move the restored copy to", target))?;
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename is durable once the directory is.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("cannot sync", dir))?;
    }
    Ok(())
}

/// Refuses a database another connection has open. In WAL mode every open connection holds
/// a shared lock on the WAL index, even when idle; a connection in exclusive locking mode
/// needs the database to itself to read at all, so its first read fails at once while any
/// daemon (or other program) has the file open. Closing it leaves the file checkpointed.
async fn ensure_unused(target: &Path) -> Result<(), BackupError> {
    let options = SqliteConnectOptions::new()
        .filename(target)
        .create_if_missing(false)
        .locking_mode(SqliteLockingMode::Exclusive)
        .busy_timeout(std::time::Duration::ZERO);
    let mut conn = match SqliteConnection::connect_with(&options).await {
        Ok(conn) => conn,
        Err(error) if is_busy(&error) => return Err(BackupError::InUse(target.to_path_buf())),
        Err(error) => return Err(error.into()),
    };
    let probe = conn
        .execute("BEGIN EXCLUSIVE; SELECT COUNT(*) FROM sqlite_master; COMMIT")
        .await;
    conn.close().await?;
    match probe {
        Ok(_) => Ok(()),
        Err(error) if is_busy(&error) => Err(BackupError::InUse(target.to_path_buf())),
        Err(error) => Err(error.into()),
    }
}

fn is_busy(error: &sqlx::Error) -> bool {
    // SQLITE_BUSY and SQLITE_LOCKED with their extended codes.
    matches!(error, sqlx::Error::Database(db) if db.code().is_some_and(|code| {
        code.parse::<i64>().is_ok_and(|code| matches!(code & 0xff, 5 | 6))
    }))
}

/// The schema version of a Keel database (its newest applied migration), refusing files
/// that are not one and those a newer Keel migrated.
async fn schema_version(conn: &mut SqliteConnection, path: &Path) -> Result<i64, BackupError> {
    let not_keel = |reason: String| BackupError::NotKeel {
        path: path.to_path_buf(),
        reason,
    };
    let applied: Vec<(i64, Vec<u8>, bool)> = match sqlx::query_as(
        "SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version",
    )
    .fetch_all(&mut *conn)
    .await
    {
        Ok(rows) => rows,
        Err(sqlx::Error::Database(error)) => {
            return Err(not_keel(format!(
                "no migrations table ({})",
                error.message()
            )));
        }
        Err(error) => return Err(error.into()),
    };
    let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let mut found = 0;
    for (version, checksum, success) in applied {
        if !success {
            return Err(not_keel(format!("migration {version} did not complete")));
        }
        match MIGRATOR.iter().find(|m| m.version == version) {
            Some(ours) if *ours.checksum == *checksum => {}
            Some(_) => return Err(not_keel(format!("migration {version} is not Keel's"))),
            None if version > known => {
                return Err(BackupError::TooNew {
                    path: path.to_path_buf(),
                    found: version,
                    known,
                });
            }
            None => return Err(not_keel(format!("migration {version} is not Keel's"))),
        }
        found = version;
    }
    if found == 0 {
        return Err(not_keel("no migration was applied".into()));
    }
    Ok(found)
}

async fn vacuum_into(conn: &mut SqliteConnection, file: &Path) -> Result<(), BackupError> {
    let name = file.to_str().ok_or_else(|| BackupError::Io {
        what: "cannot name",
        path: file.to_path_buf(),
        source: std::io::Error::other("the path is not UTF-8"),
    })?;
    sqlx::query("VACUUM INTO $1")
        .bind(name)
        .execute(conn)
        .await?;
    // The copy is complete on disk before it is renamed into place.
    std::fs::File::open(file)
        .and_then(|f| f.sync_all())
        .map_err(io("cannot sync", file))
}

/// `file` with `.tag` added to its name, in its directory: renamed over `file` later.
fn sibling(file: &Path, tag: &str) -> PathBuf {
    with_suffix(file, &format!(".{tag}"))
}

fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn remove_if_present(file: &Path) -> Result<(), BackupError> {
    match std::fs::remove_file(file) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(io("cannot remove", file)(error))
        }
        _ => Ok(()),
    }
}
