use super::*;

#[test]
fn chats_go_round_robin_over_the_replicas() {
    assert_eq!(
        (0..5).map(|i| replica_of(i, 2)).collect::<Vec<_>>(),
        [0, 1, 0, 1, 0]
    );
    assert_eq!(replica_of(7, 1), 0);
    assert_eq!(replica_of(7, 0), 0, "no replicas count as one");
    assert_eq!(chats_per_replica(5, 2), [3, 2]);
    assert_eq!(chats_per_replica(500, 1), [500]);
    assert_eq!(chats_per_replica(1, 3), [1, 0, 0]);
}

#[test]
fn a_pool_size_is_a_runs_line() {
    assert_eq!(runs_config(None), RUNS);
    assert!(runs_config(Some(8)).ends_with("\ndatabase_connections = 8"));
    assert!(runs_config(Some(8)).starts_with(RUNS));
}

#[test]
fn the_tail_is_told_second_by_second() {
    let began = 10_000_000;
    let parts = [
        (began + 100, began + 1_100),
        (began + 1_500_000, began + 1_900_000),
        (began + 1_600_000, began + 1_601_000),
        (began + 3_000_000, began + 3_000_500),
    ];
    assert_eq!(
        p99_by_second(parts.into_iter(), began),
        [1_000, 400_000, 0, 500],
        "a second without parts shows 0"
    );
}

#[test]
fn peaks_are_kept_per_daemon() {
    assert_eq!(higher(&[5, 9], &[7, 3]), [7, 9]);
    assert_eq!(daemon_name(0, 1), "daemon");
    assert_eq!(daemon_name(1, 2), "replica 1");
}

#[test]
fn reads_every_stamp_of_a_delta() {
    let sent: Vec<u64> = stamps(" lorem@1700000000000001 ipsum@1700000000000002").collect();
    assert_eq!(sent, vec![1_700_000_000_000_001, 1_700_000_000_000_002]);
    assert_eq!(stamps("plain words").count(), 0);
}
