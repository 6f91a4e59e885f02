//! The rules of the engine, one at a time, with plain values.

use super::*;

const NOW: i64 = 1_700_000_000_000;

/// A token source counting up from 100, like the server's.
struct Tokens(i64);
impl Tokens {
    fn next(&mut self) -> impl FnOnce() -> i64 + '_ {
        || {
            self.0 += 1;
            self.0
        }
    }
}

fn req(jid: &str) -> LockRequest<'_> {
    LockRequest::new(jid.as_bytes())
}

/// A request of a counted lock (LIMIT 0): every jid granted.
fn counted(jid: &str) -> LockRequest<'_> {
    LockRequest {
        limit: 0,
        ..req(jid)
    }
}

fn jids(lock: &Lock, now: i64) -> Vec<String> {
    lock.live_holders(now)
        .map(|h| String::from_utf8_lossy(&h.jid()).into_owned())
        .collect()
}

#[test]
fn first_grant_gets_a_token_with_defaults() {
    let mut lock = Lock::default();
    let mut t = Tokens(100);
    assert_eq!(
        lock.acquire(&req("a"), NOW, t.next()),
        Acquired::Granted(101)
    );
    let h = lock.holder(b"a").cloned();
    let h = h.as_ref();
    assert_eq!(h.map(|h| h.acquired_at()), Some(NOW));
    assert_eq!(h.map(|h| h.lock_type()), Some(DEFAULT_TYPE));
    assert_eq!(h.and_then(|h| h.expires_at()), None);
    assert_eq!(h.and_then(|h| h.owner()), None);
    assert_eq!(lock.key_expiry(), None);
}

#[test]
fn limit_one_denies_a_second_jid_and_issues_no_token() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    lock.acquire(&req("a"), NOW, t.next());
    assert_eq!(lock.acquire(&req("b"), NOW, t.next()), Acquired::Denied);
    assert_eq!(t.0, 1, "a denial must not consume a token");
    assert_eq!(jids(&lock, NOW), ["a"]);
}

#[test]
fn limit_n_admits_n_holders() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    for jid in ["a", "b", "c"] {
        let r = LockRequest {
            limit: 3,
            ..req(jid)
        };
        assert!(matches!(
            lock.acquire(&r, NOW, t.next()),
            Acquired::Granted(_)
        ));
    }
    let r = LockRequest {
        limit: 3,
        ..req("d")
    };
    assert_eq!(lock.acquire(&r, NOW, t.next()), Acquired::Denied);
    // LIMIT applies to the call that gives it: a larger limit admits more.
    let r = LockRequest {
        limit: 4,
        ..req("d")
    };
    assert_eq!(lock.acquire(&r, NOW, t.next()), Acquired::Granted(4));
    assert_eq!(jids(&lock, NOW), ["a", "b", "c", "d"]);
}

#[test]
fn limit_zero_is_a_counting_lock() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    for i in 0..1000 {
        let jid = format!("j{i}");
        let r = LockRequest {
            limit: 0,
            ..req(&jid)
        };
        assert!(matches!(
            lock.acquire(&r, NOW, t.next()),
            Acquired::Granted(_)
        ));
    }
    assert_eq!(lock.len(), 1000);
    assert!(lock.release(b"j0").is_some());
    assert_eq!(lock.len(), 999);
}

#[test]
fn renewal_keeps_token_and_acquired_at_and_ignores_limit() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    let first = LockRequest {
        expires_at: Some(NOW + 1000),
        ..req("a")
    };
    lock.acquire(&first, NOW, t.next());
    // Full at LIMIT 1, yet the holder itself renews.
    let renew = LockRequest {
        expires_at: Some(NOW + 5000),
        ..req("a")
    };
    assert_eq!(
        lock.acquire(&renew, NOW + 10, t.next()),
        Acquired::Renewed(1)
    );
    let h = lock.holder(b"a");
    assert_eq!(h.map(|h| h.acquired_at()), Some(NOW));
    assert_eq!(h.and_then(|h| h.expires_at()), Some(NOW + 5000));
    assert_eq!(t.0, 1);
}

#[test]
fn renewal_can_shorten_a_lease() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    lock.acquire(
        &LockRequest {
            expires_at: Some(NOW + 60_000),
            ..req("a")
        },
        NOW,
        t.next(),
    );
    let shorter = LockRequest {
        expires_at: Some(NOW + 10),
        ..req("a")
    };
    lock.acquire(&shorter, NOW, t.next());
    assert_eq!(lock.key_expiry(), Some(NOW + 10));
    assert!(jids(&lock, NOW + 10).is_empty());
}

#[test]
fn renewal_replaces_given_fields_and_keeps_the_rest() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    let first = LockRequest {
        expires_at: Some(NOW + 1000),
        lock_type: Some("until_executed"),
        owner: Some(b"w1"),
        meta: Some(r#"{"q":"a"}"#),
        ..req("a")
    };
    lock.acquire(&first, NOW, t.next());
    let renew = LockRequest {
        owner: Some(b"w2"),
        ..req("a")
    };
    lock.acquire(&renew, NOW, t.next());
    let h = lock.holder(b"a");
    assert_eq!(h.and_then(|h| h.expires_at()), Some(NOW + 1000));
    assert_eq!(h.map(|h| h.lock_type()), Some("until_executed"));
    assert_eq!(h.and_then(|h| h.owner()), Some(&b"w2"[..]));
    assert_eq!(h.and_then(|h| h.meta()), Some(&br#"{"q":"a"}"#[..]));
}

#[test]
fn expired_holders_are_invisible_and_pruned() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    let r = LockRequest {
        limit: 0,
        expires_at: Some(NOW + 100),
        ..req("short")
    };
    lock.acquire(&r, NOW, t.next());
    let r = LockRequest {
        limit: 0,
        ..req("forever")
    };
    lock.acquire(&r, NOW, t.next());
    assert_eq!(jids(&lock, NOW + 99), ["short", "forever"]);
    // Live strictly before expires_at: at expires_at the hold is gone.
    assert_eq!(jids(&lock, NOW + 100), ["forever"]);
    assert_eq!(lock.len(), 2, "reading never removes");
    assert_eq!(lock.prune(NOW + 100), 1);
    assert_eq!(lock.len(), 1);
    assert_eq!(lock.prune(NOW + 100), 0);
}

#[test]
fn prune_and_owner_removal_show_what_they_remove() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    let r = |jid, owner, at| LockRequest {
        limit: 0,
        owner,
        expires_at: at,
        ..req(jid)
    };
    lock.acquire(&r("a", Some(&b"w1"[..]), Some(NOW + 10)), NOW, t.next());
    lock.acquire(&r("b", Some(&b"w2"[..]), None), NOW, t.next());
    lock.acquire(&r("c", Some(&b"w1"[..]), None), NOW, t.next());
    lock.acquire(&r("d", None, Some(NOW + 10)), NOW, t.next());
    assert!(!lock.all_expired(NOW + 10));
    let mut seen = Vec::new();
    assert_eq!(
        lock.prune_each(NOW + 10, |h| seen.push(h.jid().to_vec())),
        2
    );
    assert_eq!(seen, [b"a".to_vec(), b"d".to_vec()]);
    seen.clear();
    assert_eq!(
        lock.remove_owner_each(b"w1", |h| seen.push(h.jid().to_vec())),
        1
    );
    assert_eq!(seen, [b"c".to_vec()]);
    assert_eq!(lock.remove_owner_each(b"nobody", |_| {}), 0);
    assert_eq!(jids(&lock, NOW), ["b"]);
    assert_eq!(lock.len(), 1);
}

#[test]
fn all_expired_needs_every_holder_run_out() {
    let mut lock = Lock::default();
    assert!(
        !lock.all_expired(NOW),
        "an empty lock has nothing that ran out"
    );
    let mut t = Tokens(0);
    let r = |jid, at| LockRequest {
        limit: 0,
        expires_at: Some(at),
        ..req(jid)
    };
    lock.acquire(&r("a", NOW + 5), NOW, t.next());
    lock.acquire(&r("b", NOW + 9), NOW, t.next());
    assert!(!lock.all_expired(NOW + 5));
    assert!(lock.has_expired(NOW + 5) && !lock.has_expired(NOW + 4));
    assert!(lock.all_expired(NOW + 9));
}

#[test]
fn an_expired_jid_gets_a_new_grant_not_a_renewal() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    lock.acquire(
        &LockRequest {
            expires_at: Some(NOW + 5),
            ..req("a")
        },
        NOW,
        t.next(),
    );
    lock.prune(NOW + 5);
    let again = lock.acquire(&req("a"), NOW + 5, t.next());
    assert_eq!(again, Acquired::Granted(2));
    assert_eq!(lock.holder(b"a").map(|h| h.acquired_at()), Some(NOW + 5));
}

#[test]
fn release_removes_only_the_named_holder() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    for jid in ["a", "b", "c"] {
        lock.acquire(
            &LockRequest {
                limit: 0,
                ..req(jid)
            },
            NOW,
            t.next(),
        );
    }
    assert_eq!(lock.release(b"b").map(|h| h.token()), Some(2));
    assert!(lock.release(b"b").is_none());
    assert!(lock.release(b"zzz").is_none());
    assert_eq!(jids(&lock, NOW), ["a", "c"], "grant order is kept");
    assert!(lock.release(b"a").is_some() && lock.release(b"c").is_some());
    assert!(lock.is_empty());
}

#[test]
fn a_fenced_release_frees_only_the_hold_of_that_token() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    for jid in ["a", "b"] {
        lock.acquire(
            &LockRequest {
                limit: 0,
                ..req(jid)
            },
            NOW,
            t.next(),
        );
    }
    assert!(
        lock.release_token(b"b", 1).is_none(),
        "a's token is not b's"
    );
    assert!(lock.release_token(b"b", 3).is_none(), "no such token");
    assert!(lock.release_token(b"zzz", 2).is_none());
    assert_eq!(jids(&lock, NOW), ["a", "b"], "nothing was freed");
    assert_eq!(lock.release_token(b"b", 2).map(|h| h.token()), Some(2));
    assert!(lock.release_token(b"b", 2).is_none());
    assert_eq!(jids(&lock, NOW), ["a"]);
}

#[test]
fn key_expiry_is_the_latest_lease_or_none() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    let lease = |jid, at| LockRequest {
        limit: 0,
        expires_at: Some(at),
        ..req(jid)
    };
    lock.acquire(&lease("a", NOW + 300), NOW, t.next());
    lock.acquire(&lease("b", NOW + 100), NOW, t.next());
    assert_eq!(lock.key_expiry(), Some(NOW + 300));
    lock.acquire(
        &LockRequest {
            limit: 0,
            ..req("c")
        },
        NOW,
        t.next(),
    );
    assert_eq!(
        lock.key_expiry(),
        None,
        "a holder without lease keeps the key"
    );
    lock.release(b"c");
    lock.release(b"a");
    assert_eq!(lock.key_expiry(), Some(NOW + 100));
    lock.release(b"b");
    assert_eq!(lock.key_expiry(), None);
}

#[test]
fn put_replaces_in_place_or_appends() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    for jid in ["a", "b"] {
        lock.acquire(
            &LockRequest {
                limit: 0,
                ..req(jid)
            },
            NOW,
            t.next(),
        );
    }
    let a = lock.holder(b"a").cloned().expect("a holds");
    let a = Holder::new(
        b"a",
        a.token(),
        a.acquired_at(),
        Some(NOW + 7),
        "lock",
        None,
        None,
    );
    lock.put(a.clone());
    assert_eq!(lock.holders().next(), Some(&a));
    let c = Holder::new(b"c", 99, NOW, None, "my:type", Some(b"w"), Some(b"{}"));
    lock.put(c.clone());
    assert_eq!(lock.holders().last(), Some(&c));
    assert_eq!(lock.max_token(), 99);
}

#[test]
fn ttl_is_relative_and_never_negative() {
    let h = Holder::new(b"a", 1, NOW, Some(NOW + 50), DEFAULT_TYPE, None, None);
    assert_eq!(h.ttl(NOW + 20), Some(30));
    assert_eq!(h.ttl(NOW + 80), Some(0));
    let forever = Holder::new(b"a", 1, NOW, None, DEFAULT_TYPE, None, None);
    assert_eq!(forever.ttl(NOW), None);
}

#[test]
fn expiry_resolution() {
    assert_eq!(Expiry::Ttl(1).resolve(NOW), Ok(NOW + 1));
    assert_eq!(Expiry::Ttl(0).resolve(NOW), Err(LockError::InvalidExpire));
    assert_eq!(Expiry::Ttl(-5).resolve(NOW), Err(LockError::InvalidExpire));
    assert_eq!(
        Expiry::Ttl(i64::MAX).resolve(NOW),
        Err(LockError::InvalidExpire)
    );
    assert_eq!(Expiry::Ttl(i64::MAX - NOW).resolve(NOW), Ok(i64::MAX));
    assert_eq!(Expiry::At(NOW + 1).resolve(NOW), Ok(NOW + 1));
    assert_eq!(Expiry::At(NOW).resolve(NOW), Err(LockError::InvalidExpire));
    assert_eq!(
        Expiry::At(NOW - 1).resolve(NOW),
        Err(LockError::InvalidExpire)
    );
    assert_eq!(Expiry::At(i64::MAX).resolve(NOW), Ok(i64::MAX));
}

#[test]
fn jid_and_owner_are_1_to_1024_binary_bytes() {
    assert!(validate_jid(b"").is_err());
    assert!(validate_jid(&[0u8, 255, 10]).is_ok());
    assert!(validate_jid(&[b'x'; 1024]).is_ok());
    assert_eq!(validate_jid(&[b'x'; 1025]), Err(LockError::InvalidJid));
    assert_eq!(validate_owner(b""), Err(LockError::InvalidOwner));
    assert!(validate_owner(&[b'x'; 1025]).is_err());
    assert!(validate_owner(b"host:123").is_ok());
}

#[test]
fn type_names() {
    assert_eq!(
        validate_type(b"until_and_while_executing"),
        Ok("until_and_while_executing")
    );
    assert!(validate_type(b"a:b.c-d_9").is_ok());
    assert!(validate_type(&[b'a'; 64]).is_ok());
    for bad in [
        &b""[..],
        &[b'a'; 65],
        b"with space",
        b"semi;colon",
        "é".as_bytes(),
    ] {
        assert_eq!(validate_type(bad), Err(LockError::InvalidType), "{bad:?}");
    }
}

#[test]
fn meta_must_be_a_json_object_within_the_cap() {
    assert_eq!(
        validate_meta(br#" {"a":[1,2]} "#, 100),
        Ok(r#" {"a":[1,2]} "#)
    );
    assert!(validate_meta(b"{}", 2).is_ok());
    assert_eq!(
        validate_meta(b"{}", 1),
        Err(LockError::MetaTooLarge { max: 1 })
    );
    for bad in [
        &b"[1]"[..],
        b"1",
        b"\"s\"",
        b"null",
        b"{",
        b"{} {}",
        b"{\"a\":}",
        b"\xff{}",
    ] {
        assert_eq!(
            validate_meta(bad, 100),
            Err(LockError::MetaNotObject),
            "{bad:?}"
        );
    }
    // Validation does not recurse: deep nesting can neither overflow the stack
    // nor slip an unbalanced document through.
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(validate_meta(deep.as_bytes(), 1 << 20).is_ok());
    let unbalanced = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(99_999));
    assert!(validate_meta(unbalanced.as_bytes(), 1 << 20).is_err());
}

#[test]
fn error_texts_start_with_a_code() {
    let all = [
        LockError::InvalidExpire,
        LockError::InvalidJid,
        LockError::InvalidOwner,
        LockError::InvalidType,
        LockError::MetaNotObject,
        LockError::MetaTooLarge { max: 3 },
        LockError::InvalidRate,
        LockError::InvalidGroup,
        LockError::InvalidMode,
        LockError::GroupChanged,
    ];
    // Every variant: a new one must be added here to build.
    for e in &all {
        match e {
            LockError::InvalidExpire
            | LockError::InvalidJid
            | LockError::InvalidOwner
            | LockError::InvalidType
            | LockError::MetaNotObject
            | LockError::MetaTooLarge { .. }
            | LockError::InvalidRate
            | LockError::InvalidGroup
            | LockError::InvalidMode
            | LockError::GroupChanged => {}
        }
    }
    for e in all {
        assert!(e.to_string().starts_with("ERR "), "{e}");
    }
}

#[test]
fn a_holder_is_small_and_keeps_every_part() {
    assert!(
        std::mem::size_of::<Holder>() <= 48,
        "{}",
        std::mem::size_of::<Holder>()
    );
    let meta = br#"{"q":1}"#;
    for lock_type in ["lock", "until_executed", "my:custom.type-1"] {
        let h = Holder::new(
            b"\x00jid",
            7,
            NOW,
            Some(NOW + 1),
            lock_type,
            Some(b"host:1"),
            Some(meta),
        );
        assert_eq!(&*h.jid(), b"\x00jid");
        assert_eq!(h.lock_type(), lock_type);
        assert_eq!(h.owner(), Some(&b"host:1"[..]));
        assert_eq!(h.meta(), Some(&meta[..]));
        assert_eq!(h.expires_at(), Some(NOW + 1));
    }
    let bare = Holder::new(&[b'j'; 1024], 7, NOW, None, "x", None, None);
    assert_eq!(
        (
            bare.jid().len(),
            bare.owner(),
            bare.meta(),
            bare.lock_type()
        ),
        (1024, None, None, "x")
    );
}

#[test]
fn one_holder_takes_one_slot() {
    let mut lock = Lock::default();
    let mut t = Tokens(0);
    lock.acquire(&req("a"), NOW, t.next());
    assert_eq!(lock.holders.capacity(), 1);
    for i in 0..100 {
        lock.acquire(&counted(&format!("j{i}")), NOW, t.next());
    }
    assert_eq!(lock.len(), 101);
}

#[test]
fn mem_usage_grows_with_holders_and_meta() {
    let mut lock = Lock::default();
    // Tokens of the grant's millisecond, as the server issues them: no
    // holder keeps an acquired_at of its own.
    let mut t = Tokens(NOW * TOKENS_PER_MS);
    let empty = lock.mem_usage();
    let r = LockRequest {
        meta: Some(r#"{"x":"0123456789"}"#),
        ..req("a")
    };
    lock.acquire(&r, NOW, t.next());
    // The holder is inside the lock; its jid and META (19 bytes) beside it.
    assert_eq!(lock.mem_usage(), empty + 19);
    // Two holders are a vector beside the lock.
    lock.acquire(
        &LockRequest {
            limit: 0,
            ..req("b")
        },
        NOW,
        t.next(),
    );
    assert_eq!(
        lock.mem_usage(),
        empty + 2 * std::mem::size_of::<Holder>() + 19
    );
}

#[test]
fn a_lock_of_many_holders_is_worth_freeing_in_the_background_one_of_a_few_is_not() {
    let mut lock = Lock::default();
    let mut t = Tokens(NOW * TOKENS_PER_MS);
    assert_eq!(
        lock.free_effort(),
        1,
        "never 0: Redis would take it as large"
    );
    for i in 0..100 {
        lock.acquire(&counted(&format!("j{i}")), NOW, t.next());
        let effort = lock.free_effort();
        // Redis frees a value on its lazy-free thread above 64.
        if i < 32 {
            assert_eq!(effort, 1, "compact at {} holders", i + 1);
        } else {
            assert_eq!(effort, i + 1, "indexed at {} holders", i + 1);
        }
    }
}

/// 60 holders (the indexed layout) in the groups b, d and f, 20 each (holder
/// `i` in the `i % 3`th), holder `i`'s lease ending at `lease(i)`.
fn sixty_in_groups_b_d_f(lease: impl Fn(usize) -> Option<i64>) -> Lock {
    let mut lock = Lock::default();
    let mut t = Tokens(NOW * TOKENS_PER_MS);
    for i in 0..60 {
        let jid = format!("j{i}");
        let group = [b'b' + 2 * (i % 3) as u8];
        lock.acquire(
            &LockRequest {
                limit: 0,
                group: Some(&group),
                expires_at: lease(i),
                ..req(&jid)
            },
            NOW,
            t.next(),
        );
    }
    assert_eq!(lock.len(), 60);
    lock
}

#[test]
fn memory_usage_of_many_holders_counts_a_group_while_it_holds_and_texts_while_kept() {
    let meta = r#"{"worker":"SyncUserJob","queue":"default"}"#;
    let kept_as_walked = |lock: &Lock| match &lock.holders {
        // What the index keeps against a walk over its holders and groups.
        Holders::Indexed(i) => assert_eq!(i.check(), Ok(())),
        _ => panic!("60 holders are indexed"),
    };
    let mut lock = sixty_in_groups_b_d_f(|_| None);
    kept_as_walked(&lock);
    // Group b's 20 holders go, and its entry with the last.
    for i in (0..60).step_by(3) {
        assert!(lock.release(format!("j{i}").as_bytes()).is_some());
        kept_as_walked(&lock);
    }
    // A renewal that gives a holder a META counts its text.
    let mut t = Tokens(NOW * TOKENS_PER_MS + 1_000);
    let renew = |lock: &mut Lock, meta: Option<&str>, t: &mut Tokens| {
        let group = [b'd'];
        lock.acquire(
            &LockRequest {
                limit: 0,
                group: Some(&group),
                meta,
                ..req("j1")
            },
            NOW,
            t.next(),
        );
    };
    let before = lock.mem_usage();
    renew(&mut lock, Some(meta), &mut t);
    kept_as_walked(&lock);
    // The holder's text (its jid, META and group) now apart from its slot.
    let text = lock
        .holders()
        .find(|h| h.is(b"j1"))
        .map_or(0, Holder::heap_bytes);
    assert!(text > meta.len(), "{text}");
    assert_eq!(lock.mem_usage(), before + text);
    // Renewed without one, it keeps its META; released, its text goes.
    renew(&mut lock, None, &mut t);
    assert_eq!(lock.mem_usage(), before + text);
    assert!(lock.release(b"j1").is_some());
    kept_as_walked(&lock);
}

#[test]
fn group_counts_answer_in_order_of_name_or_out_of_it() {
    // No lease: the counts the index keeps answer.
    let lock = sixty_in_groups_b_d_f(|_| None);
    let names: Vec<&[u8]> = vec![b"a", b"b", b"c", b"d", b"dd", b"f", b"g"];
    let expected = |g: &[u8]| {
        if matches!(g, b"b" | b"d" | b"f") {
            20
        } else {
            0
        }
    };
    let counts = lock.group_counts(NOW);
    // In order (a serving pass), backwards, the same again, and each twice.
    for &g in names.iter().chain(names.iter().rev()).chain(&names) {
        assert_eq!(counts.of(Some(g)), expected(g), "{g:?}");
        assert_eq!(counts.of(Some(g)), expected(g), "{g:?} again");
    }
    assert_eq!(counts.of(None), 0);
}

#[test]
fn group_counts_leave_out_the_holders_whose_lease_ended() {
    // In b and d, 5 and 1 leases end at NOW + 10, not pruned yet.
    let lock = sixty_in_groups_b_d_f(|i| {
        let short = (i % 3 == 0 && i < 15) || i == 1;
        Some(if short { NOW + 10 } else { NOW + 60_000 })
    });
    for (now, live, next) in [
        (NOW + 9, [20, 20, 20], NOW + 10),
        (NOW + 10, [15, 19, 20], NOW + 60_000),
    ] {
        let counts = lock.group_counts(now);
        assert_eq!(counts.next_lease_end(), Some(next));
        for (g, n) in [&b"b"[..], b"d", b"f"].into_iter().zip(live) {
            assert_eq!(counts.of(Some(g)), n, "{g:?} at {now}");
            assert_eq!(
                counts.of_group(Some(&GroupName::new(g))),
                n,
                "{g:?} at {now}"
            );
        }
        assert_eq!(counts.of(Some(b"c")), 0);
        assert_eq!(counts.of(None), 0);
    }
    // Nothing was pruned by counting.
    assert_eq!(lock.len(), 60);
}

#[test]
fn the_holdings_stamp_changes_when_a_group_holds_fewer() {
    let mut lock = Lock::default();
    let mut t = Tokens(NOW * TOKENS_PER_MS);
    let mut grant = |lock: &mut Lock, jid: &str, group: Option<&[u8]>, ttl: i64| {
        lock.acquire(
            &LockRequest {
                limit: 0,
                group,
                expires_at: Some(NOW + ttl),
                ..req(jid)
            },
            NOW,
            t.next(),
        );
    };
    grant(&mut lock, "j0", Some(b"a"), 60_000);
    assert_eq!(lock.holdings_stamp(), None, "a few holders: none");
    for i in 1..60 {
        let group = (i % 2 == 0).then_some(&b"a"[..]);
        grant(&mut lock, &format!("j{i}"), group, 60_000 + i);
    }
    let stamp = lock.holdings_stamp();
    assert!(stamp.is_some(), "indexed");
    // A grant and a renewal add or keep: the same stamp.
    grant(&mut lock, "j60", Some(b"b"), 10);
    grant(&mut lock, "j1", None, 70_000);
    assert_eq!(lock.holdings_stamp(), stamp);
    // A copy goes its own way: a stamp of its own.
    let copy = lock.clone();
    assert!(copy.holdings_stamp().is_some_and(|s| Some(s) != stamp));
    // A release (of a holder without a group too) and a prune: a new one
    // each time.
    let mut seen = vec![stamp, copy.holdings_stamp()];
    lock.release(b"j1");
    assert!(!seen.contains(&lock.holdings_stamp()));
    seen.push(lock.holdings_stamp());
    assert_eq!(lock.prune(NOW + 10), 1);
    assert!(!seen.contains(&lock.holdings_stamp()));
    // Nothing removed: the same.
    let pruned = lock.holdings_stamp();
    assert_eq!(lock.release(b"nobody"), None);
    assert_eq!(lock.prune(NOW + 10), 0);
    assert_eq!(lock.holdings_stamp(), pruned);
}

#[test]
fn a_key_names_the_groups_whose_count_went_down_since_a_stamp() {
    // In b, 5 leases end at NOW + 10; d and f hold 20 each until later.
    let mut lock = sixty_in_groups_b_d_f(|i| {
        let short = i % 3 == 0 && i < 15;
        Some(if short { NOW + 10 } else { NOW + 60_000 })
    });
    let freed = |lock: &Lock, now: i64, since: HoldingsStamp| {
        let mut named = Vec::new();
        let told = lock
            .group_counts(now)
            .freed_since(since, |hash| named.push(hash));
        named.sort_unstable();
        named.dedup();
        told.then_some(named)
    };
    let hashes = |groups: &[&[u8]]| {
        let mut named: Vec<u64> = groups.iter().map(|g| holding_hash(Some(g))).collect();
        named.sort_unstable();
        named
    };
    let start = lock.holdings_stamp().expect("indexed");
    assert_eq!(freed(&lock, NOW, start), Some(vec![]));
    // A release in d; a grant in f adds: only d is named.
    lock.release(b"j1");
    let mut t = Tokens(NOW * TOKENS_PER_MS + 100);
    lock.acquire(
        &LockRequest {
            limit: 0,
            group: Some(b"f"),
            ..req("new")
        },
        NOW,
        t.next(),
    );
    assert_eq!(freed(&lock, NOW, start), Some(hashes(&[b"d"])));
    // b's leases end: named before they are removed, and after.
    assert_eq!(freed(&lock, NOW + 10, start), Some(hashes(&[b"b", b"d"])));
    assert_eq!(lock.prune(NOW + 10), 5);
    assert_eq!(freed(&lock, NOW + 10, start), Some(hashes(&[b"b", b"d"])));
    // From a later stamp, only what went down after it.
    let later = lock.holdings_stamp().expect("indexed");
    assert_ne!(later, start);
    lock.release(b"j2");
    assert_eq!(freed(&lock, NOW + 10, later), Some(hashes(&[b"f"])));
    // More decreases than the key remembers: it cannot say; a later stamp
    // still can.
    let left_in_b_and_d = (0..60).filter(|i| i % 3 != 2 && *i != 1 && !(i % 3 == 0 && *i < 15));
    for i in left_in_b_and_d.take(27) {
        assert!(lock.release(format!("j{i}").as_bytes()).is_some());
    }
    assert_eq!(freed(&lock, NOW + 10, start), None);
    let recent = lock.holdings_stamp().expect("indexed");
    lock.release(b"j5");
    assert_eq!(freed(&lock, NOW + 10, recent), Some(hashes(&[b"f"])));
    // A copy, or another key, cannot say what went down since this stamp.
    let copy = lock.clone();
    assert_eq!(
        freed(&copy, NOW + 10, lock.holdings_stamp().expect("indexed")),
        None
    );
    // A compact key keeps no stamp and cannot say either.
    let mut small = Lock::default();
    small.acquire(&req("one"), NOW, t.next());
    assert_eq!(small.holdings_stamp(), None);
    assert_eq!(freed(&small, NOW, recent), None);
}
