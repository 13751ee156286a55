//! Keel's persistence: the only code that writes the database.
//!
//! The store keeps chats, their messages, queued messages, the live-part log of the step
//! in progress, tool-call records, checkpoints, users and idempotency keys, on SQLite
//! (`sqlite://path`) or PostgreSQL (`postgres://...`) with the same behaviour. [`open`]
//! connects and migrates; the returned [`Store`] is what the daemon calls.
//!
//! Modules:
//! * [`status`]: statuses, transitions and the table of allowed moves;
//! * [`transitions`]: what each transition checks and writes (the state machine);
//! * [`orphans`]: repair of unpaired tool calls and results before prompts;
//! * [`store`]: the [`Store`] trait; `engine`: its implementation over a backend;
//! * `sqlite`, `postgres`, `sql`, `ops`, `rows`: the backends, their shared SQL and row
//!   format; [`error`]: [`StoreError`]; [`types`]: records and requests.
//!
//! # States and transitions
//!
//! | transition | from | to |
//! | --- | --- | --- |
//! | create chat | (none) | `running` (first user message inserted) |
//! | send message | `waiting`, `error` | `running` (message inserted) |
//! | send message, busy = queue | `running`, `interrupting`, `requires_action` | unchanged, queued at the tail |
//! | send message, busy = interrupt | `running`, `interrupting` | `interrupting`, queued at the head |
//! | send message, busy = interrupt | `requires_action` | `running` (pending calls get error results, message inserted) |
//! | edit message (user only) | any | `running`, later history soft-deleted, queue and live log cleared, history version + 1, released |
//! | interrupt | `running` | `interrupting` |
//! | interrupt | `requires_action` | `waiting` (pending calls get error results) |
//! | interrupt | `waiting`, `error`, `interrupting` | unchanged |
//! | submit tool results (exactly the pending ids) | `requires_action` | `running` |
//! | delete queued | any | unchanged |
//! | promote queued | `running` / `interrupting` | `interrupting` |
//! | promote queued | `waiting`, `error`, `requires_action` | `running` (it starts now) |
//! | archive, unarchive, delete | any | flag set / row gone |
//! | acquire (unowned or lease expired) | `running`, `interrupting` | unchanged, owned |
//! | renew lease, append live parts, record tool, set retry state, commit step | `running`, `interrupting` (owner, same history version) | unchanged |
//! | commit step with interrupted output | `interrupting`, owned or released | unchanged |
//! | finish interruption | `interrupting` | `running` with the queue head, else `waiting` |
//! | finish run | `running`, `interrupting` | `running` with the queue head, else `waiting` |
//! | fail run | `running`, `interrupting` | `error` |
//! | enter requires_action | `running` | `requires_action`, released |
//! | release on shutdown | `running`, `interrupting` | unchanged, released |
//! | recover stale (lease expired) | `running`, `interrupting` | unchanged, released |
//! | expire pending action (deadline passed) | `requires_action` | `waiting` (error results) |
//!
//! # Fencing
//!
//! [`Store::acquire`] hands a worker a [`Lease`]: the chat id, the worker id and the chat's
//! `history_version` at that moment. Every worker write presents the lease and succeeds
//! only while the chat is still owned by that worker at that history version; otherwise it
//! fails with [`StoreError::LostOwnership`] (another worker claimed it, or it was released)
//! or [`StoreError::Fenced`] (an edit rewrote history, so the write would bring truncated
//! messages back). The one exception is the partial output of an interrupted step
//! (messages with `interrupted: true`): it is accepted while the chat is `interrupting`
//! and either still owned by the worker or released, because the user asked to stop, not
//! to lose what was already said. An edit still fences it.
//!
//! # Notices and ordering
//!
//! Every transition is one transaction that locks the chat row, bumps the chat's
//! snapshot `version`, and after commit publishes a [`ChangeNotice`] (in-process always;
//! on PostgreSQL also `NOTIFY keel_chat_changes`). All events of a chat (committed
//! messages, live parts, status and queue changes) take numbers from one per-chat
//! sequence, `event_seq`, which serves as the SSE event id.

#[macro_use]
mod sql;

pub mod chain;
pub mod compaction;
pub mod error;
pub mod orphans;
pub mod status;
pub mod store;
pub mod transitions;
pub mod types;

mod engine;
mod ops;
mod postgres;
mod rows;
mod sqlite;

use std::sync::Arc;

pub use chain::chain_anchor;
pub use compaction::prompt_messages;
pub use error::{Result, StoreError};
pub use orphans::{INTERRUPTED_RESULT, repair_orphans};
pub use postgres::NOTICE_CHANNEL;
pub use status::{ChatStatus, Transition, allowed};
pub use store::Store;
pub use transitions::RECOVERY_SEQ_GAP;
pub use types::*;

/// Which database a URL names.
enum Kind {
    Sqlite,
    Postgres,
}

fn kind(url: &str) -> Result<Kind> {
    if url.starts_with("sqlite:") {
        Ok(Kind::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Kind::Postgres)
    } else {
        Err(StoreError::invalid(format!(
            "unsupported database URL {url:?}: use sqlite://PATH or postgres://..."
        )))
    }
}

/// Connects to `url`, runs pending migrations and returns the store, with default options.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    open_with(url, StoreOptions::default()).await
}

/// [`open`] with explicit options.
pub async fn open_with(url: &str, opts: StoreOptions) -> Result<Arc<dyn Store>> {
    Ok(match kind(url)? {
        Kind::Sqlite => {
            let backend = sqlite::connect(url, &opts).await?;
            Arc::new(engine::SqlStore::new(Box::new(backend), "sqlite", opts))
        }
        Kind::Postgres => {
            let backend = postgres::connect(url, &opts).await?;
            Arc::new(engine::SqlStore::new(Box::new(backend), "postgres", opts))
        }
    })
}

/// Runs pending migrations on `url` and disconnects.
pub async fn migrate(url: &str) -> Result<()> {
    let opts = StoreOptions {
        max_connections: 1,
        ..StoreOptions::default()
    };
    // Connecting migrates.
    match kind(url)? {
        Kind::Sqlite => drop(sqlite::connect(url, &opts).await?),
        Kind::Postgres => drop(postgres::connect(url, &opts).await?),
    }
    Ok(())
}
