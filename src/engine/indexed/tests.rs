//! The indexed layout: its size classes, and random operations against a plain vector of the same holders.

use proptest::prelude::*;

use super::*;

fn holder(jid: u16, token: i64, lease: Option<i64>) -> Holder {
    Holder::new(&jid.to_be_bytes(), token, 0, lease, "lock", None, None)
}

#[test]
fn vectors_grow_to_the_end_of_a_size_class() {
    assert_eq!(
        [16, 128, 129, 256, 257, 48_001, 527_184].map(size_class),
        [16, 128, 160, 256, 320, 49_152, 655_360]
    );
    let mut v: Vec<Slot> = Vec::new();
    for _ in 0..10_000 {
        grow(&mut v);
        v.push(None);
        let bytes = v.capacity() * SLOT;
        assert!(size_class(bytes) - bytes < SLOT, "{} slots", v.capacity());
    }
}

const SLOT: usize = std::mem::size_of::<Slot>();

#[test]
fn a_slot_costs_a_holder() {
    assert_eq!(SLOT, 40);
}

#[test]
fn holders_out_of_token_order_are_handed_back() {
    let holders = vec![holder(1, 5, None), holder(2, 4, None)];
    assert_eq!(Indexed::from_ordered(holders.clone()).err(), Some(holders));
    let mut indexed = Indexed::from_ordered(vec![holder(1, 5, None)]).expect("ordered");
    assert_eq!(
        indexed.insert(holder(2, 5, None)),
        Err(holder(2, 5, None)),
        "a token not after the newest"
    );
    assert_eq!(indexed.insert(holder(2, 6, Some(9))), Ok(()));
    assert_eq!(indexed.page(0, 1).1.len(), 1);
}

#[test]
fn a_jid_hashed_again_takes_its_own_hash_and_no_other() {
    let indexed = Indexed::empty();
    let fresh = |jid: &[u8]| indexed.hasher.hash_one(jid);
    let long = [b'j'; HASHED_BYTES + 1];
    // Each after the one before it: the same jid, another of its length, a
    // prefix, a longer one, the longest kept and one byte past it (not
    // kept), empty, then one again.
    let jids: [&[u8]; 10] = [
        b"job-1",
        b"job-1",
        b"job-2",
        b"job-",
        b"job-12",
        &long[..HASHED_BYTES],
        &long,
        &long[..HASHED_BYTES],
        b"",
        b"job-1",
    ];
    for jid in jids {
        assert_eq!(indexed.hash(jid), fresh(jid), "{jid:?}");
    }
    assert!(Hashed::of(&long, 1).is_none(), "a longer jid is not kept");
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, Option<i64>),
    Remove(u16),
    Relet(u16, Option<i64>),
    Prune(i64),
}

fn op() -> impl Strategy<Value = Op> {
    let lease = prop::option::of(0i64..50);
    prop_oneof![
        3 => (0u16..64, lease.clone()).prop_map(|(j, l)| Op::Insert(j, l)),
        2 => (0u16..64).prop_map(Op::Remove),
        2 => (0u16..64, lease).prop_map(|(j, l)| Op::Relet(j, l)),
        1 => (0i64..50).prop_map(Op::Prune),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The index against a plain vector in grant order.
    #[test]
    fn the_index_behaves_as_a_vector(
        start in prop::collection::vec(prop::option::of(0i64..50), 0..40),
        ops in prop::collection::vec(op(), 0..300),
    ) {
        // Built from holders in grant order whose leases are in any order
        // (as renewals leave them), or from none.
        let mut model: Vec<Holder> = (0u16..).zip(start).map(|(jid, lease)| holder(jid, i64::from(jid) + 1, lease)).collect();
        let mut token = i64::try_from(model.len()).unwrap_or(0);
        let mut indexed = Indexed::from_ordered(model.clone()).expect("in grant order");
        prop_assert_eq!(indexed.check(), Ok(()));
        prop_assert!(indexed.leases.is_empty(), "every lease listed, none in the heap");
        for op in ops {
            match op {
                Op::Insert(jid, lease) => {
                    if model.iter().all(|h| h.jid() != jid.to_be_bytes()) {
                        token += 1;
                        let h = holder(jid, token, lease);
                        prop_assert_eq!(indexed.insert(h.clone()), Ok(()));
                        model.push(h);
                    }
                }
                Op::Remove(jid) => {
                    let at = model.iter().position(|h| h.jid() == jid.to_be_bytes());
                    let expected = at.map(|at| model.remove(at));
                    prop_assert_eq!(indexed.remove(&jid.to_be_bytes()), expected);
                }
                Op::Relet(jid, lease) => {
                    let relet = |h: &mut Holder| *h = Holder::new(&h.jid(), h.token(), 0, lease, "lock", None, None);
                    let expected = model.iter_mut().find(|h| h.jid() == jid.to_be_bytes()).map(|h| { relet(h); h.token() });
                    prop_assert_eq!(indexed.update(&jid.to_be_bytes(), relet), expected);
                }
                Op::Prune(now) => {
                    let mut ended = Vec::new();
                    while let Some(h) = indexed.pop_ended(now) {
                        ended.push(h);
                    }
                    prop_assert!(ended.windows(2).all(|w| w[0].expires_at() <= w[1].expires_at()), "earliest first");
                    let mut expected: Vec<Holder> = model.iter().filter(|h| !h.is_live(now)).cloned().collect();
                    model.retain(|h| h.is_live(now));
                    ended.sort_by_key(|h| h.token());
                    expected.sort_by_key(|h| h.token());
                    prop_assert_eq!(ended, expected);
                }
            }
            prop_assert_eq!(indexed.check(), Ok(()));
            prop_assert_eq!(indexed.ordered(), model.iter().collect::<Vec<_>>());
            let leases = || model.iter().filter_map(Holder::expires_at);
            prop_assert_eq!(indexed.earliest_lease(), leases().min());
            prop_assert_eq!(indexed.latest_lease(), leases().max());
            prop_assert_eq!(indexed.has_unleased(), model.iter().any(|h| h.expires_at().is_none()));
            // The ended holders, found without a walk, at a few times.
            for now in [0, 10, 25, 49] {
                let mut ended = Vec::new();
                let next = indexed.for_each_ended(now, |h| ended.push(h.token()));
                ended.sort_unstable();
                let expected: Vec<i64> = model.iter().filter(|h| !h.is_live(now)).map(|h| h.token()).collect();
                prop_assert_eq!(ended, expected, "ended at {}", now);
                let live_ends = model.iter().filter(|h| h.is_live(now)).filter_map(Holder::expires_at);
                prop_assert_eq!(next, live_ends.min(), "the next lease to end at {}", now);
            }
            // A walk in pages meets every holder once.
            let (mut cursor, mut seen) = (0, Vec::new());
            loop {
                let (next, page) = indexed.page(cursor, 7);
                seen.extend(page.into_iter().map(|h| h.token()));
                if next == 0 { break; }
                cursor = next;
            }
            seen.sort_unstable();
            prop_assert_eq!(seen, model.iter().map(|h| h.token()).collect::<Vec<_>>());
        }
        prop_assert_eq!(indexed.into_ordered(), model);
    }
}

#[test]
fn holders_without_an_owner_cost_the_owners_index_nothing() {
    let plain: Vec<Holder> = (0..1000)
        .map(|j| holder(j, i64::from(j) + 1, Some(9)))
        .collect();
    let indexed = Indexed::from_ordered(plain).expect("in grant order");
    assert_eq!(indexed.owners.mem_usage(), 0);
    let owned: Vec<Holder> = (0..1000u16)
        .map(|j| {
            Holder::new(
                &j.to_be_bytes(),
                i64::from(j) + 1,
                0,
                Some(9),
                "lock",
                Some(b"w"),
                None,
            )
        })
        .collect();
    let mut indexed = Indexed::from_ordered(owned).expect("in grant order");
    // One owner's thousand holders: a slot number and a control byte each, at the set's load.
    let bytes = indexed.owners.mem_usage();
    assert!((5_000..12_000).contains(&bytes), "{bytes}");
    let mut seen = Vec::new();
    assert_eq!(indexed.remove_owner(b"w", |h| seen.push(h.token())), 1000);
    assert_eq!(seen, (1..=1000).collect::<Vec<i64>>(), "in grant order");
    assert_eq!(indexed.len(), 0);
    assert_eq!(indexed.check(), Ok(()));
}
