//! One connection's follower: what it has sent, how it catches up from the store, and the
//! loop that forwards the hub's frames and answers the chat's change notices.
//!
//! Longer than most files: the follower's rules (what may go out before a read of the store)
//! and the loop that applies them are one protocol, and are read and changed together.

use std::sync::Arc;

use bytes::Bytes;
use keel_store::{Chat, ChatId, ChatStatus, RECOVERY_SEQ_GAP};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use super::resume::{Requested, locate};
use crate::api::dto::{LastErrorView, MessageView, QueuedView};
use crate::api::live_item::LiveItem;
use crate::api::state::AppState;
#[cfg(debug_assertions)]
use crate::debug_pause::debug_pause;
use crate::hub::{Changes, Frame, Subscription};
use crate::live::{from_log, from_retry_state};

/// Committed messages one catch-up query reads at most.
const CATCH_UP_PAGE: usize = 200;

/// Whether a run's durable frame numbered `seq` may be sent only after a read of the store.
///
/// A run numbers its parts and the messages it commits one after another, so a frame that
/// does not follow the follower's position means something was numbered in between that no
/// frame carried: a message the run did not publish (the queue head it started, the
/// messages of a branch made current before it started, renumbered above their `branch`
/// event), or the parts of an earlier owner. Sent at once, the frame would carry the
/// position past them for good. A frame of a newer history version than the follower read
/// is a run on a branch it has not been told of: the `branch` event and the branch come
/// first. A frame at or below the position is a repeat, and is skipped anyway.
fn must_read_first(seq: i64, history_version: i64, position: i64, read_version: i64) -> bool {
    !follows_position(seq, position) || history_version > read_version
}

/// Whether an event numbered `seq` comes right after `position`: nothing was numbered in
/// between that the follower has not sent.
fn follows_position(seq: i64, position: i64) -> bool {
    seq <= position.saturating_add(1)
}

/// Whether the first event owed after `position` lies past a takeover's jump in numbers:
/// the chat was taken from an owner that may have sent this client parts it never logged
/// ([`keel_store::RECOVERY_SEQ_GAP`]), and the `stream_reset` that voids them is not among
/// the events owed (the step it began has committed and its log is gone). The client gets
/// one first, or it would keep text no reply holds beside the committed message.
fn crosses_a_takeover(position: i64, first_owed: Option<(i64, &str)>) -> bool {
    position > 0
        && first_owed.is_some_and(|(seq, event)| {
            event != "stream_reset" && seq.saturating_sub(position) > RECOVERY_SEQ_GAP / 2
        })
}

/// How a read of the live-part log alone ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogRead {
    /// Every part after the position went out (or there were none).
    Sent,
    /// The first part read does not follow the position: something was numbered in
    /// between (the messages of a step committed since). Nothing went out; a whole read
    /// must come first.
    Gap,
    /// The client is gone or the read failed.
    Ended,
}

/// What one connection has sent so far.
struct Follower {
    state: AppState,
    chat_id: ChatId,
    tx: mpsc::Sender<LiveItem>,
    position: i64,
    status: Option<(ChatStatus, Option<String>)>,
    queue: Option<String>,
    /// The last `retry` sent: the position it was published at and its data. It reaches a
    /// follower live, as the chat's stored state, or both; it is sent once.
    retry: Option<(i64, Value)>,
    /// The chat's snapshot version as far as the follower knows it: when it was last read,
    /// or a later one whose changes were all numbered events it has sent.
    version: i64,
    /// The chat's history version when it was last read: a run's frame of a newer one
    /// means the current branch changed, and the store is read first.
    history_version: i64,
    /// Resynchronisations already answered with a read.
    resyncs: u64,
}

impl Follower {
    /// Sends an event; false when the client is gone or too slow.
    async fn send(&self, item: LiveItem) -> bool {
        // Most events find room at once. The wait for room (a client reading slowly) is
        // boxed: its state would otherwise size every follower, idle ones included.
        match self.tx.try_send(item) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(item)) => {
                Box::pin(self.tx.send(item)).await.is_ok()
            }
        }
    }

    async fn durable(&mut self, item: LiveItem) -> bool {
        if item.id <= self.position {
            return true;
        }
        self.position = item.id;
        self.send(item).await
    }

    /// Sends one frame of the hub; false when the connection ends (the client left or fell
    /// too far behind).
    async fn forward(&mut self, frame: Result<Arc<Frame>, broadcast::error::RecvError>) -> bool {
        match frame {
            Ok(frame) if frame.durable => {
                let seq = i64::try_from(frame.seq).unwrap_or(i64::MAX);
                if must_read_first(
                    seq,
                    frame.history_version,
                    self.position,
                    self.history_version,
                ) {
                    // Boxed: the read is rare, and its state would otherwise size every
                    // idle follower.
                    match Box::pin(self.catch_up(&[])).await {
                        Ok(Some(_)) => {}
                        Ok(None) => return false,
                        Err(error) => {
                            tracing::warn!(chat = %self.chat_id, %error, "catching up events failed");
                            return false;
                        }
                    }
                }
                self.durable(LiveItem::frame(&frame)).await
            }
            Ok(frame) if frame.event == "retry" => {
                let seq = i64::try_from(frame.seq).unwrap_or(i64::MAX);
                let data = serde_json::from_slice(frame.data_bytes()).unwrap_or(Value::Null);
                self.retry(seq, data).await
            }
            Ok(frame) => self.ephemeral(frame.event, frame.data()).await,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                self.state.metrics.sse_lagged_disconnects.inc();
                false
            }
            Err(broadcast::error::RecvError::Closed) => false,
        }
    }

    async fn ephemeral(&self, name: &'static str, data: impl Into<Bytes>) -> bool {
        self.send(LiveItem::new(self.position, name, data)).await
    }

    /// Sends the `retry` published at position `seq`, unless it was sent already.
    async fn retry(&mut self, seq: i64, data: Value) -> bool {
        if self
            .retry
            .as_ref()
            .is_some_and(|(sent, sent_data)| *sent == seq && *sent_data == data)
        {
            return true;
        }
        let text = data.to_string();
        self.retry = Some((seq, data));
        self.ephemeral("retry", text).await
    }

    /// Sends the `branch` event of the chat's last change of its current branch, unless
    /// the client is past it; false when the client is gone.
    async fn branch(&mut self, chat: &Chat) -> bool {
        if self.position >= chat.branch_seq {
            return true;
        }
        let data = json!({ "leaf_id": chat.leaf_id }).to_string();
        self.durable(LiveItem::new(chat.branch_seq, "branch", data))
            .await
    }

    /// Sends committed messages and logged live parts after the position, with the
    /// `branch` event before the messages of a branch made current after it. Returns the
    /// chat as read with the messages, or `None` when the client is gone.
    ///
    /// The log, the first page of messages and the chat are one read of one snapshot: the
    /// parts read are those of the step in progress then, which the messages leave in
    /// progress, and a branch change the page shows is the chat's. Everything goes out in
    /// sequence order, `backlog` (frames of this process's run not logged yet) merged in, so
    /// parts of a step committed since still reach the client before its message.
    async fn catch_up(
        &mut self,
        backlog: &[Arc<Frame>],
    ) -> Result<Option<Chat>, keel_store::StoreError> {
        let first = self
            .state
            .store
            .catch_up(self.chat_id, self.position, CATCH_UP_PAGE)
            .await?;
        #[cfg(debug_assertions)]
        debug_pause("KEEL_DEBUG_CATCH_UP_PAUSE_MS").await;
        let mut parts: Vec<LiveItem> = first
            .parts
            .iter()
            .filter_map(|entry| {
                from_log(&entry.payload)
                    .map(|(event, data)| LiveItem::new(entry.seq, event, data.to_string()))
            })
            .collect();
        parts.extend(backlog.iter().map(|f| LiveItem::frame(f)));
        parts.sort_by_key(|item| item.id);
        parts.dedup_by_key(|item| item.id);
        let first_part = parts.iter().find(|item| item.id > self.position);
        let first_message = first.messages.iter().find(|m| m.event_seq > self.position);
        let first_owed = match (first_part, first_message) {
            (Some(part), Some(message)) if message.event_seq < part.id => {
                Some((message.event_seq, "message"))
            }
            (Some(part), _) => Some((part.id, part.event)),
            (None, message) => message.map(|m| (m.event_seq, "message")),
        };
        if crosses_a_takeover(self.position, first_owed) {
            let reset = LiveItem::new(self.position, "stream_reset", "{}");
            if !self.send(reset).await {
                return Ok(None);
            }
        }
        let mut parts = parts.into_iter().peekable();
        let mut replayed = 0u64;
        let snapshot_seq = first.chat.event_seq;
        let (mut page, mut chat) = (first.messages, first.chat);
        // Page by page: a long history is never held in memory at once.
        loop {
            self.history_version = self.history_version.max(chat.history_version);
            for message in &page {
                if message.event_seq > chat.branch_seq && !self.branch(&chat).await {
                    return Ok(None);
                }
                // Everything in sequence order: the parts read before a step committed
                // come before the message that commits them. The message first, they would
                // fall below the position and the client would never see them live.
                while let Some(item) = parts.next_if(|item| item.id < message.event_seq) {
                    if item.id > self.position {
                        replayed += 1;
                    }
                    if !self.durable(item).await {
                        return Ok(None);
                    }
                }
                let data = serde_json::to_string(&MessageView::from(message)).unwrap_or_default();
                if !self
                    .durable(LiveItem::new(message.event_seq, "message", data))
                    .await
                {
                    return Ok(None);
                }
                replayed += 1;
            }
            if !self.branch(&chat).await {
                return Ok(None);
            }
            if page.len() < CATCH_UP_PAGE {
                break;
            }
            page = self
                .state
                .store
                .messages_page(self.chat_id, self.position, true, CATCH_UP_PAGE)
                .await?;
            // Read after the page, so a branch change the page shows is known: the messages
            // of a new branch are numbered above its `branch_seq`.
            chat = self.state.store.get_chat(self.chat_id).await?;
        }
        for item in parts {
            if item.id > self.position {
                replayed += 1;
            }
            if !self.durable(item).await {
                return Ok(None);
            }
        }
        // Every event the snapshot numbered is sent: its messages (all pages), its logged
        // parts and its branch. A number up to its end that carried none is a status change
        // or a skipped range; the position moves past it, so that the next frame of the run
        // follows the position and notices of it find nothing new to read.
        self.position = self.position.max(snapshot_seq);
        self.state.metrics.replayed_events.inc_by(replayed);
        Ok(Some(chat))
    }

    /// Sends the parts of the step in progress logged after the position, read with those
    /// of the other followers woken with it ([`crate::log_reads`]).
    ///
    /// The read may land after the step committed and the next one logged its first parts:
    /// the log then holds only the next step, numbered past the committed messages, which
    /// the log never holds. Those parts go out only after a whole read
    /// ([`LogRead::Gap`]), or the position would pass the messages for good.
    async fn logged_parts(&mut self) -> LogRead {
        #[cfg(debug_assertions)]
        debug_pause("KEEL_DEBUG_LOG_READ_PAUSE_MS").await;
        let Some(entries) = self
            .state
            .log_reads
            .after(self.chat_id, self.position)
            .await
        else {
            return LogRead::Ended;
        };
        if entries
            .first()
            .is_some_and(|first| !follows_position(first.seq, self.position))
        {
            return LogRead::Gap;
        }
        for entry in entries {
            let Some((event, data)) = from_log(&entry.payload) else {
                continue;
            };
            if !self
                .durable(LiveItem::new(entry.seq, event, data.to_string()))
                .await
            {
                return LogRead::Ended;
            }
        }
        LogRead::Sent
    }

    /// What a notice that numbered nothing past the position but may have changed what is
    /// reported without a number (a retry, an error) needs: the chat row. Notices of changes
    /// that are all numbered (a claim, the commit of a step whose message frames the
    /// follower already sent) need no read at all. A status or queue change takes no number
    /// (state, not history), so the chat row is all it needs. A chat read that does show
    /// more (a notice still on its way) falls back to the whole catch-up.
    async fn refresh(&mut self) -> Result<Option<Chat>, keel_store::StoreError> {
        let chat = self.state.store.get_chat(self.chat_id).await?;
        if chat.event_seq > self.position || chat.history_version > self.history_version {
            return self.catch_up(&[]).await;
        }
        Ok(Some(chat))
    }

    /// Reads what a notice may have changed (everything owed when `whole`, else the chat
    /// row) and reports the chat's state; false when the connection ends.
    async fn read_and_announce(&mut self, whole: bool, backlog: &[Arc<Frame>]) -> bool {
        let read = if whole {
            self.catch_up(backlog).await
        } else {
            self.refresh().await
        };
        match read {
            Ok(Some(current)) => {
                self.version = self.version.max(current.version);
                self.announce(&current).await
            }
            Ok(None) | Err(keel_store::StoreError::NotFound { .. }) => false,
            Err(error) => {
                tracing::warn!(chat = %self.chat_id, %error, "catching up events failed");
                false
            }
        }
    }

    /// Sends `status` and `queue` events when they changed.
    async fn announce(&mut self, chat: &Chat) -> bool {
        let error = chat.last_error.as_ref().map(|e| e.message.clone());
        let status = (chat.status, error);
        if self.status.as_ref() != Some(&status) {
            self.status = Some(status);
            let last_error = chat.last_error.as_ref().map(LastErrorView::from);
            let data =
                json!({"status": chat.status.as_str(), "last_error": last_error}).to_string();
            if !self.ephemeral("status", data).await {
                return false;
            }
        }
        // A retry another process published, or one published before this connection.
        if let Some((seq, data)) = chat.retry_state.as_ref().and_then(from_retry_state)
            && !self.retry(seq, data).await
        {
            return false;
        }
        let queued: Vec<QueuedView> = chat.queued.iter().map(QueuedView::from).collect();
        let queue = json!({ "queued": queued }).to_string();
        if self.queue.as_ref() != Some(&queue) {
            let first = self.queue.is_none();
            self.queue = Some(queue.clone());
            let worth_sending = !(first && chat.queued.is_empty());
            if worth_sending && !self.ephemeral("queue", queue).await {
                return false;
            }
        }
        true
    }
}

/// The next frame of the run streaming into the chat; never, while none does.
async fn next_frame(
    live: &mut Option<broadcast::Receiver<Arc<Frame>>>,
) -> Result<Arc<Frame>, broadcast::error::RecvError> {
    match live {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// Feeds one connection from `subscription`, taken when the connection was accepted.
///
/// The set-up (finding the position, the first catch-up) runs boxed and is gone before the
/// loop starts, and the loop's reads of the store are boxed too: a follower waits far more
/// than it reads, and a future is as large as the largest state it can be in, so an idle
/// stream holds only what waiting needs.
pub(super) fn feed(
    state: AppState,
    chat: Chat,
    subscription: Subscription,
    requested: Requested,
    tx: mpsc::Sender<LiveItem>,
) -> impl Future<Output = ()> + Send {
    // Not an `async fn`: its arguments (the whole chat, the subscription with its backlog)
    // would stay in the future for as long as the stream is open.
    let chat_key = chat.id.to_string();
    let start = Box::pin(start(state, chat, subscription, requested, tx));
    async move {
        if let Some(started) = start.await {
            follow_changes(chat_key, started).await;
        }
    }
}

/// A follower that has caught up, with the channels it waits on.
struct Started {
    follower: Follower,
    live: Option<broadcast::Receiver<Arc<Frame>>>,
    runs: u64,
    changes: watch::Receiver<Changes>,
}

/// Finds where the client is, sends what it is owed and the chat's state; `None` when the
/// connection ended meanwhile.
async fn start(
    state: AppState,
    chat: Chat,
    subscription: Subscription,
    requested: Requested,
    tx: mpsc::Sender<LiveItem>,
) -> Option<Started> {
    // Runs started before the subscription are the receiver it already holds.
    let runs = subscription.live.runs;
    let (live, backlog, mut changes) = (
        subscription.live.frames,
        subscription.live.backlog,
        subscription.changes,
    );
    let (position, reset) = match requested {
        Requested::Start => (0, false),
        // Numbers only grow: a position the chat had reached when it was read is known, and
        // where its step starts does not matter.
        Requested::At(position) if position <= chat.event_seq => (position, false),
        _ => match locate(&state, &chat, &backlog, requested, &mut changes).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(chat = %chat.id, %error, "reading the chat's position failed");
                return None;
            }
        },
    };
    if reset {
        let event = LiveItem::new(position, "stream_reset", "{}");
        if tx.send(event).await.is_err() {
            return None;
        }
    }
    let mut follower = Follower {
        state,
        chat_id: chat.id,
        tx,
        position,
        status: None,
        queue: None,
        retry: None,
        version: chat.version,
        history_version: chat.history_version,
        resyncs: changes.borrow_and_update().resyncs,
    };
    let current = match follower.catch_up(&backlog).await {
        Ok(Some(current)) => current,
        Ok(None) => return None,
        Err(error) => {
            tracing::warn!(chat = %chat.id, %error, "replaying events failed");
            return None;
        }
    };
    if !follower.announce(&current).await {
        return None;
    }
    Some(Started {
        follower,
        live,
        runs,
        changes,
    })
}

/// Forwards the hub's frames and answers the chat's change notices until the client leaves,
/// the chat is deleted or the process stops.
fn follow_changes(chat_key: String, started: Started) -> impl Future<Output = ()> + Send {
    // Taken apart before the future is made, which holds each part once, where it is used.
    let Started {
        mut follower,
        mut live,
        mut runs,
        mut changes,
    } = started;
    async move {
        // Notices that arrived while the connection was being set up are looked at first.
        let mut recheck = true;
        // Made once, and looked at only when woken: a frame costs no waiter of its own.
        let client = follower.tx.clone();
        let mut client_gone = std::pin::pin!(keel_core::on_wake::on_wake(client.closed()));
        let mut shutdown = std::pin::pin!(follower.state.shutdown.cancelled_owned());
        loop {
            if !recheck {
                tokio::select! {
                    () = client_gone.as_mut() => return,
                    () = shutdown.as_mut() => return,
                    frame = next_frame(&mut live) => {
                        if matches!(frame, Err(broadcast::error::RecvError::Closed)) {
                            // The run ended and its frames were all sent: wait for the next.
                            live = None;
                        } else if !follower.forward(frame).await {
                            return;
                        }
                        continue;
                    }
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        #[cfg(debug_assertions)]
                        debug_pause("KEEL_DEBUG_NOTICE_PAUSE_MS").await;
                    },
                }
            }
            recheck = false;
            // Frames published before the notice was sent are already queued: send them
            // first, so a catch-up never jumps past parts (to the message that commits them).
            while let Some(receiver) = live.as_mut() {
                match receiver.try_recv() {
                    Ok(frame) => {
                        if !follower.forward(Ok(frame)).await {
                            return;
                        }
                    }
                    Err(broadcast::error::TryRecvError::Empty) => break,
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        follower
                            .forward(Err(broadcast::error::RecvError::Lagged(n)))
                            .await;
                        return;
                    }
                    Err(broadcast::error::TryRecvError::Closed) => live = None,
                }
            }
            let news = *changes.borrow_and_update();
            if news.deleted {
                return;
            }
            // A run started: take its channel, and the frames it published before, which the
            // catch-up below merges with the store's messages in sequence order.
            let (backlog, incomplete, retry) = if news.runs == runs {
                (Vec::new(), false, None)
            } else {
                let current = follower.state.hub.live(&chat_key);
                runs = current.runs;
                live = current.frames;
                (current.backlog, current.incomplete, current.retry)
            };
            // A backlog that holds every frame the run published goes out as live frames do:
            // `forward` reads the store first only when a frame does not follow the position
            // (something numbered in between that no frame carried), so the common start of a
            // run, right after what the follower sent, costs no read.
            let backlog = if incomplete {
                backlog
            } else {
                for frame in backlog {
                    if !follower.forward(Ok(frame)).await {
                        return;
                    }
                }
                Vec::new()
            };
            // A retry the run published before the receiver was taken: after the frames that
            // came before it, and before a read that may find the run already over.
            if let Some(retry) = retry
                && !follower.forward(Ok(retry)).await
            {
                return;
            }
            if backlog.is_empty()
                && !incomplete
                && !news.news_for(follower.position, follower.version, follower.resyncs)
            {
                // Every version since the one it knows changed only events it has sent.
                follower.version = follower.version.max(news.version);
                continue;
            }
            if live.is_some()
                && backlog.is_empty()
                && !incomplete
                && news.awaits_committed_frames(
                    follower.position,
                    follower.version,
                    follower.resyncs,
                )
            {
                // The run's committed messages are on their way as frames; the commit's end
                // wakes the follower to look again.
                continue;
            }
            // Everything is read for frames the new channel carried before it was taken, for
            // notices that may have been lost, and for events numbered past the position.
            let whole = !backlog.is_empty()
                || incomplete
                || news.resyncs != follower.resyncs
                || news.event_seq > follower.position;
            follower.state.metrics.sse_catch_ups.inc();
            // Every change but logged parts takes a new version: when the version is one the
            // follower knows, the log alone has something new (a run of another replica).
            let parts_only = whole
                && backlog.is_empty()
                && !incomplete
                && news.resyncs == follower.resyncs
                && news.version <= follower.version;
            if parts_only {
                match Box::pin(follower.logged_parts()).await {
                    LogRead::Sent => continue,
                    LogRead::Ended => return,
                    // Read everything below, as for any news numbered past the position.
                    LogRead::Gap => {}
                }
            }
            follower.resyncs = news.resyncs;
            if !Box::pin(follower.read_and_announce(whole, &backlog)).await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
