//! One read of the live-part log for the followers of many chats.
//!
//! A follower of a run on another replica learns of new parts from change notices and
//! reads them from the log. The run's replica logs the parts of all its chats in one
//! transaction per window and notices them together, so the followers here wake together:
//! read one by one, that is one query per chat per window. Their reads are gathered
//! instead: while one read is in flight, the requests that arrive wait and go out as the
//! next read, one statement for all of them. A lone request goes out at once.

use std::collections::HashMap;
use std::sync::Arc;

use keel_store::{ChatId, LiveEntry, Store};
use tokio::sync::{mpsc, oneshot};

/// Most chats one read asks for.
const MAX_BATCH: usize = 1000;

/// What a request gets: the entries after its position, or `None` when the read failed
/// (logged once for the whole batch).
type Reply = Option<Vec<LiveEntry>>;

struct Request {
    chat: ChatId,
    after: i64,
    reply: oneshot::Sender<Reply>,
}

/// The handle followers read through; cheap to clone.
#[derive(Clone)]
pub struct LogReads {
    requests: mpsc::UnboundedSender<Request>,
}

impl LogReads {
    /// Starts the task that reads for every follower of this process.
    pub fn start(store: Arc<dyn Store>) -> Self {
        let (requests, received) = mpsc::unbounded_channel();
        tokio::spawn(serve(store, received));
        Self { requests }
    }

    /// The parts of the chat's step in progress after `after`
    /// ([`Store::live_parts_after`]); `None` when the read failed or the process stops.
    pub async fn after(&self, chat: ChatId, after: i64) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.requests.send(Request { chat, after, reply }).ok()?;
        answer.await.ok().flatten()
    }
}

async fn serve(store: Arc<dyn Store>, mut received: mpsc::UnboundedReceiver<Request>) {
    let mut batch = Vec::new();
    while received.recv_many(&mut batch, MAX_BATCH).await > 0 {
        answer(store.as_ref(), std::mem::take(&mut batch)).await;
    }
}

/// Reads for a batch of requests and answers each.
async fn answer(store: &dyn Store, batch: Vec<Request>) {
    let positions = lowest_positions(batch.iter().map(|r| (r.chat, r.after)));
    let found: HashMap<ChatId, Vec<LiveEntry>> = match store.live_parts_of(&positions).await {
        Ok(found) => found.into_iter().collect(),
        Err(error) => {
            tracing::warn!(%error, chats = positions.len(), "reading logged parts failed");
            for request in batch {
                let _ = request.reply.send(None);
            }
            return;
        }
    };
    for request in batch {
        let entries = match found.get(&request.chat) {
            Some(entries) => entries
                .iter()
                .filter(|e| e.seq > request.after)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        // A follower that left meanwhile dropped its receiver: nothing to do.
        let _ = request.reply.send(Some(entries));
    }
}

/// Each chat once, at the lowest position asked for it: what every request of it needs.
fn lowest_positions(requests: impl Iterator<Item = (ChatId, i64)>) -> Vec<(ChatId, i64)> {
    let mut lowest: HashMap<ChatId, i64> = HashMap::new();
    for (chat, after) in requests {
        lowest
            .entry(chat)
            .and_modify(|at| *at = (*at).min(after))
            .or_insert(after);
    }
    lowest.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_chat_is_read_once_from_the_lowest_position_asked() {
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let mut positions = lowest_positions([(a, 7), (b, 3), (a, 5), (a, 9)].into_iter());
        positions.sort_by_key(|(_, after)| *after);
        assert_eq!(positions, vec![(b, 3), (a, 5)]);
    }
}
