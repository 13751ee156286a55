//! Live event fan-out: one entry per chat with subscribers, and a broadcast channel while a
//! run of this process streams into it.
//!
//! Each event is serialised once and shared by every subscriber. The channel's buffer
//! ([`SUBSCRIBER_BUFFER`] slots, allocated whole) exists only while a run streams: an idle
//! chat's subscribers hold only their change notices, and every run's start
//! ([`Changes::runs`]) tells them to take a receiver of the new channel. A subscriber that falls
//! more than the channel's capacity behind is not waited for: it sees `Lagged`, and the SSE
//! layer disconnects it so it can resume from its last event id. The run and the other
//! subscribers never slow down for it.
//!
//! Change notices of the store (this process's and, on PostgreSQL, every replica's) reach
//! a chat's subscribers through the same per-chat entry ([`Hub::changed`], fed by one task
//! per process, [`relay_notices`]): a notice wakes the followers of its chat and no one
//! else, and notices that arrive while a follower is busy merge into one wake-up.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use futures::StreamExt;
use keel_store::{ChangeNotice, RemoteNotice, Store};
use tokio::sync::{broadcast, watch};

use crate::sse::{self, Encoded};

/// Events a subscriber may buffer before it is cut off.
pub const SUBSCRIBER_BUFFER: usize = 256;

/// One event, ready to be written as SSE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The chat's event sequence number this event carries as its SSE `id`.
    pub seq: u64,
    /// The SSE event name (`message`, `part`, `status`, ...).
    pub event: &'static str,
    /// Durable events (committed messages, live parts) advance a client's position;
    /// ephemeral ones (status, retry, queue) repeat the current position.
    pub durable: bool,
    /// The chat's history version the publishing run works at. A follower that knows an
    /// older one reads the store before forwarding the frame: the current branch changed,
    /// and the `branch` event and the new branch come first.
    pub history_version: i64,
    /// The event as SSE text with `seq` as its id, encoded once and written as it is by
    /// every subscriber, and its JSON data (a slice of the same buffer).
    encoded: Encoded,
}

impl Frame {
    pub fn new(
        seq: u64,
        event: &'static str,
        data: &str,
        durable: bool,
        history_version: i64,
    ) -> Self {
        Self {
            seq,
            event,
            durable,
            history_version,
            encoded: sse::encode(seq, event, data),
        }
    }

    /// The JSON payload (sharing the event's buffer).
    pub fn data(&self) -> Bytes {
        self.encoded.data()
    }

    /// The JSON payload, borrowed.
    pub fn data_bytes(&self) -> &[u8] {
        self.encoded.data_bytes()
    }

    /// The whole SSE event, `id: seq` included.
    pub fn sse(&self) -> &Bytes {
        self.encoded.sse()
    }
}

/// The latest change notices of a chat, merged: a follower compares them with what it has
/// already sent and read, and reads the store only when something is new to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// The highest chat snapshot version noticed.
    pub version: i64,
    /// The highest version of a notice that may have changed what a follower reports
    /// without an event number ([`ChangeNotice::unnumbered_change`]): a follower that knows
    /// an older one reads the chat for it.
    pub unnumbered_version: i64,
    /// The highest event sequence number noticed.
    pub event_seq: i64,
    pub deleted: bool,
    /// Counts the times notices may have been lost: every follower must read again.
    pub resyncs: u64,
    /// Counts the channels opened for runs: a follower whose count differs takes a receiver
    /// of the current channel ([`Hub::live`]).
    pub runs: u64,
    /// Step commits of this process's runs under way for the chat ([`Hub::commit_begins`]):
    /// their messages are on their way to the run's channel as frames.
    pub committing: u32,
}

impl Changes {
    fn merge(&mut self, notice: &ChangeNotice) {
        self.version = self.version.max(notice.version);
        if notice.unnumbered_change {
            self.unnumbered_version = self.unnumbered_version.max(notice.version);
        }
        self.event_seq = self.event_seq.max(notice.event_seq);
        self.deleted |= notice.deleted;
    }

    /// Whether a follower that sent everything up to `position` and knows the chat at
    /// `version` (after `resyncs` resynchronisations) has something to read. Versions and
    /// sequence numbers only grow, so a merged notice says no less than the ones it merged.
    /// A newer version whose notices changed only numbered events (a step's commit, a
    /// claim) is no news once those events are sent: the follower knows it without a read.
    pub fn news_for(&self, position: i64, version: i64, resyncs: u64) -> bool {
        self.deleted
            || self.event_seq > position
            || self.unnumbered_version > version
            || self.resyncs != resyncs
    }

    /// Whether a follower of the run's channel may put off the read its news asks for until
    /// the commit under way ends ([`Hub::commit_begins`]): the only news is events numbered
    /// past `position`, which the committed messages' frames are about to bring. The commit
    /// notice reaches the follower before them (the store sends it as its transaction ends;
    /// the run publishes the messages after reading them back), and a read in between
    /// fetched what the next frames carry. The end of the commit wakes the follower again,
    /// which then reads whatever its frames did not bring: a refused commit, or another
    /// change numbered meanwhile.
    pub fn awaits_committed_frames(&self, position: i64, version: i64, resyncs: u64) -> bool {
        self.committing > 0
            && !self.deleted
            && self.resyncs == resyncs
            && self.unnumbered_version <= version
            && self.event_seq > position
    }
}

/// What a subscriber gets: the chat's live frames (while a run streams), the durable frames
/// of the step in progress published so far, and the chat's change notices.
#[derive(Debug)]
pub struct Subscription {
    pub live: Live,
    pub changes: watch::Receiver<Changes>,
}

/// The live frames of a chat's run from the moment of subscribing: a receiver of the run's
/// channel (none while nothing streams) and the durable frames of the step in progress that
/// were published before it.
#[derive(Debug)]
pub struct Live {
    pub frames: Option<broadcast::Receiver<Arc<Frame>>>,
    pub backlog: Vec<Arc<Frame>>,
    /// Durable frames of the channel were published that the backlog no longer holds
    /// (logged, or committed messages, which it never holds): the receiver missed them and
    /// the store has them.
    pub incomplete: bool,
    /// [`Changes::runs`] when the receiver was taken.
    pub runs: u64,
    /// For a follower told that a run started ([`Hub::live`]): the run's latest `retry`
    /// while no durable frame followed it, though the run may have ended since. A follower
    /// that takes the receiver late still sends it, before it reads how the run ended. (A
    /// new connection learns of a retry from the chat's stored state instead.)
    pub retry: Option<Arc<Frame>>,
}

/// One chat's entry: its change notices, and while a run streams, its channel and the
/// durable frames of its step in progress.
#[derive(Debug)]
struct Channel {
    /// Present while a run of this process streams into the chat.
    sender: Option<broadcast::Sender<Arc<Frame>>>,
    changes: watch::Sender<Changes>,
    /// Durable frames since the last commit. A subscriber takes them together with its
    /// receiver, so frames not yet flushed to the live-part log are never missed.
    backlog: Vec<Arc<Frame>>,
    /// Runs of this process streaming into the channel (a superseded run may still be
    /// finishing while the next one starts).
    running: usize,
    /// See [`Live::incomplete`].
    incomplete: bool,
    /// See [`Live::retry`]. Kept after the run ends, for its followers that have not yet
    /// taken the receiver; a durable frame or a new run's channel drops it.
    retry: Option<Arc<Frame>>,
}

impl Channel {
    fn new() -> Self {
        Self {
            sender: None,
            changes: watch::channel(Changes::default()).0,
            backlog: Vec::new(),
            running: 0,
            incomplete: false,
            retry: None,
        }
    }

    /// The current channel, with the run's `retry` when `with_retry` ([`Live::retry`]).
    fn live(&self, with_retry: bool) -> Live {
        Live {
            frames: self.sender.as_ref().map(broadcast::Sender::subscribe),
            backlog: self.backlog.clone(),
            incomplete: self.incomplete,
            runs: self.changes.borrow().runs,
            retry: self.retry.clone().filter(|_| with_retry),
        }
    }

    /// Nobody follows the chat here.
    fn unwatched(&self) -> bool {
        self.changes.receiver_count() == 0
    }
}

/// Shards of the hub's map. Every streamed part takes its chat's shard, and so do the log
/// writer (after each write) and the notice relay: with one map for all chats, runs on
/// different runtime threads queued on one lock.
const SHARDS: usize = 16;

type Shard = Mutex<HashMap<String, Channel>>;

/// The per-chat channels of this process.
#[derive(Debug)]
pub struct Hub {
    shards: [Shard; SHARDS],
    /// Picks a chat's shard (keyed per process, like the maps themselves).
    hasher: RandomState,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Shard::default()),
            hasher: RandomState::new(),
        }
    }
}

impl Hub {
    pub fn new() -> Self {
        Self::default()
    }

    /// The shard that holds this chat's entry.
    fn lock(&self, chat_id: &str) -> MutexGuard<'_, HashMap<String, Channel>> {
        // The remainder is below SHARDS, so the index is in bounds and fits a usize.
        let at = (self.hasher.hash_one(chat_id) % SHARDS as u64) as usize;
        lock_shard(&self.shards[at])
    }

    /// Subscribes to a chat's live events and change notices, with the durable frames of
    /// the step in progress published so far.
    pub fn subscribe(&self, chat_id: &str) -> Subscription {
        let mut channels = self.lock(chat_id);
        let channel = channels
            .entry(chat_id.to_owned())
            .or_insert_with(Channel::new);
        Subscription {
            live: channel.live(false),
            changes: channel.changes.subscribe(),
        }
    }

    /// A receiver of the chat's current run channel with the step's backlog, for a
    /// subscriber told that a run started ([`Changes::runs`]).
    pub fn live(&self, chat_id: &str) -> Live {
        self.lock(chat_id).get(chat_id).map_or(
            Live {
                frames: None,
                backlog: Vec::new(),
                incomplete: false,
                runs: 0,
                retry: None,
            },
            |channel| channel.live(true),
        )
    }

    /// A chat changed: wakes its subscribers (a chat nobody follows here costs a lookup).
    pub fn changed(&self, notice: &ChangeNotice) {
        let chat_id = notice.chat_id.to_string();
        if let Some(channel) = self.lock(&chat_id).get(&chat_id) {
            channel.changes.send_modify(|changes| changes.merge(notice));
        }
    }

    /// Notices may have been lost: every subscriber reads its chat again.
    pub fn resync(&self) {
        for shard in &self.shards {
            for channel in lock_shard(shard).values() {
                channel
                    .changes
                    .send_modify(|changes| changes.resyncs = changes.resyncs.wrapping_add(1));
            }
        }
    }

    /// Marks a run of this process as streaming into the chat: its frames are kept as the
    /// backlog until [`Hub::commit`] even while nobody listens.
    pub fn begin_run(&self, chat_id: &str) {
        let mut channels = self.lock(chat_id);
        let channel = channels
            .entry(chat_id.to_owned())
            .or_insert_with(Channel::new);
        channel.running += 1;
        channel.incomplete |= !channel.backlog.is_empty();
        channel.backlog.clear();
        if channel.sender.is_none() {
            channel.sender = Some(broadcast::channel(SUBSCRIBER_BUFFER).0);
            channel.incomplete = false;
            channel.retry = None;
            channel
                .changes
                .send_modify(|changes| changes.runs = changes.runs.wrapping_add(1));
        }
    }

    /// The run ended: its backlog is no longer needed.
    pub fn end_run(&self, chat_id: &str) {
        let mut channels = self.lock(chat_id);
        if let Some(channel) = channels.get_mut(chat_id) {
            channel.running = channel.running.saturating_sub(1);
            if channel.running == 0 {
                channel.backlog.clear();
                // Receivers get what is still queued for them, then `Closed`.
                channel.sender = None;
                if channel.unwatched() {
                    channels.remove(chat_id);
                }
            }
        }
    }

    /// The live-part log holds the chat's parts through `seq`: the backlog keeps only those
    /// after it. A subscriber reads the log after taking the backlog, so it still gets every
    /// part, and a long step no longer keeps all its frames in memory until its commit.
    pub fn logged(&self, chat_id: &str, seq: u64) {
        if let Some(channel) = self.lock(chat_id).get_mut(chat_id) {
            let before = channel.backlog.len();
            channel.backlog.retain(|frame| frame.seq > seq);
            channel.incomplete |= channel.backlog.len() < before;
            if channel.backlog.is_empty() {
                channel.backlog = Vec::new();
            }
        }
    }

    /// A step was committed: its live frames are superseded by the committed messages.
    pub fn commit(&self, chat_id: &str) {
        if let Some(channel) = self.lock(chat_id).get_mut(chat_id) {
            channel.incomplete |= !channel.backlog.is_empty();
            channel.backlog = Vec::new();
        }
    }

    /// A run of this process starts committing a step of the chat, whose messages it will
    /// publish as frames ([`Changes::awaits_committed_frames`]). The commit lasts until the
    /// returned guard is dropped (after the frames went out, or on failure); its end wakes
    /// the chat's followers to look at their news again. Its start wakes no one.
    pub fn commit_begins(self: &Arc<Self>, chat_id: &str) -> CommitUnderWay {
        if let Some(channel) = self.lock(chat_id).get(chat_id) {
            channel.changes.send_if_modified(|changes| {
                changes.committing = changes.committing.saturating_add(1);
                false
            });
        }
        CommitUnderWay {
            hub: self.clone(),
            chat_id: chat_id.to_owned(),
        }
    }

    fn commit_ends(&self, chat_id: &str) {
        if let Some(channel) = self.lock(chat_id).get(chat_id) {
            // Always a wake-up: a follower may have put off a read for any news it found
            // while the commit was under way, not only the commit's own notice.
            channel
                .changes
                .send_modify(|changes| changes.committing = changes.committing.saturating_sub(1));
        }
    }

    /// Publishes to a chat's subscribers, if any. Never blocks.
    pub fn publish(&self, chat_id: &str, frame: Frame) {
        let mut channels = self.lock(chat_id);
        let Some(channel) = channels.get_mut(chat_id) else {
            return;
        };
        let Some(sender) = &channel.sender else {
            // Nothing of this process streams into the chat; an entry nobody follows goes.
            if channel.unwatched() {
                channels.remove(chat_id);
            }
            return;
        };
        let frame = Arc::new(frame);
        if frame.durable {
            channel.retry = None;
        } else if frame.event == "retry" {
            channel.retry = Some(frame.clone());
        }
        if frame.durable && frame.event != "message" {
            channel.backlog.push(frame.clone());
        } else if frame.durable {
            channel.incomplete = true;
        }
        // No receiver is no error: a late subscriber takes the backlog.
        let _ = sender.send(frame);
    }

    /// A subscriber left: drops the chat's channel when nothing streams into it and nobody
    /// else listens, so finished chats keep no frames in memory.
    pub fn prune(&self, chat_id: &str) {
        let mut channels = self.lock(chat_id);
        let idle = channels
            .get(chat_id)
            .is_some_and(|c| c.running == 0 && c.unwatched());
        if idle {
            channels.remove(chat_id);
        }
    }

    /// Number of chats with live channels.
    pub fn channel_count(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| lock_shard(shard).len())
            .sum()
    }
}

/// A step commit under way ([`Hub::commit_begins`]); dropping it ends the commit.
#[derive(Debug)]
#[must_use = "the commit ends when the guard is dropped"]
pub struct CommitUnderWay {
    hub: Arc<Hub>,
    chat_id: String,
}

impl Drop for CommitUnderWay {
    fn drop(&mut self) {
        self.hub.commit_ends(&self.chat_id);
    }
}

fn lock_shard(shard: &Shard) -> MutexGuard<'_, HashMap<String, Channel>> {
    // Every critical section is a single map operation; a poisoned map is still whole.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands every change notice of the store to the hub until the process stops: one task per
/// process, whatever the number of subscribers.
pub async fn relay_notices(store: Arc<dyn Store>, hub: Arc<Hub>) {
    let mut local = store.subscribe();
    let mut remote = match store.subscribe_remote().await {
        Ok(stream) => Some(stream),
        Err(error) => {
            tracing::warn!(%error, "listening for other replicas' changes failed");
            None
        }
    };
    loop {
        tokio::select! {
            received = local.recv() => match received {
                Ok(notice) => hub.changed(&notice),
                Err(broadcast::error::RecvError::Lagged(_)) => hub.resync(),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            Some(notice) = async {
                match remote.as_mut() {
                    Some(stream) => stream.next().await,
                    None => std::future::pending().await,
                }
            } => match notice {
                RemoteNotice::Changed(notice) => hub.changed(&notice),
                RemoteNotice::Missed => hub.resync(),
            },
        }
    }
}

#[cfg(test)]
mod tests;
