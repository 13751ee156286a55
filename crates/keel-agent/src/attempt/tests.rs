#[test]
fn a_checkpoint_is_due_by_count_or_on_new_reasoning_metadata() {
    let mut acc = StepAccumulator::new();
    acc.content_events = 8;
    assert!(super::checkpoint_due(4, (4, 0), &acc));
    assert!(!super::checkpoint_due(4, (5, 0), &acc));
    // 0: never by count, however long the reply.
    acc.content_events = 100_000;
    assert!(!super::checkpoint_due(0, (0, 0), &acc));
    // A signature arrived.
    acc.metadata_events = 1;
    assert!(super::checkpoint_due(0, (100_000, 0), &acc));
    assert!(!super::checkpoint_due(0, (100_000, 1), &acc));
}
use super::*;

#[test]
fn a_continued_stopped_reply_is_the_prefix_of_every_attempt() {
    assert_eq!(continued_prefix(None, None), None);
    assert_eq!(
        continued_prefix(None, Some("Once")).as_deref(),
        Some("Once")
    );
    assert_eq!(
        continued_prefix(Some("Once upon "), None).as_deref(),
        Some("Once upon ")
    );
    assert_eq!(
        continued_prefix(Some("Once upon "), Some("a time")).as_deref(),
        Some("Once upon a time"),
        "a recovery within the continuation continues both"
    );
}

#[test]
fn only_a_single_fresh_attempt_may_be_chained_onto() {
    assert!(finished_in_one_attempt(1, false));
    assert!(!finished_in_one_attempt(2, false), "a retried step");
    assert!(!finished_in_one_attempt(1, true), "a resumed step");
}
