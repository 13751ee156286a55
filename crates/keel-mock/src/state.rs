//! State shared by all requests of one server: attempt counters, stored responses, ids.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use crate::config::MockConfig;
use crate::conversation::Item;
use crate::tally::Reported;

pub(crate) struct State {
    pub config: MockConfig,
    /// Cancelled when the server shuts down, so streams that stall or crawl end promptly
    /// instead of holding graceful shutdown open.
    pub shutdown: CancellationToken,
    attempts: Mutex<HashMap<(String, usize), u32>>,
    responses: Mutex<Stored>,
    /// The latest requests, oldest first, for tests that check what a client sent.
    requests: Mutex<VecDeque<(String, serde_json::Value)>>,
    /// Texts of the replies that ended with `pause_turn` (trailing whitespace trimmed, as a
    /// client sending them back as the last assistant turn must).
    paused: Mutex<HashSet<String>>,
    /// Every response delivered whole, in the order they finished (unscripted ones summed).
    reported: Mutex<Vec<Reported>>,
    seq: AtomicU64,
}

/// How many requests [`State::recent_requests`] keeps.
const RECENT_REQUESTS: usize = 64;

#[derive(Default)]
struct Stored {
    conversations: HashMap<String, Vec<Item>>,
    order: VecDeque<String>,
}

impl State {
    pub(crate) fn new(config: MockConfig, shutdown: CancellationToken) -> Self {
        Self {
            config,
            shutdown,
            attempts: Mutex::default(),
            responses: Mutex::default(),
            requests: Mutex::default(),
            paused: Mutex::default(),
            reported: Mutex::default(),
            seq: AtomicU64::new(1),
        }
    }

    /// A number unique within this server, for ids.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts one more attempt at `step` of the script keyed `key`; returns the count.
    pub(crate) fn attempt(&self, key: &str, step: usize) -> u32 {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = attempts.entry((key.to_owned(), step)).or_insert(0);
        *count += 1;
        *count
    }

    /// Attempts seen so far at `step` of the script keyed `key`.
    pub(crate) fn attempts(&self, key: &str, step: usize) -> u32 {
        let attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        attempts.get(&(key.to_owned(), step)).copied().unwrap_or(0)
    }

    /// Remembers a reply that paused its turn.
    pub(crate) fn pause(&self, text: &str) {
        let mut paused = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
        paused.insert(text.trim_end().to_owned());
    }

    /// Whether `text` is a paused reply sent back to be carried on.
    pub(crate) fn was_paused(&self, text: &str) -> bool {
        let paused = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
        paused.contains(text.trim_end())
    }

    /// Keeps a request body for [`Self::recent_requests`]; only the latest few are kept.
    pub(crate) fn record_request(&self, path: &str, body: &serde_json::Value) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if requests.len() >= RECENT_REQUESTS {
            requests.pop_front();
        }
        requests.push_back((path.to_owned(), body.clone()));
    }

    /// The latest requests (path and JSON body), oldest first.
    pub(crate) fn recent_requests(&self) -> Vec<(String, serde_json::Value)> {
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        requests.iter().cloned().collect()
    }

    /// Counts a response delivered whole.
    pub(crate) fn report(&self, reported: Reported) {
        let mut all = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        crate::tally::add(&mut all, reported);
    }

    /// Every response delivered whole so far.
    pub(crate) fn reported(&self) -> Vec<Reported> {
        let all = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        all.clone()
    }

    /// Remembers the conversation up to and including a response.
    pub(crate) fn store_response(&self, id: String, items: Vec<Item>) {
        let mut stored = self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while stored.order.len() >= self.config.max_stored_responses.max(1) {
            if let Some(oldest) = stored.order.pop_front() {
                stored.conversations.remove(&oldest);
            }
        }
        stored.order.push_back(id.clone());
        stored.conversations.insert(id, items);
    }

    pub(crate) fn stored_response(&self, id: &str) -> Option<Vec<Item>> {
        let stored = self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        stored.conversations.get(id).cloned()
    }
}
