#![allow(clippy::unwrap_used)]
use super::*;
use crate::ChatStatus;
use crate::types::ChatId;

fn notice(event_seq: i64, owner: &str) -> ChangeNotice {
    ChangeNotice {
        chat_id: ChatId::new_v4(),
        version: 3,
        status: ChatStatus::Running,
        history_version: 1,
        event_seq,
        deleted: false,
        owner: owner.to_owned(),
        listing: false,
        unowned: false,
        unnumbered_change: true,
    }
}

#[test]
fn a_lone_notice_travels_as_its_object() {
    let one = notice(7, "alice");
    let payloads = notice_payloads(std::slice::from_ref(&one)).unwrap();
    assert_eq!(payloads, vec![notice_payload(&one).unwrap()]);
    assert_eq!(parse_notices(&payloads[0]), vec![one]);
}

#[test]
fn many_notices_share_payloads_below_the_servers_limit_in_their_order() {
    let notices: Vec<ChangeNotice> = (0..1000).map(|i| notice(i, "alice")).collect();
    let payloads = notice_payloads(&notices).unwrap();
    assert!(
        payloads.len() > 1 && payloads.len() < 100,
        "{}",
        payloads.len()
    );
    assert!(payloads.iter().all(|p| p.len() < NOTICE_PAYLOAD_BYTES));
    let read: Vec<ChangeNotice> = payloads.iter().flat_map(|p| parse_notices(p)).collect();
    assert_eq!(read, notices);
}

#[test]
fn a_notice_too_large_to_share_goes_alone() {
    let big = notice(2, &"o".repeat(NOTICE_PAYLOAD_BYTES));
    let notices = vec![notice(1, "a"), big.clone(), notice(3, "b")];
    let payloads = notice_payloads(&notices).unwrap();
    assert_eq!(payloads.len(), 3);
    assert_eq!(parse_notices(&payloads[1]), vec![big]);
    let read: Vec<ChangeNotice> = payloads.iter().flat_map(|p| parse_notices(p)).collect();
    assert_eq!(read, notices);
}

#[test]
fn a_notice_of_an_older_replica_is_taken_as_an_unnumbered_change() {
    let mut written = serde_json::to_value(notice(4, "alice")).unwrap();
    written.as_object_mut().unwrap().remove("unnumbered_change");
    let read = parse_notices(&written.to_string());
    assert_eq!(read.len(), 1);
    assert!(read[0].unnumbered_change, "{read:?}");
    let quiet = ChangeNotice {
        unnumbered_change: false,
        ..notice(5, "alice")
    };
    assert_eq!(parse_notices(&notice_payload(&quiet).unwrap()), vec![quiet]);
}

#[test]
fn a_payload_of_something_else_carries_no_notice() {
    assert!(parse_notices("").is_empty());
    assert!(parse_notices("{\"chat_id\": 5}").is_empty());
    assert!(parse_notices("[1, 2]").is_empty());
    assert!(parse_notices("[]").is_empty());
}
