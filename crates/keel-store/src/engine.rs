//! The one [`Store`] implementation, over either backend: opens transactions, runs the
//! state machine in them, commits and then publishes the change notices.
//!
//! Longer than most files: one short method for each method of the [`Store`] trait, each the
//! same open-run-commit-publish frame around a transition; split, the frame would be copied.

use std::ops::RangeInclusive;

use crate::types::LastError;
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use keel_core::{Message, Part, PendingToolCall};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::compaction::prompt_messages;
use crate::error::{Result, StoreError};
use crate::ops::{Backend, TxOps};
use crate::orphans::repair_orphans;
use crate::rows::{MessageCols, ToolRecordCols, from_json, from_ms, tree_node};
use crate::store::Store;
use crate::transitions::{self as t, Ctx};
use crate::tree::Tree;
use crate::types::{
    Busy, CatchUp, ChangeNotice, Chat, ChatExport, ChatId, ChatUpdate, ImportChat, Lease,
    LiveEntry, MessageId, MessageKind, NewChat, NewLiveEntry, NewMessage, NewSummary, Next,
    QueueId, QueuedMessage, RemoteNotice, RunStart, SendOutcome, StoreOptions, StoredMessage,
    ToolRecord, ToolResultInput, User,
};
use crate::usage::{self, Budget, Exceeded, UsageGroup, UsageQuery, UsageTotals};

/// Capacity of the in-process notice channel; a subscriber that falls further behind
/// gets `Lagged` and re-reads state.
const NOTICE_CAPACITY: usize = 4096;

/// Attempts of a request that lost an idempotency race: the second one reads the winner's
/// response.
const IDEMPOTENCY_ATTEMPTS: usize = 3;

pub(crate) struct SqlStore {
    backend: Box<dyn Backend>,
    name: &'static str,
    opts: StoreOptions,
    notices: broadcast::Sender<ChangeNotice>,
}

/// Runs `$body` (which uses `$cx`) in one write transaction; on success sends the
/// notices to other replicas inside the transaction, commits, then publishes locally.
macro_rules! in_tx {
    ($store:expr, |$cx:ident| $body:expr) => {
        in_tx!($store, begin_write, |$cx| $body)
    };
    ($store:expr, $begin:ident, |$cx:ident| $body:expr) => {
        async {
            let store = $store;
            let mut ops = store.backend.$begin().await?;
            let (out, notices) = {
                let mut $cx = Ctx::new(&mut *ops, &store.opts);
                let out = $body;
                (out, $cx.into_notices())
            };
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    // The error is what the caller needs; a failed rollback only means
                    // the connection is gone, which drops the transaction anyway.
                    let _ = ops.rollback().await;
                    return Err(e);
                }
            };
            // A grouped transaction (claims, commits, run finishes of many chats) has a
            // notice per chat: sent together, in one round trip where the backend can.
            if !notices.is_empty() {
                ops.notify_all(&notices).await?;
            }
            ops.commit().await?;
            store.publish(notices);
            Ok::<_, StoreError>(out)
        }
        .await
    };
}

/// Runs `$body` (which uses `$ops: &mut dyn TxOps`) in a read transaction that is
/// committed, not dropped: a dropped PostgreSQL transaction would sit idle holding its
/// locks until the pool gets round to rolling it back.
macro_rules! in_read {
    ($store:expr, |$ops:ident| $body:expr) => {
        in_read!($store, begin_read, |$ops| $body)
    };
    ($store:expr, $begin:ident, |$ops:ident| $body:expr) => {
        async {
            let mut boxed = $store.backend.$begin().await?;
            let out = {
                let $ops: &mut dyn TxOps = &mut *boxed;
                $body
            };
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    let _ = boxed.rollback().await;
                    return Err(e);
                }
            };
            boxed.commit().await?;
            Ok::<_, StoreError>(out)
        }
        .await
    };
}

/// Runs `$body`, which reads with one statement (or, when that finds nothing, a second
/// that only tells "none" from "no such chat"), on a connection without a transaction.
macro_rules! in_single_read {
    ($store:expr, |$ops:ident| $body:expr) => {
        in_read!($store, begin_single_read, |$ops| $body)
    };
}

impl SqlStore {
    pub(crate) fn new(backend: Box<dyn Backend>, name: &'static str, opts: StoreOptions) -> Self {
        let (notices, _) = broadcast::channel(NOTICE_CAPACITY);
        Self {
            backend,
            name,
            opts,
            notices,
        }
    }

    fn publish(&self, notices: Vec<ChangeNotice>) {
        for n in notices {
            // No subscriber is not an error.
            let _ = self.notices.send(n);
        }
    }

    async fn read_chat(ops: &mut dyn TxOps, id: ChatId) -> Result<Chat> {
        let read = ops
            .read_chat_and_queue(&id.to_string())
            .await?
            .ok_or(StoreError::not_found("chat"))?;
        crate::rows::chat_with_queue(read)
    }

    async fn require_chat(ops: &mut dyn TxOps, id: ChatId) -> Result<()> {
        match ops.read_chat(&id.to_string()).await? {
            Some(_) => Ok(()),
            None => Err(StoreError::not_found("chat")),
        }
    }

    /// `rows` of the chat `id`, or its not-found error. Rows that came back prove the chat
    /// is there in the read's snapshot (a chat's rows go with it: `ON DELETE CASCADE`), so
    /// the chat row is read only to tell "none" from "no such chat": one statement less for
    /// every read that finds something. Outside a transaction ([`in_single_read!`]) the
    /// check is a moment later than the rows: a chat deleted in between is reported gone,
    /// which it is.
    async fn of_chat<T>(ops: &mut dyn TxOps, id: ChatId, rows: Vec<T>) -> Result<Vec<T>> {
        if rows.is_empty() {
            Self::require_chat(ops, id).await?;
        }
        Ok(rows)
    }

    /// The messages clients see: everything but summaries.
    fn messages(rows: Vec<MessageCols>) -> Result<Vec<StoredMessage>> {
        let mut messages = Self::all_messages(rows)?;
        messages.retain(|m| m.kind != MessageKind::Summary);
        Ok(messages)
    }

    fn all_messages(rows: Vec<MessageCols>) -> Result<Vec<StoredMessage>> {
        rows.into_iter().map(MessageCols::into_message).collect()
    }
}

/// The entries of the live-part log's batches numbered above `after_seq`.
fn live_entries(batches: Vec<(i64, String)>, after_seq: i64) -> Result<Vec<LiveEntry>> {
    let mut entries = Vec::new();
    for (first_seq, payloads) in batches {
        let payloads: Vec<Value> = from_json("live_parts.payloads", &payloads)?;
        entries.extend(
            (first_seq..)
                .zip(payloads)
                .filter(|(seq, _)| *seq > after_seq)
                .map(|(seq, payload)| LiveEntry { seq, payload }),
        );
    }
    Ok(entries)
}

fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> &'static str {
        self.name
    }

    async fn create_chat(&self, req: NewChat) -> Result<Chat> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res: Result<Chat> = in_tx!(self, |cx| t::create_chat(&mut cx, req.clone()).await);
            match res {
                Err(StoreError::IdempotencyInProgress) if attempt < IDEMPOTENCY_ATTEMPTS => {}
                other => return other,
            }
        }
    }

    async fn export_chat(&self, chat: ChatId) -> Result<ChatExport> {
        in_read!(self, |ops| {
            let read = Self::read_chat(ops, chat).await?;
            let rows = ops.tree_messages(&chat.to_string()).await?;
            Ok(ChatExport {
                chat: read,
                messages: Self::all_messages(rows)?,
            })
        })
    }

    async fn import_chat(&self, req: ImportChat) -> Result<Chat> {
        in_tx!(self, |cx| t::import_chat(&mut cx, req).await)
    }

    async fn get_chat(&self, id: ChatId) -> Result<Chat> {
        in_single_read!(self, |ops| Self::read_chat(ops, id).await)
    }

    async fn list_chats(
        &self,
        owner: Option<&str>,
        before: Option<ChatId>,
        limit: u32,
    ) -> Result<Vec<Chat>> {
        let before = before.map(|b| b.to_string());
        in_read!(self, |ops| {
            let rows = ops
                .list_chats(owner, before.as_deref(), i64::from(limit))
                .await?;
            // Every listed chat's queue in one statement, not one each.
            let ids: Vec<String> = rows.iter().map(|row| row.id.clone()).collect();
            let mut queues: std::collections::HashMap<String, Vec<QueuedMessage>> =
                std::collections::HashMap::new();
            for queued in ops.queues_of(&ids).await? {
                let chat = queued.chat_id.clone();
                queues.entry(chat).or_default().push(queued.into_queued()?);
            }
            let mut chats = Vec::with_capacity(rows.len());
            for row in rows {
                let queued = queues.remove(&row.id).unwrap_or_default();
                let mut chat = row.into_chat()?;
                chat.queued = queued;
                chats.push(chat);
            }
            Ok::<_, StoreError>(chats)
        })
    }

    async fn send_message(
        &self,
        chat: ChatId,
        owner: Option<&str>,
        parts: Vec<Part>,
        busy: Busy,
        idempotency_key: Option<&str>,
    ) -> Result<SendOutcome> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res: Result<SendOutcome> = in_tx!(self, |cx| {
                t::send_message(&mut cx, chat, owner, parts.clone(), busy, idempotency_key).await
            });
            match res {
                Err(StoreError::IdempotencyInProgress) if attempt < IDEMPOTENCY_ATTEMPTS => {}
                other => return other,
            }
        }
    }

    async fn edit_message(
        &self,
        chat: ChatId,
        message: MessageId,
        parts: Vec<Part>,
    ) -> Result<Chat> {
        in_tx!(self, |cx| t::edit_message(&mut cx, chat, message, parts)
            .await)
    }

    async fn regenerate(&self, chat: ChatId, message: MessageId) -> Result<Chat> {
        in_tx!(self, |cx| t::regenerate(&mut cx, chat, message).await)
    }

    async fn switch_branch(&self, chat: ChatId, message: MessageId) -> Result<Chat> {
        in_tx!(self, |cx| t::switch_branch(&mut cx, chat, message).await)
    }

    async fn interrupt(&self, chat: ChatId) -> Result<Chat> {
        in_tx!(self, |cx| t::interrupt(&mut cx, chat).await)
    }

    async fn submit_tool_results(
        &self,
        chat: ChatId,
        results: Vec<ToolResultInput>,
    ) -> Result<Chat> {
        in_tx!(self, |cx| t::submit_tool_results(&mut cx, chat, results)
            .await)
    }

    async fn delete_queued(&self, chat: ChatId, queued: QueueId) -> Result<Chat> {
        in_tx!(self, |cx| t::delete_queued(&mut cx, chat, queued).await)
    }

    async fn promote_queued(&self, chat: ChatId, queued: QueueId) -> Result<Chat> {
        in_tx!(self, |cx| t::promote_queued(&mut cx, chat, queued).await)
    }

    async fn set_archived(&self, chat: ChatId, archived: bool) -> Result<Chat> {
        in_tx!(self, |cx| t::set_archived(&mut cx, chat, archived).await)
    }

    async fn delete_chat(&self, chat: ChatId) -> Result<()> {
        in_tx!(self, |cx| t::delete_chat(&mut cx, chat).await)
    }

    async fn update_chat(&self, chat: ChatId, update: ChatUpdate) -> Result<Chat> {
        in_tx!(self, |cx| t::update_chat(&mut cx, chat, update.clone())
            .await)
    }

    async fn name_chat(&self, chat: ChatId, title: &str) -> Result<bool> {
        in_tx!(self, |cx| t::name_chat(&mut cx, chat, title).await)
    }

    async fn request_compaction(&self, chat: ChatId) -> Result<Chat> {
        in_tx!(self, |cx| t::request_compaction(&mut cx, chat).await)
    }

    async fn continue_reply(&self, chat: ChatId) -> Result<Chat> {
        in_tx!(self, |cx| t::continue_reply(&mut cx, chat).await)
    }

    async fn retry_run(&self, chat: ChatId) -> Result<Chat> {
        in_tx!(self, |cx| t::retry_run(&mut cx, chat).await)
    }

    async fn list_messages(
        &self,
        chat: ChatId,
        after: Option<MessageId>,
    ) -> Result<Vec<StoredMessage>> {
        in_single_read!(self, |ops| {
            let id = chat.to_string();
            let rows = ops.messages(&id, after.unwrap_or(0), true).await?;
            Self::messages(Self::of_chat(ops, chat, rows).await?)
        })
    }

    async fn messages_after_seq(&self, chat: ChatId, after_seq: i64) -> Result<Vec<StoredMessage>> {
        in_single_read!(self, |ops| {
            let id = chat.to_string();
            let rows = ops.messages_after_seq(&id, after_seq).await?;
            Self::messages(Self::of_chat(ops, chat, rows).await?)
        })
    }

    async fn messages_page(
        &self,
        chat: ChatId,
        after: i64,
        by_seq: bool,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        in_single_read!(self, |ops| {
            let id = chat.to_string();
            let rows = ops.visible_page(&id, after, by_seq, limit).await?;
            Self::all_messages(Self::of_chat(ops, chat, rows).await?)
        })
    }

    async fn branch_messages(
        &self,
        chat: ChatId,
        through: MessageId,
        after: Option<MessageId>,
        limit: Option<usize>,
    ) -> Result<Vec<StoredMessage>> {
        in_read!(self, |ops| {
            Self::require_chat(ops, chat).await?;
            let id = chat.to_string();
            let tree = Tree::new(
                ops.tree(&id)
                    .await?
                    .into_iter()
                    .map(tree_node)
                    .collect::<Result<Vec<_>>>()?,
            );
            if tree
                .get(through)
                .is_none_or(|node| node.kind == MessageKind::Summary)
            {
                return Err(StoreError::not_found("message"));
            }
            let after = after.unwrap_or(0);
            let ids: Vec<MessageId> = tree
                .branch_through(through)
                .into_iter()
                .filter(|m| *m > after)
                .filter(|m| tree.get(*m).is_some_and(|n| n.kind != MessageKind::Summary))
                .take(limit.unwrap_or(usize::MAX))
                .collect();
            Self::all_messages(ops.messages_by_ids(&id, &ids).await?)
        })
    }

    async fn recent_messages(&self, chat: ChatId, limit: usize) -> Result<Vec<StoredMessage>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        in_single_read!(self, |ops| {
            let id = chat.to_string();
            let rows = ops.recent_messages(&id, limit).await?;
            Self::all_messages(Self::of_chat(ops, chat, rows).await?)
        })
    }

    async fn live_parts_after(&self, chat: ChatId, after_seq: i64) -> Result<Vec<LiveEntry>> {
        let batches = in_single_read!(self, |ops| {
            let batches = ops.live_after(&chat.to_string(), after_seq).await?;
            Self::of_chat(ops, chat, batches).await
        })?;
        live_entries(batches, after_seq)
    }

    async fn live_parts_of(
        &self,
        positions: &[(ChatId, i64)],
    ) -> Result<Vec<(ChatId, Vec<LiveEntry>)>> {
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<(String, i64)> = positions
            .iter()
            .map(|(chat, after)| (chat.to_string(), *after))
            .collect();
        let rows = in_read!(self, begin_grouped_read, |ops| ops
            .live_after_many(&wanted)
            .await)?;
        let after_of: std::collections::HashMap<ChatId, i64> = positions.iter().copied().collect();
        let mut found: Vec<(ChatId, Vec<LiveEntry>)> = Vec::new();
        for (chat, first_seq, payloads) in rows {
            let chat = crate::rows::uuid("live_parts.chat_id", &chat)?;
            let after = after_of.get(&chat).copied().unwrap_or(i64::MAX);
            let entries = live_entries(vec![(first_seq, payloads)], after)?;
            match found.last_mut() {
                Some((last, batch)) if *last == chat => batch.extend(entries),
                _ => found.push((chat, entries)),
            }
        }
        Ok(found)
    }

    async fn start_run(&self, chat: ChatId) -> Result<RunStart> {
        let traced = self.opts.trace_runs;
        let (read, (parent, run)) = in_read!(self, |ops| {
            let read = ops
                .run_start_rows(&chat.to_string())
                .await?
                .ok_or(StoreError::not_found("chat"))?;
            let trace = if traced {
                ops.trace_context(&chat.to_string()).await?
            } else {
                (None, None)
            };
            Ok((read, trace))
        })?;
        Ok(RunStart {
            chat: crate::rows::chat_with_queue(read.chat)?,
            log: live_entries(read.batches, 0)?,
            history: Self::all_messages(read.messages)?,
            tool_records: read
                .records
                .into_iter()
                .map(ToolRecordCols::into_record)
                .collect::<Result<_>>()?,
            trace: crate::trace::RunTrace { parent, run },
        })
    }

    async fn catch_up(&self, chat: ChatId, after: i64, limit: usize) -> Result<CatchUp> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let read = in_read!(self, |ops| {
            ops.catch_up_rows(&chat.to_string(), after, limit)
                .await?
                .ok_or(StoreError::not_found("chat"))
        })?;
        Ok(CatchUp {
            parts: live_entries(read.batches, after)?,
            messages: Self::all_messages(read.messages)?,
            chat: crate::rows::chat_with_queue(read.chat)?,
        })
    }

    async fn load_prompt_history(&self, chat: ChatId) -> Result<Vec<Message>> {
        let messages = in_single_read!(self, |ops| {
            let rows = ops.messages(&chat.to_string(), 0, false).await?;
            Self::all_messages(Self::of_chat(ops, chat, rows).await?)
        })?;
        Ok(repair_orphans(prompt_messages(&messages)))
    }

    async fn acquire(&self, worker_id: &str, limit: usize) -> Result<Vec<Lease>> {
        in_tx!(self, |cx| t::acquire(&mut cx, worker_id, limit).await)
    }

    async fn renew_lease(&self, lease: &Lease) -> Result<Lease> {
        let mut outcomes = self.renew_leases(std::slice::from_ref(lease)).await?;
        outcomes
            .pop()
            .unwrap_or_else(|| Err(StoreError::not_found("chat")))
    }

    async fn renew_leases(&self, leases: &[Lease]) -> Result<Vec<Result<Lease>>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        in_tx!(self, |cx| t::renew_leases(&mut cx, leases).await)
    }

    async fn append_live_parts(
        &self,
        lease: &Lease,
        payloads: &[Value],
    ) -> Result<RangeInclusive<i64>> {
        in_tx!(self, |cx| t::append_live_parts(&mut cx, lease, payloads)
            .await)
    }

    async fn append_live_entries(&self, lease: &Lease, entries: &[NewLiveEntry]) -> Result<()> {
        let mut outcomes = self.append_live_groups(&[(lease.clone(), entries)]).await?;
        outcomes.pop().unwrap_or(Ok(()))
    }

    async fn append_live_groups(
        &self,
        groups: &[(Lease, &[NewLiveEntry])],
    ) -> Result<Vec<Result<()>>> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let mut ops = self.backend.begin_grouped_write().await?;
        let written = {
            let mut cx = Ctx::new(&mut *ops, &self.opts);
            t::append_live_groups(&mut cx, groups).await
        };
        let outcomes = match written {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // As in every transition: the error is what matters, a failed rollback
                // only means the connection is gone.
                let _ = ops.rollback().await;
                return Err(e);
            }
        };
        ops.commit().await?;
        Ok(outcomes)
    }

    async fn commit_step(
        &self,
        lease: &Lease,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<MessageId>> {
        in_tx!(self, begin_grouped_write, |cx| t::commit_step(
            &mut cx, lease, messages
        )
        .await)
    }

    async fn commit_steps(
        &self,
        mut steps: Vec<(Lease, Vec<NewMessage>)>,
    ) -> Result<Vec<Result<Vec<MessageId>>>> {
        // One step alone is cheaper on the single-chat path (fewer round trips).
        if steps.len() == 1
            && let Some((lease, messages)) = steps.pop()
        {
            return Ok(vec![self.commit_step(&lease, messages).await]);
        }
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        in_tx!(self, begin_grouped_write, |cx| t::commit_steps(
            &mut cx, steps
        )
        .await)
    }

    async fn commit_summary(&self, lease: &Lease, summary: NewSummary) -> Result<Vec<MessageId>> {
        in_tx!(self, |cx| t::commit_summary(&mut cx, lease, summary).await)
    }

    async fn record_tool(&self, lease: &Lease, record: ToolRecord) -> Result<()> {
        in_tx!(self, |cx| t::record_tool(&mut cx, lease, record).await)
    }

    async fn tool_records(&self, chat: ChatId) -> Result<Vec<ToolRecord>> {
        let rows = in_single_read!(self, |ops| {
            let rows = ops.tool_records(&chat.to_string()).await?;
            Self::of_chat(ops, chat, rows).await
        })?;
        rows.into_iter().map(ToolRecordCols::into_record).collect()
    }

    async fn set_retry_state(&self, lease: &Lease, state: Option<Value>) -> Result<()> {
        in_tx!(self, |cx| t::set_retry_state(&mut cx, lease, state).await)
    }

    async fn record_run_trace(&self, lease: &Lease, run: &str) -> Result<()> {
        in_tx!(self, |cx| t::record_run_trace(&mut cx, lease, run).await)
    }

    async fn finish_interruption(&self, lease: &Lease) -> Result<Next> {
        in_tx!(self, |cx| t::finish_interruption(&mut cx, lease).await)
    }

    async fn finish_run(&self, lease: &Lease) -> Result<Next> {
        in_tx!(self, begin_grouped_write, |cx| t::finish_run(
            &mut cx, lease
        )
        .await)
    }

    async fn finish_runs(&self, leases: &[Lease]) -> Result<Vec<Result<Next>>> {
        // One run alone is cheaper on the single-chat path (fewer round trips).
        match leases {
            [] => Ok(Vec::new()),
            [lease] => Ok(vec![self.finish_run(lease).await]),
            _ => in_tx!(self, begin_grouped_write, |cx| t::finish_runs(
                &mut cx, leases
            )
            .await),
        }
    }

    async fn fail_run(&self, lease: &Lease, error: LastError) -> Result<()> {
        in_tx!(self, |cx| t::fail_run(&mut cx, lease, error.clone()).await)
    }

    async fn enter_requires_action(
        &self,
        lease: &Lease,
        calls: Vec<PendingToolCall>,
        timeout: Option<chrono::Duration>,
    ) -> Result<Next> {
        in_tx!(self, |cx| t::enter_requires_action(
            &mut cx, lease, calls, timeout
        )
        .await)
    }

    async fn release_on_shutdown(&self, lease: &Lease) -> Result<()> {
        in_tx!(self, |cx| t::release_on_shutdown(&mut cx, lease).await)
    }

    async fn recover_stale(&self) -> Result<Vec<ChatId>> {
        in_tx!(self, |cx| t::recover_stale(&mut cx).await)
    }

    async fn chat_owners(&self, prefix: &str) -> Result<Vec<String>> {
        in_tx!(self, |cx| t::chat_owners(&mut cx, prefix).await)
    }

    async fn release_owners(&self, owners: &[String]) -> Result<Vec<ChatId>> {
        in_tx!(self, |cx| t::release_owners(&mut cx, owners).await)
    }

    async fn expire_pending_actions(&self) -> Result<Vec<ChatId>> {
        in_tx!(self, |cx| t::expire_pending_actions(&mut cx).await)
    }

    async fn put_checkpoint(&self, lease: &Lease, data: Value) -> Result<()> {
        in_tx!(self, |cx| t::put_checkpoint(&mut cx, lease, data).await)
    }

    async fn get_checkpoint(&self, chat: ChatId) -> Result<Option<Value>> {
        let (chat, data) = in_read!(self, |ops| async {
            let chat = Self::read_chat(ops, chat).await?;
            let data = ops.get_checkpoint(&chat.id.to_string()).await?;
            Ok::<_, StoreError>((chat, data))
        }
        .await)?;
        let Some(data) = data else { return Ok(None) };
        let stored: t::StoredCheckpoint = from_json("checkpoints.data", &data)?;
        Ok(stored.current_for(&chat))
    }

    async fn delete_checkpoint(&self, chat: ChatId) -> Result<()> {
        in_tx!(self, |cx| t::delete_checkpoint(&mut cx, chat).await)
    }

    async fn upsert_user(&self, name: &str, token: &str) -> Result<()> {
        let hash = token_hash(token);
        in_tx!(self, |cx| t::upsert_user(&mut cx, name, &hash).await)
    }

    async fn upsert_user_hash(&self, name: &str, token_sha256: &str) -> Result<()> {
        let valid = token_sha256.len() == 64 && token_sha256.chars().all(|c| c.is_ascii_hexdigit());
        if !valid {
            return Err(StoreError::invalid("a token hash is 64 hex digits"));
        }
        let hash = token_sha256.to_ascii_lowercase();
        in_tx!(self, |cx| t::upsert_user(&mut cx, name, &hash).await)
    }

    async fn user_by_token(&self, token: &str) -> Result<Option<User>> {
        let hash = token_hash(token);
        let row = in_single_read!(self, |ops| ops.user_by_token(&hash).await)?;
        Ok(row.map(|(name, created)| User {
            name,
            created_at: from_ms(created),
        }))
    }

    async fn has_users(&self) -> Result<bool> {
        Ok(in_single_read!(self, |ops| ops.count_users().await)? > 0)
    }

    async fn remove_user(&self, name: &str) -> Result<bool> {
        in_tx!(self, |cx| t::remove_user(&mut cx, name).await)
    }

    async fn list_users(&self) -> Result<Vec<User>> {
        let rows = in_single_read!(self, |ops| ops.list_users().await)?;
        Ok(rows
            .into_iter()
            .map(|(name, created)| User {
                name,
                created_at: from_ms(created),
            })
            .collect())
    }

    async fn set_budget(&self, name: &str, budget: Option<Budget>) -> Result<bool> {
        in_tx!(self, |cx| t::set_budget(&mut cx, name, budget.as_ref())
            .await)
    }

    async fn user_budget(&self, name: &str) -> Result<Option<Budget>> {
        let text = in_single_read!(self, |ops| ops.user_budget(name).await)?;
        text.flatten()
            .map(|t| from_json("users.budget", &t))
            .transpose()
    }

    async fn budget_refusal(&self, owner: &str) -> Result<Option<Exceeded>> {
        let now = self.opts.clock.now();
        in_read!(self, |ops| t::budget_refusal(ops, owner, now).await)
    }

    async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>> {
        let keys = usage::key_sql(&query.group_by);
        let from = query.from.map_or(i64::MIN, crate::rows::ms);
        let to = query.to.map_or(i64::MAX, crate::rows::ms);
        let user = query.user.as_str();
        let rows = in_single_read!(self, |ops| ops.usage_groups(keys, user, from, to).await)?;
        rows.into_iter().map(usage::group_of).collect()
    }

    async fn chat_usage(&self, chat: ChatId) -> Result<UsageTotals> {
        let id = chat.to_string();
        let (_, _, _, _, input, cached, output, reasoning, cost) =
            in_single_read!(self, |ops| ops.chat_usage(&id).await)?;
        Ok(usage::totals_of((input, cached, output, reasoning, cost)))
    }

    async fn chat_by_alias(&self, owner: &str, alias: &str) -> Result<Option<ChatId>> {
        let id = in_single_read!(self, |ops| ops.alias_get(owner, alias).await)?;
        id.map(|id| crate::rows::uuid("chat_aliases.chat_id", &id))
            .transpose()
    }

    async fn claim_alias(&self, owner: &str, alias: &str, chat: ChatId) -> Result<ChatId> {
        in_tx!(self, |cx| t::claim_alias(&mut cx, owner, alias, chat).await)
    }

    async fn purge_idempotency_keys(&self) -> Result<u64> {
        in_tx!(self, |cx| t::purge_idempotency_keys(&mut cx).await)
    }

    async fn purge_tool_records(&self) -> Result<u64> {
        in_tx!(self, |cx| t::purge_tool_records(&mut cx).await)
    }

    async fn purge_settled_logs(&self) -> Result<u64> {
        in_tx!(self, |cx| t::purge_settled_logs(&mut cx).await)
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeNotice> {
        self.notices.subscribe()
    }

    async fn subscribe_remote(&self) -> Result<BoxStream<'static, RemoteNotice>> {
        if let Some(stream) = self.backend.subscribe_remote().await? {
            return Ok(stream);
        }
        let rx = self.notices.subscribe();
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(n) => Some((RemoteNotice::Changed(n), rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((RemoteNotice::Missed, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
        .boxed())
    }
}
