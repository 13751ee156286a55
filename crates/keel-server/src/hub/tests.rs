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
