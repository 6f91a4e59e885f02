//! UNIQUE.LOCKALL numkeys key [key ...] jid [LIMIT n [n ...]] [RATE i n PER ms [BURST b]]...
//!                [GROUP i name [WEIGHT w]]... [GROUPLIMIT i m]... [MODE i shared|exclusive]...
//!                [TTL ms | PXAT unix-ms] [TYPE name] [OWNER id] [META json] [WAIT ms]
//!
//! A hold on every key for one jid, or on none: each key decided as a LOCK
//! with its own LIMIT, RATE, GROUP, GROUPLIMIT and MODE (`decisions::all`),
//! one effect replicated for the whole grant, and with WAIT one waiter
//! queued on every key (`waiting::block` with `Wait::All`, the rule in
//! `waiting/multi.rs`; WEIGHT is validated as LOCK's and plays no part
//! there, since a multi-key waiter is served by its reservation).

use std::ops::Deref;

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use super::decisions::all::{AllAttempt, KeyGrant, Refusal, decide_all};
use super::decisions::{Ahead, InRedis, count_denial};
use super::lock::{LockOptions, OwnedOptions, parse_options, request, wait_within_lease};
use super::{ArgError, Change, Changed, Freed, finish, finish_all, is_keyword, parse_int};
use crate::config;
use crate::datatype::LockKey;
use crate::engine::{
    DEFAULT_TYPE, Holder, Lock, LockRequest, Rate, validate_jid, validate_meta_json,
};
use crate::ffi::{self, command_now_ms, now_ms};
use crate::metrics::{self, Event};
use crate::waiting::{self, ServedAll, Wait};

super::command!(with_args run);

/// The most keys one call may name.
pub const MAX_KEYS: usize = 64;

fn numkeys_error() -> RedisError {
    RedisError::String(format!(
        "ERR numkeys must be 1 to {MAX_KEYS}, followed by that many keys and the jid"
    ))
}

/// The keys of a LOCKALL or UNLOCKALL: `numkeys key...` at the start of
/// `args`, each key once. Returns them and the arguments after them.
pub fn parse_keys<A: Deref<Target = [u8]>>(args: &[A]) -> Result<(&[A], &[A]), RedisError> {
    let [numkeys, rest @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let n = parse_int(numkeys)?;
    let n = usize::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_KEYS).contains(n) && *n < rest.len())
        .ok_or_else(numkeys_error)?;
    let (keys, after) = rest.split_at(n);
    for (i, key) in keys.iter().enumerate() {
        if keys.iter().skip(i + 1).any(|other| **other == **key) {
            return Err(RedisError::Str(
                "ERR a key is named twice: each key is given once",
            ));
        }
    }
    Ok((keys, after))
}

/// A LOCKALL call, parsed and owned: a waiter keeps it as it was asked.
#[derive(Debug, PartialEq, Eq)]
pub struct LockAll {
    keys: Vec<Vec<u8>>,
    jid: Vec<u8>,
    /// Per key, in key order, LOCK's options for it: its own LIMIT, RATE,
    /// GROUP, WEIGHT, GROUPLIMIT and MODE, and the call's TTL or PXAT, TYPE,
    /// OWNER and META.
    opts: Vec<OwnedOptions>,
    wait: Option<i64>,
}

impl LockAll {
    /// The options every key shares (TTL or PXAT, TYPE, OWNER, META).
    fn shared(&self) -> LockOptions<'_> {
        self.opts
            .first()
            .map(OwnedOptions::options)
            .unwrap_or_default()
    }
}

const LIMIT_SHAPE: &str =
    "ERR syntax error: LIMIT takes one value per key, in key order (LIMIT n [n ...])";
const RATE_SHAPE: &str = "ERR syntax error: RATE takes the key's position, then n PER ms [BURST b] (RATE i n PER ms [BURST b])";

/// Parses everything after the command name: LOCKALL's options are turned
/// into LOCK's options for each key (a per-key option to the key at its
/// position, the others to every key), and each key's are parsed and
/// validated by LOCK's own parser, [`parse_options`].
pub fn parse<A: Deref<Target = [u8]>>(
    args: &[A],
    max_meta_bytes: usize,
) -> Result<LockAll, RedisError> {
    let (keys, rest) = parse_keys(args)?;
    let [jid, options @ ..] = rest else {
        return Err(numkeys_error());
    };
    validate_jid(jid)?;
    let n = keys.len();
    let mut per_key: Vec<Vec<&[u8]>> = vec![Vec::new(); n];
    let mut every_key: Vec<&[u8]> = Vec::new();
    let mut limits = false;
    let mut at = 0;
    while let Some(name) = options.get(at) {
        let name: &[u8] = name;
        let after = options.get(at + 1..).unwrap_or_default();
        let is = |option: &str| is_keyword(name, option.as_bytes());
        let used = if is("LIMIT") {
            if limits {
                return Err(ArgError::Syntax.into());
            }
            let values = after
                .get(..n)
                .filter(|v| v.iter().all(|v| parse_int(v).is_ok()))
                .ok_or(RedisError::Str(LIMIT_SHAPE))?;
            for (key, value) in per_key.iter_mut().zip(values) {
                key.extend([name, value]);
            }
            limits = true;
            n
        } else if is("GROUP") || is("GROUPLIMIT") || is("MODE") || is("RATE") {
            let (i, used) = per_key_shape(name, after, n)?;
            let values = after.get(1..used).unwrap_or_default();
            if let Some(key) = per_key.get_mut(i) {
                key.push(name);
                key.extend(values.iter().map(|v| -> &[u8] { v }));
            }
            used
        } else if is("WEIGHT") {
            // WEIGHT belongs to a GROUP i name before it.
            return Err(ArgError::NeedsGroup.into());
        } else {
            every_key.push(name);
            if let Some(value) = after.first() {
                every_key.push(value);
            }
            1
        };
        at += 1 + used;
    }
    let mut opts = Vec::with_capacity(n);
    let mut wait = None;
    for mut key in per_key {
        key.extend_from_slice(&every_key);
        let parsed =
            parse_options(&key, max_meta_bytes).map_err(|e| e.in_command("unique.lockall"))?;
        // LOCK checks META's JSON once it knows the holder; here, at once.
        if let (Some(meta), []) = (parsed.meta, &opts[..]) {
            validate_meta_json(meta)?;
        }
        wait = parsed.wait;
        opts.push(OwnedOptions::new(&parsed));
    }
    Ok(LockAll {
        keys: keys.iter().map(|k| k.to_vec()).collect(),
        jid: jid.to_vec(),
        opts,
        wait,
    })
}

/// The shape of a per-key option after its name (`option`): `i n PER ms
/// [BURST b]` after RATE, `i name [WEIGHT w]` after GROUP, `i value` after
/// GROUPLIMIT and MODE. Returns the key's index (from 0) and how many
/// arguments it took; the values are LOCK's to check.
fn per_key_shape<A: Deref<Target = [u8]>>(
    option: &[u8],
    args: &[A],
    numkeys: usize,
) -> Result<(usize, usize), RedisError> {
    let word = |at: usize, w: &str| args.get(at).is_some_and(|a| is_keyword(a, w.as_bytes()));
    let name = String::from_utf8_lossy(option).to_ascii_uppercase();
    let used = if name == "RATE" {
        if !(args.len() >= 4 && word(2, "PER")) {
            return Err(RedisError::Str(RATE_SHAPE));
        }
        if word(4, "BURST") { 6 } else { 4 }
    } else {
        if args.len() < 2 {
            return Err(RedisError::String(format!(
                "ERR syntax error: {name} takes the key's position, then its value ({name} i value)"
            )));
        }
        if name == "GROUP" && word(2, "WEIGHT") {
            4
        } else {
            2
        }
    };
    if args.len() < used {
        return Err(ArgError::Syntax.into());
    }
    let i = usize::try_from(parse_int(args.first().ok_or(ArgError::Syntax)?)?)
        .ok()
        .filter(|i| (1..=numkeys).contains(i))
        .ok_or_else(|| {
            RedisError::String(format!(
                "ERR {name} i: i is the key's position, 1 to numkeys"
            ))
        })?;
    Ok((i - 1, used))
}

/// Answers Redis when it asks where the keys are (`getkeys-api`): Redis
/// 7.0's cluster routing reads a module command's keys this way, not from
/// its key specs. True when that was the question.
pub fn told_key_positions<A: Deref<Target = [u8]>>(ctx: &Context, args: &[A]) -> bool {
    if !ctx.is_keys_position_request() {
        return false;
    }
    if let Ok((keys, _)) = parse_keys(args.get(1..).unwrap_or_default()) {
        for pos in 2..2 + keys.len() {
            ctx.key_at_pos(i32::try_from(pos).unwrap_or(0));
        }
    }
    true
}

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    if told_key_positions(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let call = parse(args.get(1..).unwrap_or_default(), config::max_meta_bytes())?;
    let now = command_now_ms();
    // Inside MULTI/EXEC or a script a client cannot block: WAIT is ignored.
    let wait = call
        .wait
        .filter(|_| !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING))
        .map(|ms| wait_within_lease(ms, call.shared().expiry, now));
    let (attempt, freed) = attempt(ctx, &call, false, now)?;
    // The waiters pruned leases made room for come first, then this call.
    for (key, freed) in call.keys.iter().zip(freed) {
        freed.serve_waiters(ctx, key);
    }
    let lock_type = call.shared().lock_type.unwrap_or(DEFAULT_TYPE).to_owned();
    match attempt {
        AllAttempt::Granted(grants) => Ok(RedisValue::Array(
            grants
                .iter()
                .map(|g| RedisValue::Integer(g.token))
                .collect(),
        )),
        AllAttempt::Denied(Refusal { error: Some(e), .. }) => Err(ArgError::from(e).into()),
        AllAttempt::Denied(refusal) => {
            let keys: Vec<Vec<u8>> = call.keys.clone();
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let wake = refusal.lease_end.map(|at| (refusal.key, at));
            match wait {
                // A partial renewal or a refused upgrade is refused whatever
                // the room: it does not wait.
                Some(ms)
                    if refusal.may_wait()
                        && waiting::block(
                            ctx,
                            Wait::All {
                                keys: &keys,
                                groups: call.opts.iter().map(|o| o.group.clone()).collect(),
                                call: Box::new(Waiting(call)),
                                wake,
                            },
                            ms,
                            &lock_type,
                        ) =>
                {
                    Ok(RedisValue::NoReply)
                }
                _ => {
                    count_denial(&mut InRedis, now, &lock_type, refusal.rate_limited);
                    Ok(RedisValue::Null)
                }
            }
        }
    }
}

/// A LOCKALL waiting until every key can grant at once.
struct Waiting(LockAll);

impl waiting::AllCall for Waiting {
    fn granted(&self, tokens: Vec<i64>) -> crate::ffi::WaiterReply {
        crate::ffi::WaiterReply::Held(Box::new(crate::ffi::Held {
            stands: super::grant_stands,
            jid: self.0.jid.clone(),
            keys: self.0.keys.iter().cloned().zip(tokens).collect(),
            many: true,
        }))
    }

    fn lapsed(&self, now: i64) -> bool {
        self.0.shared().expiry.is_some_and(|e| e.lapsed(now))
    }

    fn retry(&self, ctx: &Context) -> ServedAll {
        // A retry runs inside the serving loop: what its prune freed goes to
        // the waiters after it, not to a new loop.
        let now = now_ms();
        if self.lapsed(now) {
            return ServedAll::Lapsed;
        }
        match attempt(ctx, &self.0, true, now) {
            Ok((AllAttempt::Granted(grants), _)) => {
                let lock_type = self.0.shared().lock_type.unwrap_or(DEFAULT_TYPE);
                // Counted per new holder, as `acquired` is.
                for _ in grants.iter().filter(|g| g.new) {
                    metrics::record(now, Some(lock_type), Event::Waited);
                }
                ServedAll::Granted(grants.iter().map(|g| g.token).collect())
            }
            Ok((AllAttempt::Denied(Refusal { error: Some(e), .. }), _)) => {
                ServedAll::Failed(e.to_string())
            }
            Ok((AllAttempt::Denied(refusal), _)) => ServedAll::Denied {
                wake: refusal.lease_end.map(|at| (refusal.key, at)),
            },
            Err(e) => ServedAll::Failed(e.to_string()),
        }
    }
}

/// One LOCKALL: open every key (a key of another type refuses the call
/// before anything changes), let [`decide_all`] prune, grant, renew or
/// refuse and count, store the new keys a grant made, then carry out what
/// changed: a grant as one effect ([`finish_all`]), a refusal as a denied
/// LOCK on each key ([`finish`]). `served`: a waiter being served (it does
/// not queue behind the others). Returns, per key, whether its waiters are
/// to be served.
fn attempt(
    ctx: &Context,
    call: &LockAll,
    served: bool,
    now: i64,
) -> Result<(AllAttempt, Vec<Freed>), RedisError> {
    let reqs = call
        .opts
        .iter()
        .map(|opts| request(&call.jid, &opts.options(), now))
        .collect::<Result<Vec<LockRequest<'_>>, _>>()
        .map_err(|e| ArgError::from(e).in_command("unique.lockall"))?;
    // The one place a multi-key call decides otherwise than LOCK: one key
    // is held back as LOCK is (`waiting::holds_back`: a waiting group at its
    // GROUPLIMIT holds nobody back); a call on more keys takes none of a key
    // anyone waits on, so that it never jumps a waiter on a key it takes
    // while that waiter's reservation is unserved (docs/commands.md,
    // LOCKALL).
    let one_key = |lock: &Lock| {
        let counts = lock.group_counts(now);
        call.keys
            .first()
            .is_some_and(|k| waiting::holds_back(ctx, k, &counts))
    };
    let queued: Vec<Ahead<'_>> = call
        .keys
        .iter()
        .map(|k| match call.keys.len() {
            _ if served => Ahead::Nobody,
            1 => Ahead::Depends(&one_key),
            _ => Ahead::from(waiting::waiting_on(ctx, k) > 0),
        })
        .collect();
    let names: Vec<RedisString> = call
        .keys
        .iter()
        .map(|k| ctx.create_string(k.as_slice()))
        .collect();
    let mut opened = Vec::with_capacity(names.len());
    for name in &names {
        let key =
            LockKey::open(ctx, name, true).ok_or(RedisError::Str("ERR could not open the key"))?;
        key.lock()?; // WRONGTYPE before anything changes
        opened.push(key);
    }
    let mut fresh: Vec<Option<Lock>> = opened
        .iter()
        .map(|k| matches!(k.lock(), Ok(None)).then(Lock::default))
        .collect();
    let is_fresh: Vec<bool> = fresh.iter().map(Option::is_some).collect();
    let decision = {
        let mut locks: Vec<&mut Lock> = Vec::with_capacity(opened.len());
        for (key, fresh) in opened.iter_mut().zip(fresh.iter_mut()) {
            match fresh {
                Some(lock) => locks.push(lock),
                None => locks.push(
                    key.lock_mut()?
                        .ok_or(RedisError::Str("ERR could not open the key"))?,
                ),
            }
        }
        let before: Vec<usize> = locks.iter().map(|l| l.len()).collect();
        let decision = decide_all(&mut locks, &reqs, now, &queued, &mut InRedis);
        for ((lock, before), &fresh) in locks.iter().zip(before).zip(&is_fresh) {
            if !fresh {
                metrics::holders_changed(before, lock.len());
            }
        }
        decision
    };
    let AllAttempt::Granted(grants) = &decision.attempt else {
        // Refused: each key as a denied LOCK, its ended leases pruned
        // (`PRUNE`, or `DEL` for a key they emptied).
        let mut freed = Vec::with_capacity(opened.len());
        for ((key, name), &expired) in opened.into_iter().zip(&names).zip(&decision.expired) {
            freed.push(finish(ctx, name, key, now, expired, Change::PruneOnly)?);
        }
        return Ok((decision.attempt, freed));
    };
    // A new key is only stored with its first holder.
    for (key, fresh) in opened.iter_mut().zip(fresh.iter_mut()) {
        if let Some(lock) = fresh.take() {
            key.create(lock)?;
        }
    }
    let freed = finish_grant(
        ctx,
        now,
        &call.jid,
        opened,
        &names,
        grants,
        &decision.expired,
    )?;
    Ok((decision.attempt, freed))
}

/// Carries out a grant on every key: one effect with every key's holder as
/// it is now ([`finish_all`]).
fn finish_grant(
    ctx: &Context,
    now: i64,
    jid: &[u8],
    opened: Vec<LockKey>,
    names: &[RedisString],
    grants: &[KeyGrant],
    expired: &[usize],
) -> Result<Vec<Freed>, RedisError> {
    let changed = opened
        .into_iter()
        .zip(names)
        .zip(grants.iter().zip(expired))
        .map(|((key, name), (grant, &expired))| Changed {
            name,
            key,
            expired,
            change: Change::Hold {
                jid,
                new: grant.new,
                spent_rate: grant.spent_rate,
                downgraded: grant.downgraded,
            },
        })
        .collect();
    finish_all(ctx, now, changed, |keys, _| {
        let mut parts: Vec<(&[u8], &Holder, Option<&Rate>)> = Vec::with_capacity(keys.len());
        for k in keys {
            let lock = k.key.lock()?;
            if let (Some(holder), Change::Hold { spent_rate, .. }) =
                (lock.and_then(|l| l.holder(jid)), k.change)
            {
                let rate = lock.and_then(Lock::rate).filter(|_| spent_rate);
                parts.push((k.name.as_slice(), holder, rate));
            }
        }
        if let Some(first) = keys.first() {
            ffi::replicate_hold_all(ctx, first.name, now, &parts);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Expiry, Mode, RateLimit};

    fn parse_str(args: &[&str]) -> Result<LockAll, String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse(&args, 100).map_err(|e| e.to_string())
    }

    #[test]
    fn keys_jid_and_per_key_options() {
        let call = parse_str(&[
            "2", "{a}:t", "{a}:g", "job", "LIMIT", "2", "10", "rate", "2", "50", "per", "1000",
            "TTL", "30000", "WAIT", "5000",
        ]);
        let call = call.expect("parses");
        assert_eq!(call.keys, vec![b"{a}:t".to_vec(), b"{a}:g".to_vec()]);
        assert_eq!(call.jid, b"job");
        let opts: Vec<LockOptions<'_>> = call.opts.iter().map(OwnedOptions::options).collect();
        assert_eq!(
            opts.iter().map(|o| o.limit).collect::<Vec<_>>(),
            [Some(2), Some(10)]
        );
        assert_eq!(
            opts.iter().map(|o| o.rate).collect::<Vec<_>>(),
            [None, RateLimit::new(50, 1000, 0)]
        );
        assert!(opts.iter().all(|o| o.expiry == Some(Expiry::Ttl(30000))));
        assert_eq!(call.wait, Some(5000));
        let plain = parse_str(&["1", "k", "j"]).expect("parses");
        assert_eq!(plain.opts, vec![OwnedOptions::default()]);
        let burst = parse_str(&[
            "2", "a", "b", "j", "RATE", "1", "5", "PER", "10", "BURST", "3",
        ])
        .expect("parses");
        let rates: Vec<_> = burst.opts.iter().map(|o| o.options().rate).collect();
        assert_eq!(rates, [RateLimit::new(5, 10, 3), None]);
    }

    #[test]
    fn bad_calls_are_clear_errors() {
        let numkeys = "ERR numkeys must be 1 to 64, followed by that many keys and the jid";
        for args in [
            &["0", "k", "j"][..],
            &["2", "a", "b"],
            &["-1", "j"],
            &["65", "j"],
        ] {
            assert_eq!(parse_str(args).err().as_deref(), Some(numkeys), "{args:?}");
        }
        assert_eq!(
            parse_str(&["x", "k", "j"]).err().as_deref(),
            Some("ERR value is not an integer or out of range")
        );
        assert!(parse_str(&["2", "a", "a", "j"]).is_err_and(|e| e.contains("named twice")));
        assert!(
            parse_str(&["2", "a", "b", "j", "LIMIT", "1"])
                .is_err_and(|e| e.contains("one value per key"))
        );
        assert!(
            parse_str(&["2", "a", "b", "j", "LIMIT", "1", "TTL", "5"])
                .is_err_and(|e| e.contains("one value per key"))
        );
        assert_eq!(
            parse_str(&["1", "a", "j", "LIMIT", "1", "LIMIT", "1"])
                .err()
                .as_deref(),
            Some("ERR syntax error")
        );
        assert!(
            parse_str(&["1", "a", "j", "RATE", "2", "1", "PER", "5"])
                .is_err_and(|e| e.contains("position"))
        );
        assert!(
            parse_str(&["1", "a", "j", "RATE", "1", "1", "5"])
                .is_err_and(|e| e.contains("RATE i n PER ms"))
        );
        assert_eq!(
            parse_str(&[
                "1", "a", "j", "RATE", "1", "1", "PER", "5", "RATE", "1", "2", "PER", "5"
            ])
            .err()
            .as_deref(),
            Some("ERR syntax error")
        );
        assert!(
            parse_str(&["1", "a", "j", "RATE", "1", "0", "PER", "5"])
                .is_err_and(|e| e.contains("RATE n PER ms"))
        );
        assert!(parse_str(&["1", "a", "j", "PER", "5"]).is_err_and(|e| e.contains("needs PER")));
        assert_eq!(
            parse_str(&["1", "a", "j", "TTL"]).err().as_deref(),
            Some("ERR syntax error")
        );
        assert!(parse_str(&["1", "a", "", "TTL", "5"]).is_err_and(|e| e.contains("jid")));
    }

    #[test]
    fn group_grouplimit_and_mode_by_key_position() {
        let call = parse_str(&[
            "2",
            "a",
            "b",
            "j",
            "group",
            "2",
            "acme",
            "WEIGHT",
            "3",
            "GROUPLIMIT",
            "2",
            "5",
            "MODE",
            "1",
            "exclusive",
            "mode",
            "2",
            "SHARED",
            "GROUP",
            "1",
            "g",
        ])
        .expect("parses");
        let shares: Vec<_> = call
            .opts
            .iter()
            .map(OwnedOptions::options)
            .map(|o| (o.group, o.weight, o.group_limit, o.mode))
            .collect();
        assert_eq!(
            shares,
            vec![
                (Some(&b"g"[..]), None, None, Some(Mode::Exclusive)),
                (Some(&b"acme"[..]), Some(3), Some(5), Some(Mode::Shared)),
            ]
        );
    }

    #[test]
    fn bad_groups_and_modes_are_lock_errors() {
        let err = |args: &[&str]| parse_str(args).err().unwrap_or_default();
        let syntax = "ERR syntax error";
        // Once per key.
        assert_eq!(
            err(&["1", "a", "j", "GROUP", "1", "g", "GROUP", "1", "h"]),
            syntax
        );
        assert_eq!(
            err(&["1", "a", "j", "MODE", "1", "shared", "MODE", "1", "shared"]),
            syntax
        );
        assert_eq!(
            err(&[
                "1",
                "a",
                "j",
                "GROUP",
                "1",
                "g",
                "GROUPLIMIT",
                "1",
                "1",
                "GROUPLIMIT",
                "1",
                "2"
            ]),
            syntax
        );
        // By position, 1 to numkeys.
        for option in ["GROUP", "GROUPLIMIT", "MODE"] {
            for i in ["0", "3", "-1"] {
                assert_eq!(
                    err(&["2", "a", "b", "j", option, i, "1"]),
                    format!("ERR {option} i: i is the key's position, 1 to numkeys")
                );
            }
            assert!(
                err(&["2", "a", "b", "j", option, "1"]).contains(&format!("({option} i value)"))
            );
        }
        // LOCK's own validation and texts.
        assert_eq!(
            err(&["1", "a", "j", "MODE", "1", "both"]),
            "ERR MODE must be shared or exclusive"
        );
        assert!(err(&["1", "a", "j", "GROUP", "1", ""]).starts_with("ERR GROUP must be 1 to"));
        let range = "ERR value is not an integer or out of range";
        assert_eq!(
            err(&["1", "a", "j", "GROUP", "1", "g", "WEIGHT", "0"]),
            range
        );
        assert_eq!(
            err(&["1", "a", "j", "GROUP", "1", "g", "WEIGHT", "1001"]),
            range
        );
        assert_eq!(
            err(&["1", "a", "j", "GROUP", "1", "g", "GROUPLIMIT", "1", "0"]),
            range
        );
        assert_eq!(err(&["1", "a", "j", "GROUP", "x", "g"]), range);
        let needs = "ERR syntax error: WEIGHT and GROUPLIMIT need GROUP name";
        assert_eq!(
            err(&[
                "2",
                "a",
                "b",
                "j",
                "GROUP",
                "1",
                "g",
                "GROUPLIMIT",
                "2",
                "1"
            ]),
            needs
        );
        assert_eq!(err(&["1", "a", "j", "WEIGHT", "2"]), needs);
        assert_eq!(err(&["1", "a", "j", "GROUP", "1", "g", "WEIGHT"]), syntax);
    }
}
