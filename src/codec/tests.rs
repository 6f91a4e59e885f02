//! The encoding, the holder's fields and APPLY's operations, round trip and refusals.

use super::*;
use crate::engine::{LockRequest, validate_meta};

fn sample() -> Lock {
    let mut lock = Lock::default();
    let mut token = 10;
    let mut next = || {
        token += 1;
        token
    };
    let a = LockRequest {
        limit: 0,
        ..LockRequest::new(b"plain")
    };
    lock.acquire(&a, 1000, &mut next);
    let meta = validate_meta(br#"{"queue":"default"}"#, 100).ok();
    let b = LockRequest {
        limit: 0,
        expires_at: Some(9000),
        lock_type: Some("until_executed"),
        owner: Some(b"host:42"),
        meta,
        ..LockRequest::new(b"\x00binary\xff")
    };
    lock.acquire(&b, 1001, &mut next);
    lock
}

fn encoded(lock: &Lock) -> Items {
    let mut items = Items::default();
    encode(lock, &mut items);
    items
}

/// Items per holder in the current encoding, and before group and mode.
const HOLDER_ITEMS: usize = 9;
const HOLDER_ITEMS_V2: usize = 7;

/// `lock` as encoding version 2 wrote it (no group or mode): what a server
/// of the versions before them saved.
fn encoded_v2(lock: &Lock) -> Items {
    let items = encoded(lock);
    let holders = lock.len();
    let mut out = Items::default();
    for (i, item) in items.0.into_iter().enumerate() {
        let in_holder = i >= 1 && i < 1 + holders * HOLDER_ITEMS;
        if in_holder && (i - 1) % HOLDER_ITEMS >= HOLDER_ITEMS_V2 {
            continue;
        }
        out.0.push(item);
    }
    out
}

#[test]
fn a_version_2_payload_reads_as_holders_without_group_or_mode() {
    let lock = sample();
    let items = encoded_v2(&lock);
    assert_eq!(items.0.len(), 1 + 2 * HOLDER_ITEMS_V2 + 1);
    assert_eq!(decode(2, &mut ItemReader::new(&items)), Ok(lock));
}

#[test]
fn group_and_mode_round_trip_and_are_checked() {
    let mut lock = sample();
    let mut token = 100;
    let req = LockRequest {
        limit: 0,
        group: Some(b"tenant-\x00a"),
        group_limit: Some(3),
        mode: Some(crate::engine::Mode::Shared),
        ..LockRequest::new(b"grouped")
    };
    lock.acquire(&req, 1002, || {
        token += 1;
        token
    });
    let items = encoded(&lock);
    let back = decode(ENCODING_VERSION, &mut ItemReader::new(&items));
    assert_eq!(back, Ok(lock.clone()));
    let h = back.ok().and_then(|l| l.holder(b"grouped").cloned());
    assert_eq!(
        h.as_ref().and_then(|h| h.group()),
        Some(&b"tenant-\x00a"[..])
    );
    assert_eq!(h.and_then(|h| h.mode()), Some(crate::engine::Mode::Shared));
    // The third holder's group and mode, forged.
    let at = 1 + 2 * HOLDER_ITEMS + 7;
    for (offset, item, field) in [
        (0, Item::Buffer(vec![b'g'; 1025]), "group"),
        (1, Item::Buffer(b"both".to_vec()), "mode"),
    ] {
        let mut bad = items.clone();
        bad.0[at + offset] = item;
        assert_eq!(
            decode(ENCODING_VERSION, &mut ItemReader::new(&bad)),
            Err(DecodeError::Corrupt(field))
        );
    }
}

#[test]
fn a_rate_is_encoded_after_the_holders_and_may_stand_alone() {
    let limit = RateLimit::new(50, 1000, 5).expect("a limit");
    let mut lock = sample();
    lock.set_rate(Some(Rate { limit, tat: 12_345 }));
    let items = encoded(&lock);
    assert_eq!(
        decode(ENCODING_VERSION, &mut ItemReader::new(&items)),
        Ok(lock.clone())
    );
    // Only the rate left: a lock still (it remembers what was spent).
    let mut alone = Lock::default();
    alone.set_rate(lock.rate().copied());
    assert_eq!(decode(2, &mut ItemReader::new(&encoded(&alone))), Ok(alone));
    // Version 1 had no rate and no empty lock.
    let mut v1 = Items::default();
    v1.0.push(Item::Unsigned(0));
    assert_eq!(
        decode(1, &mut ItemReader::new(&v1)),
        Err(DecodeError::Corrupt("a lock without holders"))
    );
    let mut bad = Items::default();
    bad.0.extend([Item::Unsigned(0), Item::Unsigned(7)]);
    assert_eq!(
        decode(2, &mut ItemReader::new(&bad)),
        Err(DecodeError::Corrupt("rate flag"))
    );
    let mut zero_rate = Items::default();
    zero_rate.0.push(Item::Unsigned(0));
    zero_rate.0.push(Item::Unsigned(1));
    for v in [0, 1000, 0, 5] {
        zero_rate.0.push(Item::Signed(v));
    }
    assert_eq!(
        decode(2, &mut ItemReader::new(&zero_rate)),
        Err(DecodeError::Corrupt("rate"))
    );
}

#[test]
fn a_version_1_payload_reads_as_a_lock_without_rate() {
    let lock = sample();
    let mut items = encoded_v2(&lock);
    assert_eq!(
        items.0.pop(),
        Some(Item::Unsigned(0)),
        "the rate flag is last"
    );
    assert_eq!(decode(1, &mut ItemReader::new(&items)), Ok(lock));
}

#[test]
fn encode_then_decode_is_the_identity() {
    let lock = sample();
    let items = encoded(&lock);
    assert_eq!(
        decode(ENCODING_VERSION, &mut ItemReader::new(&items)),
        Ok(lock)
    );
}

#[test]
fn a_newer_encoding_is_refused() {
    let items = encoded(&sample());
    assert_eq!(
        decode(ENCODING_VERSION + 1, &mut ItemReader::new(&items)),
        Err(DecodeError::NewerEncoding(ENCODING_VERSION + 1))
    );
    assert!(decode(0, &mut ItemReader::new(&items)).is_err());
}

#[test]
fn every_truncation_is_an_error() {
    let items = encoded(&sample());
    for len in 0..items.0.len() {
        let cut = Items(items.0[..len].to_vec());
        assert!(
            decode(ENCODING_VERSION, &mut ItemReader::new(&cut)).is_err(),
            "cut at {len}"
        );
    }
}

#[test]
fn a_forged_huge_count_fails_without_allocating_for_it() {
    let mut items = encoded(&sample());
    items.0[0] = Item::Unsigned(1 << 60);
    assert_eq!(
        decode(ENCODING_VERSION, &mut ItemReader::new(&items)),
        Err(DecodeError::Io)
    );
    items.0[0] = Item::Unsigned(0);
    assert!(matches!(
        decode(1, &mut ItemReader::new(&items)),
        Err(DecodeError::Corrupt(_))
    ));
}

#[test]
fn invalid_fields_are_corrupt() {
    let good = encoded(&sample());
    // Positions in the first holder: 1 jid, 2 token, 4 expires_at, 5 type, 6 owner.
    let forgeries = [
        (1, Item::Buffer(vec![])),
        (1, Item::Buffer(vec![b'x'; 1025])),
        (2, Item::Signed(0)),
        (4, Item::Signed(-7)),
        (5, Item::Buffer(b"bad type".to_vec())),
        (6, Item::Buffer(vec![b'o'; 1025])),
        (7, Item::Buffer(vec![0xff, 0xfe])),
    ];
    for (at, item) in forgeries {
        let mut items = good.clone();
        items.0[at] = item.clone();
        assert!(
            matches!(
                decode(ENCODING_VERSION, &mut ItemReader::new(&items)),
                Err(DecodeError::Corrupt(_))
            ),
            "{at}: {item:?}"
        );
    }
}

#[test]
fn a_bad_field_is_named() {
    let good = encoded(&sample());
    for (at, item, field) in [
        (1, Item::Buffer(vec![]), "jid"),
        (2, Item::Signed(-1), "token"),
        (4, Item::Signed(-2), "expires_at"),
        (5, Item::Buffer(b"a b".to_vec()), "type"),
        (7, Item::Buffer(vec![0xff]), "meta"),
    ] {
        let mut items = good.clone();
        items.0[at] = item;
        assert_eq!(
            decode(ENCODING_VERSION, &mut ItemReader::new(&items)),
            Err(DecodeError::Corrupt(field))
        );
    }
}

#[test]
fn duplicate_jids_are_corrupt() {
    let mut items = encoded(&sample());
    items.0[1 + HOLDER_ITEMS] = items.0[1].clone();
    assert_eq!(
        decode(ENCODING_VERSION, &mut ItemReader::new(&items)),
        Err(DecodeError::Corrupt("the same jid twice"))
    );
}
