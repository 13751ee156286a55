//! The soak's usage check: Keel's usage records against what the mock provider reported
//! (`GET /stats` of the mock), under the rule `docs/observability.md` states: a step's
//! usage is what the attempt that completed it reported, so a response the mock delivered
//! whole is counted exactly once, unless the step it belonged to never committed it.
//!
//! | chats | Keel's figures must be |
//! | --- | --- |
//! | reading users, no exposure | exactly the sum of their chat's responses |
//! | reading users, `n` exposures | that sum less at most `n` whole responses of the chat |
//! | the rest (acting users, unscripted replies) | at most the sum of their responses |
//!
//! An exposure is something that can leave a response delivered whole uncommitted: a kill
//! while the chat ran (the daemon died between the usage and the commit), the user's
//! interrupt, a scripted stall or malformed line (the daemon gave up on the stream while the
//! mock may already have written its end). Each voids at most one response of the chat: a
//! chat has one model call under way at a time. Titles are not steps and are left out.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Input (cache writes included), cached input, output and reasoning tokens, as the usage
/// API counts them.
pub type Counts = [i64; 4];

/// One response the mock delivered whole (an entry of its `GET /stats`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reported {
    pub key: Option<String>,
    pub model: String,
    pub input_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub output_tokens: i64,
    pub reasoning_tokens: i64,
}

impl Reported {
    /// The counts Keel records for this report.
    pub fn counts(&self) -> Counts {
        [
            self.input_tokens + self.cache_write_tokens,
            self.cache_read_tokens,
            self.output_tokens,
            self.reasoning_tokens,
        ]
    }
}

/// A reading user's chat: its script's id, the chat and its exposures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub key: String,
    pub chat: String,
    pub exposures: usize,
}

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Keel's sums over every chat, and the mock's over every response but titles.
    pub keel: Counts,
    pub reported: Counts,
    /// Watched chats that matched exactly, with and without exposures.
    pub exact: usize,
    pub exposed: usize,
    /// Responses delivered whole that exposed chats never committed.
    pub voided: usize,
    /// Everything wrong, one line each.
    pub violations: Vec<String>,
}

fn add(a: Counts, b: Counts) -> Counts {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]]
}

fn sub(a: Counts, b: Counts) -> Counts {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3]]
}

fn within(a: Counts, b: Counts) -> bool {
    a.iter().zip(b).all(|(a, b)| *a <= b)
}

/// The fewest of `responses` (each used once, at most `at_most` of them) whose counts add
/// up to `missing`.
pub fn fewest_adding_up(missing: Counts, responses: &[Counts], at_most: usize) -> Option<usize> {
    // The fewest responses reaching each sum, pruned to sums that do not pass `missing`.
    let mut reachable: BTreeMap<Counts, usize> = BTreeMap::from([([0; 4], 0)]);
    if !within([0; 4], missing) {
        return None;
    }
    for response in responses {
        let before: Vec<(Counts, usize)> = reachable.iter().map(|(s, k)| (*s, *k)).collect();
        for (sum, k) in before {
            let more = add(sum, *response);
            if k < at_most && within(more, missing) {
                let fewest = reachable.entry(more).or_insert(k + 1);
                *fewest = (*fewest).min(k + 1);
            }
        }
    }
    reachable.get(&missing).copied()
}

/// Compares Keel's per-chat sums (`keel`, by chat id) with the mock's reports. Reports on
/// `title_model` are left out; a chat's responses are those whose key is its script's id.
pub fn compare(
    keel: &BTreeMap<String, Counts>,
    reported: &[Reported],
    watched: &[Watched],
    title_model: &str,
) -> Verdict {
    let mut verdict = Verdict::default();
    let mut by_key: BTreeMap<Option<&str>, Vec<Counts>> = BTreeMap::new();
    for report in reported.iter().filter(|r| r.model != title_model) {
        verdict.reported = add(verdict.reported, report.counts());
        by_key
            .entry(report.key.as_deref())
            .or_default()
            .push(report.counts());
    }
    verdict.keel = keel.values().fold([0; 4], |a, b| add(a, *b));
    let mut rest_keel = verdict.keel;
    let mut rest_reported = verdict.reported;
    for chat in watched {
        let responses = by_key
            .get(&Some(chat.key.as_str()))
            .cloned()
            .unwrap_or_default();
        let sum = responses.iter().fold([0; 4], |a, b| add(a, *b));
        let got = keel.get(&chat.chat).copied().unwrap_or_default();
        rest_keel = sub(rest_keel, got);
        rest_reported = sub(rest_reported, sum);
        let missing = sub(sum, got);
        match fewest_adding_up(missing, &responses, chat.exposures) {
            Some(0) => verdict.exact += 1,
            Some(voided) => {
                verdict.exposed += 1;
                verdict.voided += voided;
            }
            None => verdict.violations.push(format!(
                "chat {} ({}): Keel counted {got:?}, the mock reported {sum:?} in {} responses \
                 ({} exposures)",
                chat.chat,
                chat.key,
                responses.len(),
                chat.exposures
            )),
        }
    }
    if !within(rest_keel, rest_reported) {
        verdict.violations.push(format!(
            "the other chats: Keel counted {rest_keel:?}, more than the mock reported \
             ({rest_reported:?})"
        ));
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(key: &str, input: i64, output: i64) -> Reported {
        Reported {
            key: Some(key.to_owned()),
            model: "mock".to_owned(),
            input_tokens: input,
            cache_read_tokens: 1,
            cache_write_tokens: 2,
            output_tokens: output,
            reasoning_tokens: 0,
        }
    }

    fn watched(key: &str, chat: &str, exposures: usize) -> Watched {
        Watched {
            key: key.to_owned(),
            chat: chat.to_owned(),
            exposures,
        }
    }

    fn keel(pairs: &[(&str, Counts)]) -> BTreeMap<String, Counts> {
        pairs.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect()
    }

    #[test]
    fn a_chat_counted_exactly_once_passes() {
        let reports = [report("a", 10, 5), report("a", 20, 7)];
        let verdict = compare(
            &keel(&[("c1", [34, 2, 12, 0])]),
            &reports,
            &[watched("a", "c1", 0)],
            "t",
        );
        assert!(verdict.violations.is_empty(), "{verdict:?}");
        assert_eq!(verdict.exact, 1);
        assert_eq!(verdict.keel, verdict.reported);
    }

    #[test]
    fn a_response_counted_twice_fails_even_with_exposures() {
        let reports = [report("a", 10, 5)];
        let verdict = compare(
            &keel(&[("c1", [24, 2, 10, 0])]),
            &reports,
            &[watched("a", "c1", 3)],
            "t",
        );
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
    }

    #[test]
    fn a_lost_response_fails_a_chat_without_exposure() {
        let reports = [report("a", 10, 5), report("a", 10, 5)];
        let verdict = compare(
            &keel(&[("c1", [12, 1, 5, 0])]),
            &reports,
            &[watched("a", "c1", 0)],
            "t",
        );
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
    }

    #[test]
    fn an_exposure_may_void_one_whole_response_and_no_more() {
        let reports = [report("a", 10, 5), report("a", 10, 5), report("a", 30, 9)];
        let one_lost = keel(&[("c1", [44, 2, 14, 0])]);
        let verdict = compare(&one_lost, &reports, &[watched("a", "c1", 1)], "t");
        assert!(verdict.violations.is_empty(), "{verdict:?}");
        assert_eq!((verdict.exposed, verdict.voided), (1, 1));
        let two_lost = keel(&[("c1", [32, 1, 9, 0])]);
        assert_eq!(
            compare(&two_lost, &reports, &[watched("a", "c1", 1)], "t")
                .violations
                .len(),
            1
        );
        assert!(
            compare(&two_lost, &reports, &[watched("a", "c1", 2)], "t")
                .violations
                .is_empty()
        );
    }

    #[test]
    fn a_part_of_a_response_is_never_what_was_voided() {
        let reports = [report("a", 10, 5), report("a", 10, 5)];
        let verdict = compare(
            &keel(&[("c1", [20, 2, 10, 0])]),
            &reports,
            &[watched("a", "c1", 2)],
            "t",
        );
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
    }

    #[test]
    fn titles_are_left_out_and_other_chats_may_not_exceed_their_reports() {
        let mut title = report("a", 99, 99);
        title.model = "t".to_owned();
        let reports = [report("a", 10, 5), title, report("x", 10, 5)];
        let fine = keel(&[("c1", [12, 1, 5, 0]), ("c2", [12, 1, 5, 0])]);
        let verdict = compare(&fine, &reports, &[watched("a", "c1", 0)], "t");
        assert!(verdict.violations.is_empty(), "{verdict:?}");
        assert_eq!(verdict.reported, [24, 2, 10, 0]);
        let over = keel(&[("c1", [12, 1, 5, 0]), ("c2", [24, 2, 10, 0])]);
        assert_eq!(
            compare(&over, &reports, &[watched("a", "c1", 0)], "t")
                .violations
                .len(),
            1
        );
    }

    #[test]
    fn the_fewest_responses_that_add_up_are_found() {
        let responses = [[1, 0, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0]];
        assert_eq!(fewest_adding_up([0; 4], &responses, 0), Some(0));
        assert_eq!(fewest_adding_up([3, 0, 0, 0], &responses, 2), Some(1));
        assert_eq!(fewest_adding_up([5, 0, 0, 0], &responses, 1), None);
        assert_eq!(fewest_adding_up([5, 0, 0, 0], &responses, 2), Some(2));
        assert_eq!(fewest_adding_up([-1, 0, 0, 0], &responses, 3), None);
        // Each response is voided once at most.
        assert_eq!(fewest_adding_up([2, 0, 0, 0], &responses[..1], 2), None);
    }
}
