//! Where the measured phase of `keel bench load` spends its time, and the throughput while
//! every stream was live.
//!
//! parts / wall understates a daemon that keeps up: the wall time also holds the ramp
//! (every chat's message posted, claimed, and its model call opened) and the tail (the
//! last step committed and delivered), when fewer than all streams flow. The live window
//! is the span in which every chat's mock stream had started and none had ended; in it the
//! parts the mock sent (by its stamps) and the parts the clients received (by their
//! receive times) are counted. A daemon that falls behind receives fewer than were sent in
//! the same window, so the share shows it; and a mock that cannot keep its pace (the machine
//! is short of CPU) sends fewer than the nominal rate, which the offered figure shows.

/// One chat's measured reply, all times in microseconds since the Unix epoch.
#[derive(Debug, Clone, Default)]
pub(super) struct ChatTimes {
    /// The message was posted.
    pub posted: u64,
    /// Each stamped token: (the mock's send time, the client's receive time).
    pub parts: Vec<(u64, u64)>,
    /// The committed reply's `message` event arrived.
    pub committed: u64,
}

/// Where the phase's wall time went, in microseconds from its start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Phases {
    /// The last message was posted.
    pub last_posted: u64,
    /// The mock sent the last chat's first token: every stream is live from here.
    pub last_first_token: u64,
    /// The mock sent the first chat's last token: streams start ending here.
    pub first_last_token: u64,
    /// The mock sent the last token of all.
    pub last_token: u64,
    /// The last committed reply arrived: the phase ends.
    pub last_committed: u64,
    /// Median time from a chat's first to its last token, as the mock sent them.
    pub stream_p50: u64,
}

/// The span in which every stream was live, and what was sent and received in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LiveWindow {
    pub micros: u64,
    /// Tokens the mock stamped inside the window.
    pub offered: u64,
    /// Tokens the clients received inside the window.
    pub delivered: u64,
}

impl LiveWindow {
    pub fn offered_per_second(&self) -> f64 {
        per_second(self.offered, self.micros)
    }

    pub fn delivered_per_second(&self) -> f64 {
        per_second(self.delivered, self.micros)
    }

    /// Delivered as a share of offered, in percent.
    pub fn share(&self) -> f64 {
        100.0 * self.delivered as f64 / self.offered.max(1) as f64
    }
}

fn per_second(count: u64, micros: u64) -> f64 {
    count as f64 * 1e6 / micros.max(1) as f64
}

/// The phase's milestones, relative to `began`; `None` when a chat received no token.
pub(super) fn phases(began: u64, chats: &[ChatTimes]) -> Option<Phases> {
    let mut streams = Vec::with_capacity(chats.len());
    let mut phases = Phases {
        last_posted: 0,
        last_first_token: 0,
        first_last_token: u64::MAX,
        last_token: 0,
        last_committed: 0,
        stream_p50: 0,
    };
    let since = |at: u64| at.saturating_sub(began);
    for chat in chats {
        let (first, last) = sent_span(chat)?;
        streams.push(last - first);
        phases.last_posted = phases.last_posted.max(since(chat.posted));
        phases.last_first_token = phases.last_first_token.max(since(first));
        phases.first_last_token = phases.first_last_token.min(since(last));
        phases.last_token = phases.last_token.max(since(last));
        phases.last_committed = phases.last_committed.max(since(chat.committed));
    }
    streams.sort_unstable();
    phases.stream_p50 = *streams.get(streams.len().checked_sub(1)? / 2)?;
    Some(phases)
}

/// What was sent and received while every stream was live; `None` when no such span
/// exists (the last stream started after the first one ended, or a chat got no token).
pub(super) fn live_window(chats: &[ChatTimes]) -> Option<LiveWindow> {
    let mut start = 0;
    let mut end = u64::MAX;
    for chat in chats {
        let (first, last) = sent_span(chat)?;
        start = start.max(first);
        end = end.min(last);
    }
    if chats.is_empty() || end <= start {
        return None;
    }
    let inside = |at: u64| (start..end).contains(&at);
    let mut window = LiveWindow {
        micros: end - start,
        offered: 0,
        delivered: 0,
    };
    for &(sent, received) in chats.iter().flat_map(|c| &c.parts) {
        window.offered += u64::from(inside(sent));
        window.delivered += u64::from(inside(received));
    }
    Some(window)
}

/// A chat's first and last send stamps.
fn sent_span(chat: &ChatTimes) -> Option<(u64, u64)> {
    let first = chat.parts.iter().map(|&(sent, _)| sent).min()?;
    let last = chat.parts.iter().map(|&(sent, _)| sent).max()?;
    Some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chat whose tokens are sent every `every` µs from `from`, each received `lag` later.
    fn chat(from: u64, tokens: u64, every: u64, lag: impl Fn(u64) -> u64) -> ChatTimes {
        let parts = (0..tokens)
            .map(|i| {
                let sent = from + i * every;
                (sent, sent + lag(i))
            })
            .collect::<Vec<_>>();
        let last = parts.last().map_or(from, |p| p.1);
        ChatTimes {
            posted: from.saturating_sub(100),
            parts,
            committed: last + 50,
        }
    }

    #[test]
    fn a_daemon_that_keeps_up_delivers_what_was_offered() {
        // Two chats start 1 ms apart and stream 1,000 tokens at one per ms, 200 µs lag.
        let chats = [
            chat(10_000, 1_000, 1_000, |_| 200),
            chat(11_000, 1_000, 1_000, |_| 200),
        ];
        let window = live_window(&chats).unwrap();
        assert_eq!(window.micros, 998_000);
        assert_eq!(window.offered, 2 * 998);
        // A constant lag shifts the received tokens, it does not lose them.
        assert!(window.share() > 99.0, "{window:?}");
        assert!((window.offered_per_second() - 2_000.0).abs() < 1.0);
    }

    #[test]
    fn a_daemon_that_falls_behind_shows_it() {
        // Each token waits longer than the one before: a growing backlog.
        let chats = [
            chat(0, 1_000, 1_000, |i| i * 500),
            chat(0, 1_000, 1_000, |i| i * 500),
        ];
        let window = live_window(&chats).unwrap();
        assert!(window.share() < 70.0, "{window:?}");
    }

    #[test]
    fn no_window_when_the_ramp_outlasts_a_stream() {
        let chats = [chat(0, 10, 1_000, |_| 0), chat(20_000, 10, 1_000, |_| 0)];
        assert_eq!(live_window(&chats), None);
        assert_eq!(live_window(&[]), None);
        assert_eq!(live_window(&[ChatTimes::default()]), None);
    }

    #[test]
    fn phases_mark_the_ramp_the_streams_and_the_tail() {
        let chats = [chat(1_000, 5, 1_000, |_| 10), chat(3_000, 5, 1_000, |_| 10)];
        let phases = phases(0, &chats).unwrap();
        assert_eq!(
            phases,
            Phases {
                last_posted: 2_900,
                last_first_token: 3_000,
                first_last_token: 5_000,
                last_token: 7_000,
                last_committed: 7_060,
                stream_p50: 4_000,
            }
        );
    }
}
