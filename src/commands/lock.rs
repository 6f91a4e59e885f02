//! UNIQUE.LOCK key jid [LIMIT n] [TTL ms | PXAT unix-ms] [TYPE name] [OWNER id] [META json]
//!             [RATE n PER ms [BURST b]] [GROUP name [WEIGHT w]] [GROUPLIMIT m]
//!             [MODE shared|exclusive] [WAIT ms]

use std::ops::Deref;

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use super::decisions::{Ahead, Attempt, InRedis, count_denial, decide_lock, decide_new_key};
use super::{ArgError, Freed, finish, is_keyword, parse_int, tracked};
use crate::config;
use crate::datatype::LockKey;
use crate::engine::{
    DEFAULT_TYPE, Expiry, GroupCounts, GroupName, Holder, HoldingsStamp, Lock, LockError,
    LockRequest, MAX_LIMIT, MAX_WEIGHT, Mode, RateLimit, meta_text, validate_group, validate_jid,
    validate_meta_json, validate_owner, validate_type,
};
use crate::ffi::{command_now_ms, now_ms};
use crate::metrics::{self, Event};
use crate::waiting::{self, Holdings, Served, Share, Wait};

super::command!(in_place run_in_place);

/// The options of a LOCK call, validated, before the clock is read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions<'a> {
    pub limit: Option<u32>,
    pub expiry: Option<Expiry>,
    pub lock_type: Option<&'a str>,
    pub owner: Option<&'a [u8]>,
    pub meta: Option<&'a str>,
    pub rate: Option<RateLimit>,
    pub group: Option<&'a [u8]>,
    /// WEIGHT: only with GROUP, 1 to 1000.
    pub weight: Option<u32>,
    pub group_limit: Option<u32>,
    pub mode: Option<Mode>,
    pub wait: Option<i64>,
}

impl LockOptions<'_> {
    /// What the serving rule needs of this call, would it wait.
    fn share(&self) -> Share {
        Share {
            group: self.group.map(Into::into),
            weight: self.weight.unwrap_or(1),
            group_limit: self.group_limit,
            exclusive: self.mode == Some(Mode::Exclusive),
        }
    }
}

/// Parses the options after `key jid`: any order, case-insensitive; an
/// unknown, repeated or conflicting option is a syntax error.
pub fn parse_options<A: Deref<Target = [u8]>>(
    args: &[A],
    max_meta_bytes: usize,
) -> Result<LockOptions<'_>, ArgError> {
    // The most common call, `key jid TTL ms`, without the walk below.
    if let [name, value] = args
        && is_keyword(name, b"TTL")
    {
        return Ok(LockOptions {
            expiry: Some(Expiry::Ttl(parse_int(value)?)),
            ..LockOptions::default()
        });
    }
    let mut opts = LockOptions::default();
    let (mut rate, mut per, mut burst) = (None, None, None);
    let mut rest = args.iter();
    // A number where a name belongs is most often a forgotten keyword: said
    // so, once no option matched.
    let unknown = |name: &[u8]| {
        if parse_int(name).is_ok() {
            ArgError::NumberForOption
        } else {
            ArgError::Syntax
        }
    };
    while let Some(name) = rest.next() {
        let Some(value) = rest.next() else {
            return Err(unknown(name));
        };
        let value: &[u8] = value;
        let is = |option: &str| is_keyword(name, option.as_bytes());
        if is("LIMIT") && opts.limit.is_none() {
            opts.limit = Some(in_range(value, 0, MAX_LIMIT)?);
        } else if is("TTL") && opts.expiry.is_none() {
            opts.expiry = Some(Expiry::Ttl(parse_int(value)?));
        } else if is("PXAT") && opts.expiry.is_none() {
            opts.expiry = Some(Expiry::At(parse_int(value)?));
        } else if is("TYPE") && opts.lock_type.is_none() {
            opts.lock_type = Some(validate_type(value)?);
        } else if is("OWNER") && opts.owner.is_none() {
            validate_owner(value)?;
            opts.owner = Some(value);
        } else if is("META") && opts.meta.is_none() {
            // Its JSON is checked once the holder is known (`check_meta`).
            opts.meta = Some(meta_text(value, max_meta_bytes)?);
        } else if is("RATE") && rate.is_none() {
            rate = Some(parse_int(value)?);
        } else if is("PER") && per.is_none() {
            per = Some(parse_int(value)?);
        } else if is("BURST") && burst.is_none() {
            burst = Some(parse_int(value)?);
        } else if is("GROUP") && opts.group.is_none() {
            validate_group(value)?;
            opts.group = Some(value);
        } else if is("WEIGHT") && opts.weight.is_none() {
            opts.weight = Some(in_range(value, 1, MAX_WEIGHT)?);
        } else if is("GROUPLIMIT") && opts.group_limit.is_none() {
            opts.group_limit = Some(in_range(value, 1, MAX_LIMIT)?);
        } else if is("MODE") && opts.mode.is_none() {
            opts.mode = Some(Mode::parse(value).ok_or(LockError::InvalidMode)?);
        } else if is("WAIT") && opts.wait.is_none() {
            let ms = parse_int(value)?;
            if ms <= 0 {
                return Err(ArgError::InvalidWait);
            }
            opts.wait = Some(ms);
        } else {
            return Err(unknown(name));
        }
    }
    opts.rate = match (rate, per) {
        (None, None) if burst.is_none() => None,
        (Some(n), Some(per)) => {
            Some(RateLimit::new(n, per, burst.unwrap_or(0)).ok_or(LockError::InvalidRate)?)
        }
        _ => return Err(ArgError::RateWithoutPer),
    };
    if opts.group.is_none() && (opts.weight.is_some() || opts.group_limit.is_some()) {
        return Err(ArgError::NeedsGroup);
    }
    Ok(opts)
}

/// An integer from `low` to `high`; out of range is not an integer, as
/// Redis says of its own options.
#[inline]
fn in_range(value: &[u8], low: i64, high: i64) -> Result<u32, ArgError> {
    let n = parse_int(value)?;
    u32::try_from(n)
        .ok()
        .filter(|_| (low..=high).contains(&n))
        .ok_or(ArgError::NotAnInteger)
}

/// LOCK on its arguments read in place (`key_name` is `args[1]`).
pub fn run_in_place<A: Deref<Target = [u8]>>(
    ctx: &Context,
    key_name: &RedisString,
    args: &[A],
) -> RedisResult {
    let [_, _, jid, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    validate_jid(jid)?;
    let opts = parse_options(options, config::max_meta_bytes())?;
    let now = command_now_ms();
    // Inside MULTI/EXEC or a script a client cannot block: WAIT is ignored.
    let wait = opts
        .wait
        .filter(|_| !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING))
        .map(|ms| wait_within_lease(ms, opts.expiry, now));
    let (attempt, freed) = attempt(ctx, key_name, jid, &opts, Queue::Behind, now)?;
    // The waiters a pruned lease made room for come first, then this call.
    freed.serve_waiters(ctx, key_name);
    match attempt {
        Attempt::Granted(token) => Ok(RedisValue::Integer(token)),
        Attempt::Refused(e) => Err(e.into()),
        Attempt::Denied {
            lease_end,
            rate_limited,
            holds,
            ..
        } => {
            let lock_type = opts.lock_type.unwrap_or(DEFAULT_TYPE);
            // A holder refused an upgrade does not wait (see Attempt).
            match wait.filter(|_| !holds) {
                Some(ms)
                    if waiting::block(
                        ctx,
                        Wait::One {
                            key: key_name,
                            call: Box::new(WaitingLock::new(key_name, jid, &opts)),
                            share: opts.share(),
                            lease_end,
                        },
                        ms,
                        lock_type,
                    ) =>
                {
                    Ok(RedisValue::NoReply)
                }
                _ => {
                    count_denial(&mut InRedis, now, lock_type, rate_limited);
                    Ok(RedisValue::Null)
                }
            }
        }
    }
}

/// How long a call that asked to wait `ms` may wait: no longer than the
/// lease it asks for lasts (with PXAT; a TTL starts at the grant), since a
/// grant after that end would be over already. A PXAT not after `now` is
/// refused before any wait.
pub fn wait_within_lease(ms: i64, expiry: Option<Expiry>, now: i64) -> i64 {
    match expiry {
        Some(Expiry::At(at)) => ms.min(at.saturating_sub(now)).max(1),
        _ => ms,
    }
}

/// A call's options owned, as they were parsed: what a waiter keeps (a
/// setting changed while it waits, say `unique.max-meta-bytes`, does not
/// change what it asked for).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OwnedOptions {
    limit: Option<u32>,
    expiry: Option<Expiry>,
    lock_type: Option<Box<str>>,
    owner: Option<Box<[u8]>>,
    meta: Option<Box<str>>,
    rate: Option<RateLimit>,
    pub group: Option<GroupName>,
    weight: Option<u32>,
    group_limit: Option<u32>,
    mode: Option<Mode>,
}

impl OwnedOptions {
    pub fn new(opts: &LockOptions<'_>) -> Self {
        Self {
            limit: opts.limit,
            expiry: opts.expiry,
            lock_type: opts.lock_type.map(Into::into),
            owner: opts.owner.map(Into::into),
            meta: opts.meta.map(Into::into),
            rate: opts.rate,
            group: opts.group.map(Into::into),
            weight: opts.weight,
            group_limit: opts.group_limit,
            mode: opts.mode,
        }
    }

    /// Its options as parsed, without WAIT (a served waiter does not wait
    /// again).
    pub fn options(&self) -> LockOptions<'_> {
        LockOptions {
            limit: self.limit,
            expiry: self.expiry,
            lock_type: self.lock_type.as_deref(),
            owner: self.owner.as_deref(),
            meta: self.meta.as_deref(),
            rate: self.rate,
            group: self.group.as_deref(),
            weight: self.weight,
            group_limit: self.group_limit,
            mode: self.mode,
            wait: None,
        }
    }
}

/// What one key is asked for at `now`, from a call's options: the request
/// LOCK makes, and LOCKALL on each of its keys.
#[inline]
pub fn request<'a>(
    jid: &'a [u8],
    opts: &LockOptions<'a>,
    now: i64,
) -> Result<LockRequest<'a>, LockError> {
    Ok(LockRequest {
        jid,
        limit: opts.limit.unwrap_or(1),
        expires_at: opts.expiry.map(|e| e.resolve(now)).transpose()?,
        lock_type: opts.lock_type,
        owner: opts.owner,
        meta: opts.meta,
        rate: opts.rate,
        group: opts.group,
        group_limit: opts.group_limit,
        mode: opts.mode,
    })
}

/// A LOCK waiting for a slot: its key, jid and options, owned.
struct WaitingLock {
    key: Box<[u8]>,
    jid: Box<[u8]>,
    opts: OwnedOptions,
}

impl WaitingLock {
    fn new(key: &[u8], jid: &[u8], opts: &LockOptions<'_>) -> Self {
        Self {
            key: key.into(),
            jid: jid.into(),
            opts: OwnedOptions::new(opts),
        }
    }
}

impl waiting::Call for WaitingLock {
    fn granted(&self, token: i64) -> crate::ffi::WaiterReply {
        crate::ffi::WaiterReply::Held(Box::new(crate::ffi::Held {
            stands: super::grant_stands,
            jid: self.jid.to_vec(),
            keys: vec![(self.key.to_vec(), token)],
            many: false,
        }))
    }

    fn lapsed(&self, now: i64) -> bool {
        self.opts.expiry.is_some_and(|e| e.lapsed(now))
    }

    /// Runs the LOCK again, as the longest waiter in the queue.
    fn retry(&self, ctx: &Context) -> Served {
        let opts = self.opts.options();
        let key_name = ctx.create_string(&*self.key);
        // A retry runs inside the serving loop of its key: what its prune
        // freed goes to the waiters after it in the same pass, not to a new
        // loop.
        let now = now_ms();
        if waiting::Call::lapsed(self, now) {
            return Served::Lapsed;
        }
        match attempt(ctx, &key_name, &self.jid, &opts, Queue::Served, now) {
            Ok((Attempt::Granted(token), _)) => {
                let lock_type = opts.lock_type.unwrap_or(DEFAULT_TYPE);
                metrics::record(now, Some(lock_type), Event::Waited);
                Served::Granted(token)
            }
            Ok((
                Attempt::Denied {
                    lease_end, full, ..
                },
                _,
            )) => Served::Denied { lease_end, full },
            Ok((Attempt::Refused(e), _)) => Served::Failed(e.to_string()),
            Err(e) => Served::Failed(e.to_string()),
        }
    }

    /// Its jid, LIMIT and RATE, unless its lease is a TTL so long that a
    /// later `now` could overflow its end: that one is retried every time.
    /// (A PXAT that passes ends the wait, at the latest: `Served::Lapsed`.)
    fn admission(&self) -> Option<waiting::Admission<'_>> {
        if let Some(Expiry::Ttl(ms)) = self.opts.expiry
            && ms >= 1 << 62
        {
            return None;
        }
        Some(waiting::Admission {
            jid: &self.jid,
            limit: self.opts.limit.unwrap_or(1),
            rate: self.opts.rate.map(|r| [r.n, r.per, r.burst]),
        })
    }

    /// The live holders of each group on its key (read only: a holder whose
    /// lease ended is not counted, removed or not), the key opened once, and
    /// the earliest end of a live lease.
    fn holdings(&self, ctx: &Context, each: Holdings<'_>) {
        let key_name = ctx.create_string(&*self.key);
        let key = LockKey::open(ctx, &key_name, false);
        let Some(Ok(Some(lock))) = key.as_ref().map(LockKey::lock) else {
            return each(&waiting::NoHolders);
        };
        each(&lock.group_counts(now_ms()));
    }
}

impl waiting::KeyHoldings for GroupCounts<'_> {
    fn held(&self, group: Option<&GroupName>) -> usize {
        self.of_group(group)
    }

    fn next_lease_end(&self) -> Option<i64> {
        GroupCounts::next_lease_end(self)
    }

    fn stamp(&self) -> Option<HoldingsStamp> {
        GroupCounts::stamp(self)
    }

    fn freed_since(&self, since: HoldingsStamp, each: &mut dyn FnMut(u64)) -> bool {
        GroupCounts::freed_since(self, since, each)
    }

    fn holding_hashes(&self, each: &mut dyn FnMut(u64)) -> bool {
        GroupCounts::holding_hashes(self, each)
    }
}

/// Where a call stands relative to the clients waiting on the same key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queue {
    /// A new call: while others wait, it may renew but not take a free slot.
    Behind,
    /// A waiter being served, in arrival order.
    Served,
}

/// One LOCK: open the key, let [`decide_lock`] prune, grant, renew or deny
/// and count, store a new key with its first holder, then [`finish`] what
/// changed (key expiry, replication, events). Returns whether the key's
/// waiters are to be served.
fn attempt(
    ctx: &Context,
    key_name: &RedisString,
    jid: &[u8],
    opts: &LockOptions<'_>,
    queue: Queue,
    now: i64,
) -> Result<(Attempt, Freed), RedisError> {
    let req = request(jid, opts, now)?;
    // The waiters are looked at only for a call the key admits.
    let waiters_first = |lock: &Lock| waiting::holds_back(ctx, key_name, &lock.group_counts(now));
    let queued = match queue {
        // Nobody waits (the common case): the key's name is not even read.
        Queue::Behind if waiting::nobody_waits() => Ahead::Nobody,
        Queue::Behind => Ahead::Depends(&waiters_first),
        Queue::Served => Ahead::Nobody,
    };

    let mut key =
        LockKey::open(ctx, key_name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
    let decision = match key.lock_mut()? {
        Some(lock) => {
            check_meta(opts.meta, lock.holder(jid))?;
            tracked(lock, |lock| {
                decide_lock(lock, &req, now, queued, &mut InRedis)
            })
        }
        None => {
            check_meta(opts.meta, None)?;
            let (decision, lock) = decide_new_key(&req, now, queued, &mut InRedis);
            // A new key is only stored with its first holder.
            if let Some(lock) = lock {
                key.create(lock)?;
            }
            decision
        }
    };
    let freed = finish(ctx, key_name, key, now, decision.expired, decision.change)?;
    Ok((decision.attempt, freed))
}

/// META is one JSON object: checked once the holder is known, so that a
/// renewal that sends the META its holder keeps (checked when it was stored)
/// is not parsed again; `parse_options` checked the rest.
fn check_meta(meta: Option<&str>, held: Option<&Holder>) -> Result<(), LockError> {
    match meta {
        Some(meta) if held.and_then(Holder::meta) != Some(meta.as_bytes()) => {
            validate_meta_json(meta)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::LockError;

    /// Parses with unique.max-meta-bytes at 100 (leaks the small argument list).
    fn parse(args: &[&'static str]) -> Result<LockOptions<'static>, ArgError> {
        let args: &'static [&'static [u8]] =
            args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>().leak();
        parse_options(args, 100)
    }

    #[test]
    fn a_wait_lasts_no_longer_than_a_pxat_lease() {
        assert_eq!(
            wait_within_lease(5_000, Some(Expiry::At(1_300)), 1_000),
            300
        );
        assert_eq!(wait_within_lease(200, Some(Expiry::At(1_300)), 1_000), 200);
        // A TTL starts at the grant: the WAIT as given.
        assert_eq!(
            wait_within_lease(5_000, Some(Expiry::Ttl(300)), 1_000),
            5_000
        );
        assert_eq!(wait_within_lease(5_000, None, 1_000), 5_000);
        // Never less than a positive wait (a PXAT not ahead is refused first).
        assert_eq!(wait_within_lease(5_000, Some(Expiry::At(900)), 1_000), 1);
        // And a retry then finds it lapsed, at its PXAT and after.
        assert!(Expiry::At(1_300).lapsed(1_300) && Expiry::At(1_300).lapsed(1_301));
        assert!(!Expiry::At(1_300).lapsed(1_299));
        assert!(!Expiry::Ttl(300).lapsed(i64::MAX));
    }

    #[test]
    fn options_in_any_order_and_case() {
        let opts = parse(&[
            "ttl",
            "5",
            "Type",
            "until_executed",
            "LIMIT",
            "0",
            "owner",
            "w1",
        ]);
        assert_eq!(
            opts,
            Ok(LockOptions {
                limit: Some(0),
                expiry: Some(Expiry::Ttl(5)),
                lock_type: Some("until_executed"),
                owner: Some(&b"w1"[..]),
                ..LockOptions::default()
            })
        );
        assert_eq!(
            parse(&["PXAT", "99", "META", "{}"]).map(|o| o.expiry),
            Ok(Some(Expiry::At(99)))
        );
        assert_eq!(parse(&[]), Ok(LockOptions::default()));
        // The common shape, parsed apart, parses as any other.
        assert_eq!(
            parse(&["tTl", "5"]),
            Ok(LockOptions {
                expiry: Some(Expiry::Ttl(5)),
                ..LockOptions::default()
            })
        );
        assert_eq!(parse(&["TTL", "x"]), Err(ArgError::NotAnInteger));
    }

    #[test]
    fn unknown_repeated_conflicting_or_incomplete_options_are_syntax_errors() {
        for args in [
            &["NOPE", "1"][..],
            &["LIMIT", "1", "LIMIT", "2"],
            &["TTL", "1", "PXAT", "2"],
            &["TTL", "1", "ttl", "1"],
            &["LIMIT"],
            &["TTL", "5", "OWNER"],
        ] {
            assert_eq!(parse(args), Err(ArgError::Syntax), "{args:?}");
        }
    }

    #[test]
    fn integers_and_ranges() {
        assert_eq!(
            parse(&["LIMIT", "2147483647"]).map(|o| o.limit),
            Ok(Some(i32::MAX as u32))
        );
        for args in [
            &["LIMIT", "2147483648"][..],
            &["LIMIT", "-1"],
            &["LIMIT", "one"],
            &["TTL", "1.5"],
            &["PXAT", "soon"],
            &["WAIT", "x"],
        ] {
            assert_eq!(parse(args), Err(ArgError::NotAnInteger), "{args:?}");
        }
        for args in [&["WAIT", "0"][..], &["WAIT", "-1"]] {
            assert_eq!(parse(args), Err(ArgError::InvalidWait), "{args:?}");
        }
        // A number where an option's name belongs: a forgotten keyword.
        for args in [&["3600000"][..], &["TTL", "1", "2", "3"]] {
            assert_eq!(parse(args), Err(ArgError::NumberForOption), "{args:?}");
        }
        // RATE: n and PER together, BURST optional; each in range.
        assert_eq!(
            parse(&["RATE", "50", "PER", "1000"]).map(|o| o.rate),
            Ok(RateLimit::new(50, 1000, 0))
        );
        assert_eq!(
            parse(&["burst", "5", "per", "60000", "rate", "100"]).map(|o| o.rate),
            Ok(RateLimit::new(100, 60000, 5))
        );
        for args in [
            &["RATE", "5"][..],
            &["PER", "10"],
            &["BURST", "1"],
            &["RATE", "1", "BURST", "1"],
        ] {
            assert_eq!(parse(args), Err(ArgError::RateWithoutPer), "{args:?}");
        }
        for args in [
            &["RATE", "0", "PER", "10"][..],
            &["RATE", "1", "PER", "0"],
            &["RATE", "1", "PER", "1", "BURST", "-1"],
        ] {
            assert_eq!(parse(args), Err(LockError::InvalidRate.into()), "{args:?}");
        }
        assert_eq!(
            parse(&["RATE", "1", "PER", "1", "RATE", "2"]),
            Err(ArgError::Syntax)
        );
        // A non-positive TTL parses; it is refused when resolved against the clock.
        assert_eq!(
            parse(&["TTL", "0"]).map(|o| o.expiry),
            Ok(Some(Expiry::Ttl(0)))
        );
    }

    #[test]
    fn meta_json_is_checked_unless_the_holder_keeps_the_same_bytes() {
        let held = Holder::new(b"j", 1, 0, None, DEFAULT_TYPE, None, Some(b"{\"a\":1}"));
        // Accepted by the cheap checks of parse_options, not by the JSON one.
        let bad = "{not json";
        assert_eq!(parse(&["META", bad]).map(|o| o.meta), Ok(Some(bad)));
        assert_eq!(check_meta(Some(bad), None), Err(LockError::MetaNotObject));
        assert_eq!(
            check_meta(Some(bad), Some(&held)),
            Err(LockError::MetaNotObject)
        );
        // The holder's own META: not parsed again.
        assert_eq!(check_meta(Some("{\"a\":1}"), Some(&held)), Ok(()));
        assert_eq!(check_meta(Some("{\"a\":2}"), Some(&held)), Ok(()));
        assert_eq!(check_meta(None, None), Ok(()));
    }

    #[test]
    fn values_are_validated() {
        assert_eq!(
            parse(&["TYPE", "no spaces"]),
            Err(LockError::InvalidType.into())
        );
        assert_eq!(parse(&["OWNER", ""]), Err(LockError::InvalidOwner.into()));
        assert_eq!(parse(&["META", "[]"]), Err(LockError::MetaNotObject.into()));
        let big = format!("{{\"k\":\"{}\"}}", "x".repeat(100)).leak();
        assert_eq!(
            parse(&["META", big]),
            Err(LockError::MetaTooLarge { max: 100 }.into())
        );
    }
}

/// The argument parser fed hostile input: an error or valid options, never a
/// panic. `FUZZ_CASES` sets the number of cases (`make fuzz` runs more).
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn arg() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::sample::select(vec![
                "LIMIT",
                "ttl",
                "PXAT",
                "type",
                "OWNER",
                "meta",
                "WAIT",
                "RATE",
                "per",
                "BURST",
                "-1",
                "0",
                "1",
                "1000000",
                "1000001",
                "1099511627776",
                "2147483648",
                "9223372036854775807",
                "-9223372036854775808",
                "99999999999999999999",
                "{}",
                "[]",
                "{\"a\":1}",
                "until_executed",
                "",
                "x y",
            ])
            .prop_map(|s| s.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..20),
        ]
    }

    fn cases() -> u32 {
        std::env::var("FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn arbitrary_arguments(args in prop::collection::vec(arg(), 0..10)) {
            if let Ok(opts) = parse_options(&args, 64) {
                prop_assert!(opts.limit.is_none_or(|l| i64::from(l) <= MAX_LIMIT));
                prop_assert!(opts.lock_type.is_none_or(|t| validate_type(t.as_bytes()).is_ok()));
                prop_assert!(opts.owner.is_none_or(|o| validate_owner(o).is_ok()));
                prop_assert!(opts.meta.is_none_or(|m| m.len() <= 64 && crate::engine::meta_text(m.as_bytes(), 64).is_ok()));
                prop_assert!(opts.wait.is_none_or(|w| w > 0));
                prop_assert!(opts.rate.is_none_or(|r| RateLimit::new(r.n, r.per, r.burst) == Some(r)));
                prop_assert!(args.len() % 2 == 0, "every option takes a value");
            }
        }
    }
}
