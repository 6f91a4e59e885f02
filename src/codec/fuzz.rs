//! The decoder fed hostile input: an error or a valid lock, never a panic.
//! `FUZZ_CASES` sets the number of cases (`make fuzz` runs many more).

use proptest::prelude::*;

use super::*;

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(2),
            Just(1 << 60),
            Just(u64::MAX),
            any::<u64>()
        ]
        .prop_map(Item::Unsigned),
        prop_oneof![Just(-1i64), Just(0), Just(1), Just(i64::MIN), any::<i64>()]
            .prop_map(Item::Signed),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Item::Buffer),
        prop::sample::select(vec![
            &b"lock"[..],
            b"until_executed",
            b"{}",
            b"",
            b"bad type"
        ])
        .prop_map(|b| Item::Buffer(b.to_vec())),
    ]
}

/// A decoded lock is whole and valid: it has holders, each valid, no jid
/// twice, and it encodes back to a lock equal to itself.
fn check(lock: &Lock) -> Result<(), TestCaseError> {
    prop_assert!(!lock.is_empty());
    for h in lock.holders() {
        prop_assert!(!h.jid().is_empty() && h.jid().len() <= crate::engine::MAX_JID_BYTES);
        prop_assert!(h.token() > 0);
        prop_assert!(h.expires_at().is_none_or(|at| at >= 0));
    }
    let mut items = Items::default();
    encode(lock, &mut items);
    let again = decode(ENCODING_VERSION, &mut ItemReader::new(&items));
    prop_assert_eq!(again.as_ref(), Ok(lock));
    Ok(())
}

fn valid_encoding() -> Vec<u8> {
    // count 1, then jid "a", token 7, acquired 1, expires -1, type, owner,
    // meta, group, mode, then the rate flag.
    let mut b = vec![2, 1, 5, 1, b'a', 2, 7, 2, 1];
    b.extend([2, 0x81]);
    b.extend(u64::MAX.to_be_bytes());
    b.extend([5, 4]);
    b.extend(b"lock");
    b.extend([5, 0, 5, 0, 5, 0, 5, 0]);
    b.extend([2, 0]); // no rate
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn arbitrary_items(items in prop::collection::vec(item(), 0..40), version in 0i32..4) {
        let items = Items(items);
        if let Ok(lock) = decode(version, &mut ItemReader::new(&items)) {
            check(&lock)?;
        }
    }

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(lock) = decode(ENCODING_VERSION, &mut RdbBytes::new(&bytes)) {
            check(&lock)?;
        }
    }

    #[test]
    fn mutated_valid_bytes(flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4), cut in any::<usize>()) {
        let mut bytes = valid_encoding();
        prop_assert!(decode(ENCODING_VERSION, &mut RdbBytes::new(&bytes)).is_ok());
        for (at, b) in flips {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        if let Ok(lock) = decode(ENCODING_VERSION, &mut RdbBytes::new(&bytes)) {
            check(&lock)?;
        }
    }
}
