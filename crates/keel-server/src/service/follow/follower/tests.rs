use super::*;

#[test]
fn an_owed_event_past_a_takeover_jump_is_preceded_by_a_reset() {
    let jump = RECOVERY_SEQ_GAP;
    assert!(crosses_a_takeover(8, Some((jump + 9, "message"))));
    assert!(crosses_a_takeover(8, Some((jump + 7, "part"))));
    // The takeover's own reset is still owed: it says so itself.
    assert!(!crosses_a_takeover(8, Some((jump + 7, "stream_reset"))));
    // Numbers that follow on, a client with nothing, nothing owed.
    assert!(!crosses_a_takeover(8, Some((9, "part"))));
    assert!(!crosses_a_takeover(8, Some((5_000, "message"))));
    assert!(!crosses_a_takeover(0, Some((jump + 9, "message"))));
    assert!(!crosses_a_takeover(8, None));
}

#[test]
fn a_frame_that_skips_a_number_waits_for_a_read_of_the_store() {
    // The next number, of the branch the follower read: sent at once.
    assert!(!must_read_first(41, 3, 40, 3));
    // A number in between went to something no frame carried (a queue head started by
    // the run, a branch's renumbered messages): read first.
    assert!(must_read_first(45, 3, 40, 3));
    // A run on a branch the follower has not read.
    assert!(must_read_first(41, 4, 40, 3));
    // A repeat is skipped without a read.
    assert!(!must_read_first(40, 3, 40, 3));
}
#[test]
fn logged_parts_that_skip_a_number_wait_for_a_whole_read() {
    assert!(follows_position(41, 40));
    // Already sent: skipped, no reason to read.
    assert!(follows_position(38, 40));
    // The first part of the next step, past the messages that committed this one.
    assert!(!follows_position(44, 40));
    assert!(follows_position(i64::MAX, i64::MAX));
}

/// The size of the future an async function of five arguments returns, without calling it.
fn future_size<A, B, C, D, E, F: Future>(_: impl FnOnce(A, B, C, D, E) -> F) -> usize {
    std::mem::size_of::<F>()
}

#[test]
fn an_idle_follower_holds_only_what_waiting_needs() {
    // Every open stream holds one of these for as long as it is open; the reads of the
    // store, which need far more, are boxed while they run.
    let size = future_size(feed);
    assert!(size <= 1536, "a follower's future is {size} bytes");
}
