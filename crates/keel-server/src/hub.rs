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
mod tests {
    use super::*;

    fn frame(seq: u64) -> Frame {
        Frame::new(seq, "part", "{}", true, 1)
    }

    fn receiver(hub: &Hub, chat: &str) -> broadcast::Receiver<Arc<Frame>> {
        hub.subscribe(chat).live.frames.expect("a run streams")
    }

    #[tokio::test]
    async fn subscribers_receive_in_order() {
        let hub = Hub::new();
        hub.begin_run("c");
        let mut a = receiver(&hub, "c");
        let mut b = receiver(&hub, "c");
        hub.publish("c", frame(1));
        hub.publish("c", frame(2));
        assert_eq!(a.recv().await.unwrap().seq, 1);
        assert_eq!(a.recv().await.unwrap().seq, 2);
        assert_eq!(b.recv().await.unwrap().seq, 1);
    }

    #[tokio::test]
    async fn every_subscriber_gets_the_one_encoded_event() {
        let hub = Hub::new();
        hub.begin_run("c");
        let mut a = receiver(&hub, "c");
        let mut b = receiver(&hub, "c");
        hub.publish("c", Frame::new(5, "part", r#"{"x":1}"#, true, 1));
        let (a, b) = (a.recv().await.unwrap(), b.recv().await.unwrap());
        assert_eq!(a.sse().as_ptr(), b.sse().as_ptr(), "encoded once, shared");
        assert_eq!(&a.sse()[..], b"id: 5\nevent: part\ndata: {\"x\":1}\n\n");
        assert_eq!(a.data_bytes(), br#"{"x":1}"#);
    }

    #[tokio::test]
    async fn a_slow_subscriber_lags_without_blocking_the_publisher() {
        let hub = Hub::new();
        hub.begin_run("c");
        let mut slow = receiver(&hub, "c");
        for seq in 0..(SUBSCRIBER_BUFFER as u64 + 10) {
            hub.publish("c", frame(seq));
        }
        assert!(matches!(
            slow.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
    }

    #[test]
    fn channels_without_subscribers_are_dropped() {
        let hub = Hub::new();
        drop(hub.subscribe("c"));
        hub.publish("c", frame(1));
        assert_eq!(hub.channel_count(), 0);
        hub.publish("unknown", frame(1));
    }

    #[test]
    fn a_late_subscriber_gets_the_steps_backlog_until_commit() {
        let hub = Hub::new();
        hub.begin_run("c");
        hub.publish("c", frame(1));
        hub.publish("c", frame(2));
        let backlog = hub.subscribe("c").live.backlog;
        assert_eq!(
            backlog.iter().map(|f| f.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
        hub.commit("c");
        assert!(hub.subscribe("c").live.backlog.is_empty());
        hub.end_run("c");
    }

    #[test]
    fn the_backlog_keeps_only_the_frames_the_log_does_not_hold_yet() {
        let hub = Hub::new();
        hub.begin_run("c");
        for seq in 1..=4 {
            hub.publish("c", frame(seq));
        }
        hub.logged("c", 2);
        let backlog = hub.subscribe("c").live.backlog;
        assert_eq!(
            backlog.iter().map(|f| f.seq).collect::<Vec<_>>(),
            vec![3, 4]
        );
        hub.logged("c", 4);
        assert!(hub.subscribe("c").live.backlog.is_empty());
        hub.logged("unknown", 4);
        hub.end_run("c");
    }

    #[test]
    fn a_receiver_taken_after_frames_left_the_backlog_is_told_to_read_the_store() {
        let hub = Hub::new();
        let _watching = hub.subscribe("c");
        hub.begin_run("c");
        // Nothing published yet, or everything still in the backlog: the receiver and the
        // backlog hold it all.
        assert!(!hub.live("c").incomplete);
        hub.publish("c", frame(1));
        assert!(!hub.live("c").incomplete);
        // Logged and dropped from the backlog: only the store has it now.
        hub.logged("c", 1);
        assert!(hub.live("c").incomplete);
        hub.end_run("c");
        // A new channel starts complete; a committed message is never in the backlog.
        hub.begin_run("c");
        assert!(!hub.live("c").incomplete);
        hub.publish("c", Frame::new(2, "message", "{}", true, 1));
        assert!(hub.live("c").incomplete);
        hub.end_run("c");
    }

    #[test]
    fn a_finished_chat_keeps_no_channel_once_its_last_subscriber_leaves() {
        let hub = Hub::new();
        let rx = hub.subscribe("c");
        hub.begin_run("c");
        hub.publish("c", frame(1));
        hub.end_run("c");
        assert_eq!(hub.channel_count(), 1, "a subscriber is still connected");
        hub.prune("c");
        assert_eq!(hub.channel_count(), 1, "it still holds its receiver");
        drop(rx);
        hub.prune("c");
        assert_eq!(hub.channel_count(), 0);
    }

    fn notice(chat_id: uuid::Uuid, version: i64, event_seq: i64) -> ChangeNotice {
        ChangeNotice {
            chat_id,
            version,
            status: keel_store::ChatStatus::Running,
            history_version: 0,
            event_seq,
            deleted: false,
            owner: String::new(),
            listing: false,
            unowned: false,
            unnumbered_change: true,
        }
    }

    #[tokio::test]
    async fn a_notice_wakes_the_followers_of_its_chat_and_no_one_else() {
        let hub = Hub::new();
        let (one, other) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let mut mine = hub.subscribe(&one.to_string()).changes;
        let theirs = hub.subscribe(&other.to_string()).changes;
        hub.changed(&notice(one, 3, 10));
        assert!(mine.has_changed().unwrap());
        assert!(!theirs.has_changed().unwrap());
        assert_eq!(mine.borrow_and_update().event_seq, 10);
        // A chat nobody follows here costs nothing and keeps no entry.
        hub.changed(&notice(uuid::Uuid::new_v4(), 1, 1));
        assert_eq!(hub.channel_count(), 2);
        hub.resync();
        assert!(theirs.has_changed().unwrap());
    }

    #[test]
    fn every_shard_is_counted_and_resynchronised() {
        let hub = Hub::new();
        let chats: Vec<uuid::Uuid> = (0..SHARDS * 8).map(|_| uuid::Uuid::new_v4()).collect();
        let followers: Vec<_> = chats
            .iter()
            .map(|chat| hub.subscribe(&chat.to_string()).changes)
            .collect();
        assert_eq!(hub.channel_count(), chats.len());
        hub.resync();
        assert!(followers.iter().all(|f| f.has_changed().unwrap()));
        // Each chat's notice reaches its own entry, whichever shard holds it.
        for (at, chat) in chats.iter().enumerate() {
            hub.changed(&notice(*chat, 2, at as i64 + 1));
        }
        for (at, follower) in followers.iter().enumerate() {
            assert_eq!(follower.borrow().event_seq, at as i64 + 1);
        }
        drop(followers);
        for chat in &chats {
            hub.prune(&chat.to_string());
        }
        assert_eq!(hub.channel_count(), 0);
    }

    #[tokio::test]
    async fn a_commit_under_way_wakes_its_followers_only_when_it_ends() {
        let hub = Arc::new(Hub::new());
        let chat = uuid::Uuid::new_v4();
        let key = chat.to_string();
        let mut follower = hub.subscribe(&key).changes;
        hub.begin_run(&key);
        follower.borrow_and_update();
        let under_way = hub.commit_begins(&key);
        assert!(!follower.has_changed().unwrap(), "its start wakes no one");
        assert_eq!(follower.borrow().committing, 1);
        // The commit's notice wakes the follower while the commit is under way.
        hub.changed(&ChangeNotice {
            unnumbered_change: false,
            ..notice(chat, 6, 42)
        });
        assert!(follower.has_changed().unwrap());
        assert_eq!(follower.borrow_and_update().committing, 1);
        drop(under_way);
        assert!(
            follower.has_changed().unwrap(),
            "its end wakes the follower again"
        );
        assert_eq!(follower.borrow_and_update().committing, 0);
        // A chat without an entry here: nothing to count, nothing to wake.
        drop(hub.commit_begins(&uuid::Uuid::new_v4().to_string()));
        assert_eq!(hub.channel_count(), 1);
    }

    #[test]
    fn a_follower_waits_for_committed_frames_only_for_numbered_news() {
        let committing = Changes {
            version: 6,
            unnumbered_version: 5,
            event_seq: 42,
            committing: 1,
            ..Changes::default()
        };
        // The commit numbered messages past the position: their frames are coming.
        assert!(committing.awaits_committed_frames(40, 5, 0));
        // Nothing under way: the news is read.
        let settled = Changes {
            committing: 0,
            ..committing
        };
        assert!(!settled.awaits_committed_frames(40, 5, 0));
        // A change no frame carries (a retry, an error), lost notices, or a deletion: read
        // (or end) at once.
        assert!(!committing.awaits_committed_frames(40, 4, 0));
        assert!(!committing.awaits_committed_frames(40, 5, 1));
        let deleted = Changes {
            deleted: true,
            ..committing
        };
        assert!(!deleted.awaits_committed_frames(40, 5, 0));
        // Nothing numbered past the position: no news, nothing to wait for.
        assert!(!committing.awaits_committed_frames(42, 5, 0));
    }

    #[test]
    fn notices_merge_to_the_highest_version_and_sequence() {
        let chat = uuid::Uuid::new_v4();
        let mut changes = Changes::default();
        changes.merge(&notice(chat, 5, 40));
        // An older notice arriving late says nothing new.
        changes.merge(&notice(chat, 4, 30));
        assert_eq!((changes.version, changes.event_seq), (5, 40));
    }

    #[test]
    fn a_follower_reads_only_when_a_notice_is_news_to_it() {
        let changes = Changes {
            version: 5,
            unnumbered_version: 5,
            event_seq: 40,
            ..Changes::default()
        };
        // Parts it already sent from the hub (the log writer's notices) and a version it
        // already read: no query.
        assert!(!changes.news_for(40, 5, 0));
        assert!(changes.news_for(39, 5, 0), "parts it has not sent");
        assert!(changes.news_for(40, 4, 0), "a retry or an error reported");
        assert!(changes.news_for(40, 5, 1), "notices were lost since");
        let deleted = Changes {
            deleted: true,
            ..changes
        };
        assert!(deleted.news_for(40, 5, 0));
    }

    #[test]
    fn a_commit_whose_messages_the_follower_sent_is_no_news() {
        let chat = uuid::Uuid::new_v4();
        let mut changes = Changes::default();
        changes.merge(&notice(chat, 5, 40));
        let commit = ChangeNotice {
            unnumbered_change: false,
            ..notice(chat, 6, 42)
        };
        changes.merge(&commit);
        assert_eq!(
            (
                changes.version,
                changes.unnumbered_version,
                changes.event_seq
            ),
            (6, 5, 42)
        );
        assert!(
            !changes.news_for(42, 5, 0),
            "its messages went out as frames"
        );
        assert!(changes.news_for(41, 5, 0), "a message it has not sent");
        // A retry reported after the commit is news again, whatever came before it.
        changes.merge(&notice(chat, 7, 42));
        assert!(changes.news_for(42, 6, 0));
    }

    #[tokio::test]
    async fn an_idle_chat_holds_no_frame_buffer_and_a_run_start_calls_its_followers() {
        let hub = Hub::new();
        let mut idle = hub.subscribe("c");
        assert!(idle.live.frames.is_none(), "nothing streams: no channel");
        hub.publish("c", frame(1));
        hub.begin_run("c");
        assert!(idle.changes.has_changed().unwrap());
        assert_eq!(idle.changes.borrow_and_update().runs, 1);
        hub.publish("c", frame(2));
        // The follower takes the run's channel late: the frame it missed is the backlog.
        let mut live = hub.live("c");
        assert_eq!(live.runs, 1);
        assert_eq!(
            live.backlog.iter().map(|f| f.seq).collect::<Vec<_>>(),
            vec![2]
        );
        let mut frames = live.frames.take().unwrap();
        hub.publish("c", frame(3));
        hub.end_run("c");
        assert_eq!(frames.recv().await.unwrap().seq, 3);
        assert!(matches!(
            frames.recv().await,
            Err(broadcast::error::RecvError::Closed)
        ));
        assert_eq!(hub.channel_count(), 1, "the follower still follows");
        drop(idle);
        hub.prune("c");
        assert_eq!(hub.channel_count(), 0);
    }

    fn retry(seq: u64) -> Frame {
        Frame::new(seq, "retry", r#"{"attempt":2}"#, false, 1)
    }

    fn retry_seq(live: &Live) -> Option<u64> {
        live.retry.as_ref().map(|f| f.seq)
    }

    #[test]
    fn a_follower_late_for_a_run_still_gets_its_retry_after_the_run_ended() {
        let hub = Hub::new();
        let _idle = hub.subscribe("c");
        hub.begin_run("c");
        hub.publish("c", retry(4));
        hub.end_run("c");
        assert_eq!(retry_seq(&hub.live("c")), Some(4), "the follower was there");
        assert_eq!(
            retry_seq(&hub.subscribe("c").live),
            None,
            "a new connection reads the chat's state instead"
        );
        hub.begin_run("c");
        assert_eq!(retry_seq(&hub.live("c")), None, "a new run starts clean");
    }

    #[test]
    fn a_retry_is_the_state_until_the_attempt_streams() {
        let hub = Hub::new();
        hub.begin_run("c");
        hub.publish("c", retry(4));
        assert_eq!(retry_seq(&hub.live("c")), Some(4));
        hub.publish("c", frame(5));
        assert_eq!(retry_seq(&hub.live("c")), None, "old news");
    }
}
