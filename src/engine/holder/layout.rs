//! The in-place forms against the plain ones they stand for.

use proptest::prelude::*;

use super::super::{Lock, Rate};
use super::*;

#[test]
fn a_lock_of_one_holder_is_one_40_byte_allocation() {
    assert_eq!(std::mem::size_of::<Text>(), 24);
    assert_eq!(std::mem::size_of::<Holder>(), 40);
    assert_eq!(std::mem::size_of::<Lock>(), 40);
    // Granted at 2 (unix ms), so a token of that millisecond.
    let h = Holder::new(b"jid-000000000001", 2_000, 2, Some(3), "lock", None, None);
    assert!(matches!(h.text, Text::Inline { .. }));
    let long = Holder::new(&[b'j'; 17], 2_000, 2, None, "lock", None, None);
    assert!(matches!(long.text, Text::Heap { .. }));
    // The ids job systems send, packed, fit too.
    for id in [
        &b"2c34d9a1b2c3d4e5f6a7b8c9"[..],
        b"0f4d6e2a9b8c47d1a3e5f60718293a4b",
        b"8f14e45f-ceea-467a-9575-1f5e0e0c1b2d",
    ] {
        let h = Holder::new(id, 2_001, 2, Some(3), "lock", None, None);
        assert!(matches!(h.text, Text::Inline { .. }), "{id:?}");
        assert_eq!(&*h.jid(), id);
    }
}

#[test]
fn holders_are_indexed_past_grow_at_and_a_vector_again_below_shrink_at() {
    let mut holders = Holders::default();
    let jid = |n: usize| n.to_be_bytes();
    for n in 0..=GROW_AT {
        holders.push(Holder::new(
            &jid(n),
            n as i64 + 1,
            0,
            Some(5),
            "lock",
            None,
            None,
        ));
        assert_eq!(matches!(holders, Holders::Indexed(_)), n == GROW_AT, "{n}");
    }
    for n in 0..=GROW_AT - SHRINK_AT + 1 {
        assert!(matches!(holders, Holders::Indexed(_)), "{n}");
        assert!(holders.remove(&jid(n)).is_some());
    }
    assert!(matches!(holders, Holders::Many(_)));
    assert_eq!(holders.len(), SHRINK_AT - 1);
    let tokens: Vec<i64> = holders.ordered().map(|h| h.token).collect();
    let expected: Vec<i64> = (GROW_AT - SHRINK_AT + 3..=GROW_AT + 1)
        .map(|t| t as i64)
        .collect();
    assert_eq!(tokens, expected, "grant order kept both ways");
    // With a rate beside them, the same.
    holders.set_rate(Some(Rate::new(super::super::RateLimit {
        n: 1,
        per: 1,
        burst: 0,
    })));
    for n in 100..100 + GROW_AT {
        holders.push(Holder::new(&jid(n), n as i64, 0, None, "lock", None, None));
    }
    assert!(matches!(&holders, Holders::Rated(r) if matches!(r.holders, Holders::Indexed(_))));
    assert_eq!(holders.prune(10, |_| {}), SHRINK_AT - 1);
    assert_eq!(holders.len(), GROW_AT);
}

#[test]
fn a_holder_keeps_its_acquired_at_only_when_its_token_does_not_tell_it() {
    let now = 1_700_000_000_123;
    let uuid = b"8f14e45f-ceea-467a-9575-1f5e0e0c1b2d";
    // Tokens of the clock's millisecond (the first grant in it, or a later
    // one): nothing kept, the 16 packed bytes of a UUID still in place.
    for token in [now * TOKENS_PER_MS, now * TOKENS_PER_MS + 999] {
        let h = Holder::new(uuid, token, now, Some(now + 5), "lock", None, None);
        assert_eq!(h.text.parts().type_code & OWN_ACQUIRED, 0);
        assert!(matches!(h.text, Text::Inline { .. }));
        assert_eq!(h.text_bytes(), 16);
        assert_eq!((h.token(), h.acquired_at()), (token, now));
    }
    // Tokens that ran ahead of the clock, or behind it (forged, or written
    // before tokens followed the clock), and the edges of i64: kept, 8
    // bytes more, and every other part reads as before.
    for (token, acquired_at) in [
        (now * TOKENS_PER_MS + 1000, now),
        (7, now),
        (-1, 0),
        (i64::MAX, i64::MIN),
        (i64::MIN, i64::MAX),
    ] {
        let h = Holder::new_fair(
            uuid,
            token,
            acquired_at,
            None,
            "custom-type",
            Some(b"w1"),
            Some(b"{}"),
            Some(b"tenant"),
            Some(Mode::Shared),
        );
        assert_ne!(h.text.parts().type_code & OWN_ACQUIRED, 0);
        assert_eq!((h.token(), h.acquired_at()), (token, acquired_at));
        assert_eq!(
            (&*h.jid(), h.lock_type(), h.owner(), h.meta(), h.group()),
            (
                &uuid[..],
                "custom-type",
                Some(&b"w1"[..]),
                Some(&b"{}"[..]),
                Some(&b"tenant"[..])
            )
        );
        assert_eq!(h.mode(), Some(Mode::Shared));
        // It survives a rebuild of the text.
        let mut renewed = h.clone();
        renewed.renew(&LockRequest {
            meta: Some("{\"b\":2}"),
            ..LockRequest::new(uuid)
        });
        renewed.set_mode(Mode::Exclusive);
        assert_eq!(renewed.acquired_at(), acquired_at);
        assert_eq!(renewed.meta(), Some(&b"{\"b\":2}"[..]));
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

#[derive(Debug, Clone)]
enum Op {
    Push(u8, Option<i64>),
    Remove(u8),
    RemoveWhere(u8),
    Prune(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // More pushes than removals: the sequences cross GROW_AT.
        4 => (0u8..80, prop::option::of(0i64..40)).prop_map(|(j, l)| Op::Push(j, l)),
        1 => (0u8..80).prop_map(Op::Remove),
        1 => any::<u8>().prop_map(Op::RemoveWhere),
        1 => (0i64..40).prop_map(Op::Prune),
    ]
}

proptest! {
    #[test]
    fn text_gives_back_its_parts(a in bytes(40), b in bytes(40), c in bytes(8), d in bytes(80)) {
        let parts = Parts { jid_len: 1, owner_len: 2, type_code: 3, custom_type_len: 4 };
        let text = Text::new(parts, [&a, &b, &c, &d, &[], &[]]);
        prop_assert_eq!(text.parts(), parts);
        let all = [a.as_slice(), &b, &c, &d].concat();
        prop_assert_eq!(text.as_bytes(), all.as_slice());
        prop_assert_eq!(matches!(text, Text::Inline { .. }), a.len() + b.len() + c.len() + d.len() <= INLINE_TEXT);
        prop_assert_eq!(text.clone(), text);
    }

    /// Every layout, and the conversions between them both ways, hold
    /// what a plain vector in grant order holds.
    #[test]
    fn holders_behave_as_a_vector(ops in prop::collection::vec(op(), 0..200)) {
        let mut holders = Holders::default();
        let mut model: Vec<Holder> = Vec::new();
        let mut token = 0;
        for op in ops {
            match op {
                Op::Push(n, lease) => {
                    if model.iter().all(|h| h.jid() != [n]) {
                        token += 1;
                        let h = Holder::new(&[n], token, 0, lease, "lock", None, None);
                        holders.push(h.clone());
                        model.push(h);
                    }
                }
                Op::Remove(n) => {
                    let expected = model.iter().position(|h| h.jid() == [n]).map(|at| model.remove(at));
                    prop_assert_eq!(holders.remove(&[n]), expected);
                }
                Op::RemoveWhere(n) => {
                    let pick = |h: &Holder| h.token % 3 == i64::from(n % 3);
                    let mut seen = 0;
                    let removed = holders.remove_where(pick, |_| seen += 1);
                    let before = model.len();
                    model.retain(|h| !pick(h));
                    prop_assert_eq!((removed, seen), (before - model.len(), before - model.len()));
                }
                Op::Prune(now) => {
                    let mut seen = 0;
                    let removed = holders.prune(now, |h| { assert!(!h.is_live(now)); seen += 1 });
                    let before = model.len();
                    model.retain(|h| h.is_live(now));
                    prop_assert_eq!((removed, seen), (before - model.len(), before - model.len()));
                }
            }
            let indexed = matches!(holders, Holders::Indexed(_));
            prop_assert_eq!(holders.ordered().collect::<Vec<_>>(), model.iter().collect::<Vec<_>>());
            prop_assert_eq!(holders.len(), model.len());
            for h in &model {
                prop_assert_eq!(holders.find(&h.jid()), Some(h));
            }
            let leases = || model.iter().filter_map(Holder::expires_at);
            prop_assert_eq!(holders.earliest_lease(), leases().min());
            let latest = if model.iter().all(|h| h.expires_at().is_some()) { Some(leases().max()) } else { None };
            prop_assert_eq!(holders.latest_lease(), latest);
            // The smallest layout for what it holds, with hysteresis.
            prop_assert_eq!(matches!(holders, Holders::None), model.is_empty());
            prop_assert_eq!(matches!(holders, Holders::One(_)), model.len() == 1);
            prop_assert!(!indexed || model.len() >= SHRINK_AT);
            prop_assert!(indexed || model.len() <= GROW_AT);
            if let Holders::Indexed(i) = &holders {
                prop_assert_eq!(i.check(), Ok(()));
            }
        }
    }

    /// A decoded lock of holders out of token order keeps their order.
    #[test]
    fn holders_out_of_token_order_stay_a_vector(tokens in prop::collection::vec(1i64..1000, 33..60)) {
        let v: Vec<Holder> = tokens.iter().enumerate()
            .map(|(i, &t)| Holder::new(&(i as u32).to_be_bytes(), t, 0, None, "lock", None, None))
            .collect();
        let holders = Holders::from_vec(v.clone());
        prop_assert_eq!(holders.ordered().collect::<Vec<_>>(), v.iter().collect::<Vec<_>>());
        prop_assert_eq!(matches!(holders, Holders::Indexed(_)), super::super::indexed::in_token_order(&v));
    }
}

proptest! {
    /// A group and a mode cost a holder without them nothing, and every
    /// part reads back whatever is given, through a renewal and a change of
    /// mode.
    #[test]
    fn a_group_and_a_mode_read_back_with_every_other_part(
        jid in prop::collection::vec(any::<u8>(), 1..40),
        owner in bytes(20),
        meta in prop::sample::select(vec!["", "{}", "{\"a\":1}", "{\"long\":\"xxxxxxxxxxxxxxxxxxxxxxxx\"}"]),
        group in prop::option::of(prop::collection::vec(any::<u8>(), 1..40)),
        mode in prop::sample::select(vec![None, Some(Mode::Shared), Some(Mode::Exclusive)]),
        custom in any::<bool>(),
    ) {
        let lock_type = if custom { "my-type" } else { "until_executed" };
        let owner = Some(owner.as_slice()).filter(|o| !o.is_empty());
        let meta_given = Some(meta.as_bytes()).filter(|m| !m.is_empty());
        let plain = Holder::new(&jid, 5, 1, Some(9), lock_type, owner, meta_given);
        let h = Holder::new_fair(&jid, 5, 1, Some(9), lock_type, owner, meta_given, group.as_deref(), mode);
        prop_assert_eq!(std::mem::size_of_val(&h), 40);
        let parts = |h: &Holder| (h.jid().to_vec(), h.lock_type().to_string(), h.owner().map(<[u8]>::to_vec), h.meta().map(<[u8]>::to_vec));
        prop_assert_eq!(parts(&h), parts(&plain));
        prop_assert_eq!(h.group(), group.as_deref());
        prop_assert_eq!(h.mode(), mode);
        prop_assert_eq!(h.has_fair(), group.is_some() || mode.is_some());
        prop_assert_eq!(h.text_bytes(), plain.text_bytes() + group.as_ref().map_or(0, |g| g.len() + 2));
        prop_assert_eq!(h.clone().with_fair(group.as_deref(), mode), h.clone());
        // A renewal that changes META keeps the group and the mode.
        let mut renewed = h.clone();
        renewed.renew(&LockRequest { meta: Some("{\"b\":2}"), ..LockRequest::new(&jid) });
        prop_assert_eq!(renewed.group(), group.as_deref());
        prop_assert_eq!(renewed.mode(), mode);
        prop_assert_eq!(renewed.meta(), Some(&b"{\"b\":2}"[..]));
        prop_assert_eq!(renewed.owner(), h.owner());
        let mut changed = h.clone();
        changed.set_mode(Mode::Exclusive);
        prop_assert!(changed.is_exclusive());
        prop_assert_eq!(changed.group(), group.as_deref());
        prop_assert_eq!(parts(&changed), parts(&plain));
    }
}
