//! A soak client's event stream, read in the background for the whole life of a chat:
//! it reconnects with its last event id to a random replica whenever the stream breaks,
//! and drops it on purpose every few events. What it learns is shared with the user.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::check::EventView;
use super::live::Live;
use super::target::Target;

/// What the client has read so far.
#[derive(Debug, Default, Clone)]
pub struct Read {
    pub view: EventView,
    /// Live parts seen, and how many of them were complete tool calls.
    pub parts: usize,
    pub tool_calls: usize,
    /// Where a reconnect resumes.
    pub position: Option<i64>,
    /// A `message` event that could not be applied.
    pub error: Option<String>,
    /// The last few events (name and id), to explain a miss.
    pub recent: VecDeque<(String, Option<i64>)>,
    /// When the last event arrived, and from which replica.
    pub last_event: Option<(Instant, usize)>,
    /// Every connection and every event that changes history or position (`message`,
    /// `branch`, `stream_reset`), in order, to explain a message delivered twice.
    pub trail: Vec<String>,
}

/// How many events [`Read::recent`] keeps.
const RECENT: usize = 16;

/// The background reader of one chat; dropping it stops the reader.
pub struct Reader {
    pub read: Arc<Mutex<Read>>,
    /// The last status a `status` event carried.
    pub status: watch::Receiver<String>,
    task: JoinHandle<()>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Reader {
    pub fn start(target: Arc<Target>, chat: String, disconnect_every: Option<usize>) -> Self {
        let read = Arc::new(Mutex::new(Read::default()));
        let (status_tx, status) = watch::channel(String::new());
        let task = tokio::spawn(follow(
            target,
            chat,
            read.clone(),
            status_tx,
            disconnect_every,
        ));
        Self { read, status, task }
    }

    /// A look at what was read.
    pub fn with<T>(&self, look: impl FnOnce(&Read) -> T) -> T {
        look(&self.read.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

async fn follow(
    target: Arc<Target>,
    chat: String,
    read: Arc<Mutex<Read>>,
    status: watch::Sender<String>,
    disconnect_every: Option<usize>,
) {
    loop {
        let position = read.lock().unwrap_or_else(PoisonError::into_inner).position;
        let (replica, to) = target.pick();
        let Ok(mut live) = Live::open(&to.api, &chat, position).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        read.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .trail
            .push(format!("open@{position:?}/r{replica}"));
        let mut on_connection = 0;
        while let Ok(event) = live.next(Duration::from_secs(20)).await {
            on_connection += 1;
            let mut read = read.lock().unwrap_or_else(PoisonError::into_inner);
            read.position = live.last_id;
            if read.recent.len() == RECENT {
                read.recent.pop_front();
            }
            read.recent.push_back((event.kind.clone(), live.last_id));
            read.last_event = Some((Instant::now(), replica));
            match event.kind.as_str() {
                "message" | "branch" | "stream_reset" => {
                    let trail = match event.data()["id"].as_i64() {
                        Some(message) => format!("{}@{:?}=m{message}", event.kind, live.last_id),
                        None => format!("{}@{:?}", event.kind, live.last_id),
                    };
                    read.trail.push(trail);
                    if event.kind == "stream_reset" {
                        target
                            .resets
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    if let Err(error) = read.view.apply_event(&event.kind, &event.data()) {
                        read.error.get_or_insert(format!("{error:#}"));
                    }
                }
                "part" => {
                    read.parts += 1;
                    if event.is_complete_tool_call() {
                        read.tool_calls += 1;
                    }
                }
                "status" => {
                    let data = event.data();
                    let now = data["status"].as_str().unwrap_or_default();
                    status.send_replace(now.to_owned());
                }
                _ => {}
            }
            drop(read);
            if disconnect_every.is_some_and(|every| on_connection % every == 0) {
                break;
            }
        }
    }
}

/// Message id → event id, read from a fresh connection, to explain a miss.
pub async fn message_event_ids(shared: &Target, chat: &str) -> Vec<(i64, Option<i64>)> {
    let api = shared.any().api.clone();
    let Ok(mut live) = Live::open(&api, chat, None).await else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    while let Ok(event) = live.next(Duration::from_secs(1)).await {
        if event.kind == "message" {
            ids.push((event.data()["id"].as_i64().unwrap_or(-1), live.last_id));
        }
    }
    ids
}

/// What a client that reconnects from `read`'s position gets: its view completed from a
/// fresh connection to any replica, once it holds `committed` or `patience` runs out.
pub async fn resumed(
    target: &Target,
    chat: &str,
    read: &Read,
    committed: &[serde_json::Value],
    patience: Duration,
) -> anyhow::Result<EventView> {
    let mut view = read.view.clone();
    let mut position = read.position;
    let since = Instant::now();
    while !view.matches(committed) && target.patient(since, patience) {
        let Ok(mut live) = Live::open(&target.any().api, chat, position).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while let Ok(event) = live.next(patience).await {
            position = live.last_id;
            if matches!(event.kind.as_str(), "message" | "branch" | "stream_reset") {
                view.apply_event(&event.kind, &event.data())?;
                if view.matches(committed) {
                    break;
                }
            }
        }
    }
    Ok(view)
}
