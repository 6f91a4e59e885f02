//! One file per command: parse, call the engine, reply, then the side effects
//! (replication, keyspace event) in one place, only when something changed.
//! What a command decides (grant, deny, queue, counters, what follows a
//! change) is in `decisions.rs`, free of Redis; `finish` here carries a
//! change out, and `REGISTRY` lists every command beside its docs.

pub mod apply;
pub mod decisions;
pub mod lock;
pub mod lockall;
pub mod lockedby;
pub mod metrics;
pub mod rate;
pub mod reap;
pub mod reply;
pub mod unlock;
pub mod unlockall;
pub mod waiters;

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use std::borrow::Cow;
use std::ffi::{CStr, CString};

use redis_module::{Context, RedisError, RedisResult, RedisString};

use crate::datatype::LockKey;
use crate::docs::{self, CommandDoc};
use crate::engine::{Lock, LockError};
use crate::ffi;
use crate::metrics as counters;
use crate::waiting;
use decisions::Replicate;
pub use decisions::{Change, prune_expired};

/// The signature of every command handler.
pub type Handler = fn(&Context, Vec<RedisString>) -> RedisResult;

/// Runs a handler so that a panic becomes an error reply instead of taking
/// the server down.
pub fn guard(ctx: &Context, args: Vec<RedisString>, handler: Handler) -> RedisResult {
    catch_unwind(AssertUnwindSafe(|| handler(ctx, args)))
        .unwrap_or_else(|_| Err(RedisError::Str(crate::waiting::INTERNAL_ERROR)))
}

/// [`guard`] for a command that reads its arguments in place
/// (the in-place entry point, `ffi::entry_point`).
pub fn guard_in_place(
    ctx: &Context,
    key: &RedisString,
    args: &[&[u8]],
    handler: fn(&Context, &RedisString, &[&[u8]]) -> RedisResult,
) -> RedisResult {
    catch_unwind(AssertUnwindSafe(|| handler(ctx, key, args)))
        .unwrap_or_else(|_| Err(RedisError::Str(crate::waiting::INTERNAL_ERROR)))
}

/// What can be wrong with a command's arguments: their syntax, a number, or
/// a value that the engine's rules refuse. `Display` gives the exact reply
/// text, Redis's own where Redis has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    Syntax,
    /// A number where an option's name belongs: most often a TTL without
    /// its keyword (`UNIQUE.LOCK k j 3600000`).
    NumberForOption,
    NotAnInteger,
    /// WAIT 0 or a negative WAIT.
    InvalidWait,
    /// RATE without PER, or PER or BURST without RATE.
    RateWithoutPer,
    /// WEIGHT or GROUPLIMIT without GROUP.
    NeedsGroup,
    /// METRICS MINUTES outside 1 to `unique.metrics-minutes` (the value).
    Minutes(usize),
    Invalid(LockError),
}

impl From<LockError> for ArgError {
    fn from(e: LockError) -> Self {
        Self::Invalid(e)
    }
}

impl ArgError {
    /// Writes the reply text for a call of `command` (lowercase): the texts
    /// that name the command, as Redis's own do, name that one.
    fn write(&self, f: &mut impl fmt::Write, command: &str) -> fmt::Result {
        match self {
            Self::Syntax => f.write_str("ERR syntax error"),
            Self::NumberForOption => f.write_str(
                "ERR syntax error: a number where an option name belongs (TTL ms? WAIT ms? LIMIT n?)",
            ),
            Self::NotAnInteger => f.write_str("ERR value is not an integer or out of range"),
            Self::InvalidWait => write!(
                f,
                "ERR invalid wait time in '{command}' command (WAIT takes a positive number of ms)"
            ),
            Self::RateWithoutPer => f.write_str(
                "ERR syntax error: RATE n needs PER ms, and PER and BURST need RATE (RATE n PER ms [BURST b])",
            ),
            Self::NeedsGroup => {
                f.write_str("ERR syntax error: WEIGHT and GROUPLIMIT need GROUP name")
            }
            Self::Minutes(max) => write!(
                f,
                "ERR MINUTES must be 1 to {max} (unique.metrics-minutes)"
            ),
            // Redis's text for SET's bad EX/PX, naming the command.
            Self::Invalid(LockError::InvalidExpire) => {
                write!(f, "ERR invalid expire time in '{command}' command")
            }
            Self::Invalid(e) => write!(f, "{e}"),
        }
    }

    /// The reply for this error in a call of `command` (lowercase).
    pub fn in_command(&self, command: &str) -> RedisError {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = self.write(&mut text, command);
        RedisError::String(text)
    }
}

/// The reply text in UNIQUE.LOCK, where most of these errors arise.
impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, "unique.lock")
    }
}

// Not through std::error::Error: redis-module's blanket conversion would add a
// second "ERR " to texts that already carry their code.
impl From<ArgError> for RedisError {
    fn from(e: ArgError) -> Self {
        RedisError::String(e.to_string())
    }
}

impl From<LockError> for RedisError {
    fn from(e: LockError) -> Self {
        ArgError::from(e).into()
    }
}

/// Whether `arg` is `keyword` (ASCII letters only) in any case: how every
/// command matches its option names. Setting bit 5 maps the two cases of a
/// letter, and nothing else, to its lower case, so one OR a byte decides
/// what `eq_ignore_ascii_case` decides with a range check a byte (the option
/// names of a LOCK are read on every call).
#[inline(always)]
pub fn is_keyword(arg: &[u8], keyword: &[u8]) -> bool {
    debug_assert!(keyword.iter().all(u8::is_ascii_alphabetic));
    arg.len() == keyword.len() && arg.iter().zip(keyword).all(|(a, k)| a | 0x20 == k | 0x20)
}

/// An integer argument: an optional sign and decimal digits, in range (what
/// `str::parse::<i64>` accepts), read on the bytes.
pub fn parse_int(arg: &[u8]) -> Result<i64, ArgError> {
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, arg),
    };
    if digits.is_empty() {
        return Err(ArgError::NotAnInteger);
    }
    // Accumulated negative: i64::MIN has no positive counterpart.
    let mut n: i64 = 0;
    for &b in digits {
        let d = match b {
            b'0'..=b'9' => i64::from(b - b'0'),
            _ => return Err(ArgError::NotAnInteger),
        };
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_sub(d))
            .ok_or(ArgError::NotAnInteger)?;
    }
    if negative {
        Ok(n)
    } else {
        n.checked_neg().ok_or(ArgError::NotAnInteger)
    }
}

/// Brings the key in line with its lock after a change: the key goes when its
/// last holder goes, and otherwise expires with its latest lease. Returns
/// whether the key went.
fn settle(key: &mut LockKey, now: i64) -> Result<bool, RedisError> {
    let (empty, expiry) = match key.lock()? {
        Some(lock) => (lock.is_done(now), lock.key_expiry()),
        None => return Ok(false),
    };
    if empty {
        key.delete();
    } else {
        key.set_expire_at(expiry);
    }
    Ok(empty)
}

/// Whether a change may have freed a slot of its key, as [`finish`] found.
/// Serving the key's waiters is the serving loop's (`waiting::slot_freed`),
/// started by the command or timer that made the change and never from a
/// waiter's retry: a retry runs inside that loop, and the waiters after it
/// in the same pass see the slot it freed.
#[must_use = "serve the key's waiters (Freed::serve_waiters), unless this is a waiter's retry"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freed(bool);

impl Freed {
    /// Nothing freed (a replayed effect, an unchanged key).
    pub const NOTHING: Self = Self(false);

    /// Serves the waiters of `name` (selected database) if a slot may have
    /// freed; `name` is read only then (a RedisString's bytes cost a call).
    pub fn serve_waiters<N: std::ops::Deref<Target = [u8]>>(self, ctx: &Context, name: &N) {
        // Asked first, before the name is read: nobody waits on most servers.
        if self.0 && !waiting::nobody_waits() {
            waiting::slot_freed(ctx, name);
        }
    }
}

/// Carries out what follows a change of the lock in `key` (named `name`),
/// as [`Change::effects`] decides, in one fixed order, for every command,
/// timer and replayed effect:
///
/// 1. settle the key (deleted when empty, else its expiry),
/// 2. replicate the effect (`UNIQUE.APPLY ...` at `now`, `DEL` when a
///    release, a reap or a prune deleted the key, or the APPLY itself),
/// 3. close the key,
/// 4. `unique.expire` when `expired` holders ran out,
/// 5. the command's own event,
/// 6. and returns whether the key's waiters are to be served: the caller
///    serves them next ([`Freed::serve_waiters`]), so that their grants
///    follow the change that made room for them: in the replication stream,
///    in the AOF and in the events.
///
/// Nothing happens when nothing changed.
pub fn finish(
    ctx: &Context,
    name: &RedisString,
    mut key: LockKey,
    now: i64,
    expired: usize,
    change: Change<'_>,
) -> Result<Freed, RedisError> {
    let Some(effects) = change.effects(expired) else {
        return Ok(Freed::NOTHING);
    };
    let deleted = settle(&mut key, now)?;
    match effects.replicate {
        // Whatever removed the last holder, the key's deletion is the whole
        // effect: a replica's key is the primary's, so it goes there too.
        Replicate::Effect(..) if deleted => ffi::replicate_delete(ctx, name),
        Replicate::Hold { jid, rate } => {
            let lock = key.lock()?;
            if let Some(holder) = lock.and_then(|lock| lock.holder(jid)) {
                let rate = lock.and_then(Lock::rate).filter(|_| rate);
                ffi::replicate_hold(ctx, name, now, jid, holder, rate);
            }
        }
        Replicate::Effect(op, arg) => ffi::replicate_effect(ctx, name, now, op, arg),
        // A replica's own AOF only gets what a module command replicates.
        Replicate::Verbatim => ctx.replicate_verbatim(),
    }
    // Serving waiters opens the key again: ours must be closed first.
    drop(key);
    if effects.expire_event {
        ffi::notify_module_event(ctx, events::EXPIRE, name);
    }
    if let Some(event) = effects.event {
        ffi::notify_module_event(ctx, event, name);
    }
    Ok(Freed(effects.serve_waiters))
}

/// One key of a command over several keys, after its change: its name, its
/// open key, the holders whose lease ran out, and what else changed.
pub struct Changed<'n, 'a> {
    pub name: &'n RedisString,
    pub key: LockKey,
    pub expired: usize,
    pub change: Change<'a>,
}

/// [`finish`] for a command whose change over several keys reaches the
/// replicas as one effect (LOCKALL's grant, UNLOCKALL, their replayed
/// APPLY): what follows each key is [`Change::effects`]'s, as for one key;
/// every key that changed is settled, `replicate` sends the one effect
/// (given the keys, still open, and whether each changed), the keys are
/// closed, then each key's `unique.expire` and own event. Returns, per key,
/// whether its waiters are to be served.
pub fn finish_all(
    ctx: &Context,
    now: i64,
    mut keys: Vec<Changed<'_, '_>>,
    replicate: impl FnOnce(&[Changed<'_, '_>], &[bool]) -> Result<(), RedisError>,
) -> Result<Vec<Freed>, RedisError> {
    let mut effects = Vec::with_capacity(keys.len());
    for k in &mut keys {
        let effect = k.change.effects(k.expired);
        if effect.is_some() {
            settle(&mut k.key, now)?;
        }
        effects.push(effect);
    }
    let changed: Vec<bool> = effects.iter().map(Option::is_some).collect();
    replicate(&keys, &changed)?;
    // Serving waiters opens the keys again: ours must be closed first.
    let names: Vec<&RedisString> = keys.into_iter().map(|k| k.name).collect();
    for (name, effect) in names.iter().zip(&effects) {
        let Some(effect) = effect else { continue };
        if effect.expire_event {
            ffi::notify_module_event(ctx, events::EXPIRE, name);
        }
        if let Some(event) = effect.event {
            ffi::notify_module_event(ctx, event, name);
        }
    }
    Ok(effects
        .iter()
        .map(|e| Freed(e.is_some_and(|e| e.serve_waiters)))
        .collect())
}

/// What Redis is told about a command when it is registered.
pub enum Facts {
    /// A public command: its `docs` entry, which holds its name, flags,
    /// arity, key specs, ACL categories and docs.
    Public(&'static CommandDoc),
    /// The internal `unique.apply`: no docs, no ACL category; its key is the
    /// first argument.
    Internal {
        name: &'static CStr,
        flags: &'static str,
    },
}

/// One command as lib.rs registers it: its facts and its entry point, side
/// by side.
pub struct Registration {
    pub facts: Facts,
    pub entry: ffi::EntryPoint,
}

impl Registration {
    /// The command's name, as registered.
    pub fn name(&self) -> Cow<'static, CStr> {
        match self.facts {
            // A literal of docs.rs: no NUL inside (a test checks).
            Facts::Public(doc) => CString::new(doc.name).map_or(Cow::Borrowed(c""), Cow::Owned),
            Facts::Internal { name, .. } => Cow::Borrowed(name),
        }
    }

    /// The command's docs; `None` for the internal `unique.apply`.
    pub fn doc(&self) -> Option<&'static CommandDoc> {
        match self.facts {
            Facts::Public(doc) => Some(doc),
            Facts::Internal { .. } => None,
        }
    }

    /// Its command flags.
    pub fn flags(&self) -> &'static str {
        match self.facts {
            Facts::Public(doc) => doc.flags,
            Facts::Internal { flags, .. } => flags,
        }
    }

    /// The legacy key range (first, last, step) of its key spec: the first
    /// argument or none.
    pub fn keys(&self) -> (i32, i32, i32) {
        match self.facts {
            // Keys after their count have no legacy range: the key spec
            // finds them (COMMAND GETKEYS, ACL, cluster routing).
            Facts::Public(doc) => doc
                .key_specs
                .first()
                .filter(|k| !k.counted)
                .map_or((0, 0, 0), |k| (k.index, k.index, 1)),
            Facts::Internal { .. } => (1, 1, 1), // unique.apply key now ...
        }
    }
}

/// The module's own ACL category, `@unique`: every public command, where the
/// server lets a module add a category (Redis 8+, Valkey 8+).
pub const ACL_CATEGORY: &CStr = c"unique";

/// Puts every public command in the ACL categories of its docs entry, and in `@unique` where the server has it. Logs what the server
/// could not do (Redis 7.0 has no categories for module commands, 7.2 no
/// categories of a module's own): the module still loads, and its commands
/// are granted by name there. Only during the load.
pub fn set_acl_categories(ctx: &Context) {
    let own = ffi::add_acl_category(ctx, ACL_CATEGORY);
    if !own {
        ctx.log_notice("no @unique ACL category on this server (Redis 8+ and Valkey 8+ have one)");
    }
    for command in &REGISTRY {
        let Some(doc) = command.doc() else {
            continue; // the internal UNIQUE.APPLY: in no category
        };
        let categories = if own {
            format!("{} unique", doc.acl_categories)
        } else {
            doc.acl_categories.to_string()
        };
        let Ok(categories) = CString::new(categories) else {
            continue;
        };
        match ffi::set_acl_categories(ctx, &command.name(), &categories) {
            ffi::Categories::Set => {}
            ffi::Categories::Unsupported => {
                ctx.log_notice(
                    "no ACL categories for module commands on this server (Redis 7.2+ and \
                     Valkey 8+ have them): grant the unique.* commands by name",
                );
                return;
            }
            ffi::Categories::Refused => ctx.log_warning(&format!(
                "the server refused the ACL categories {categories:?} of {:?}",
                command.name()
            )),
        }
    }
}

/// Every command of the module, its facts beside its entry point. A new
/// command adds its file (with its `Command` type, the entry point's
/// handler), its entry to `docs::COMMANDS`, and its row here, which names
/// both: a misspelt one does not build, a forgotten one fails a test. LOCK,
/// UNLOCK and LOCKEDBY, the hot ones, read their arguments in place; the
/// others take Redis strings.
pub static REGISTRY: [Registration; 10] = [
    Registration {
        facts: Facts::Public(&docs::LOCK),
        entry: ffi::entry_point::<lock::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::UNLOCK),
        entry: ffi::entry_point::<unlock::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::LOCKALL),
        entry: ffi::args_entry_point::<lockall::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::UNLOCKALL),
        entry: ffi::args_entry_point::<unlockall::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::LOCKEDBY),
        entry: ffi::entry_point::<lockedby::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::WAITERS),
        entry: ffi::args_entry_point::<waiters::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::RATE),
        entry: ffi::args_entry_point::<rate::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::REAP),
        entry: ffi::args_entry_point::<reap::Command>,
    },
    Registration {
        facts: Facts::Public(&docs::METRICS),
        entry: ffi::args_entry_point::<metrics::Command>,
    },
    Registration {
        facts: Facts::Internal {
            name: crate::codec::APPLY_COMMAND,
            flags: "write",
        },
        entry: ffi::args_entry_point::<apply::Command>,
    },
];

/// Declares a command file's `Command`: the entry point's handler, which runs
/// `run` under the panic guard (reading the arguments in place, or as Redis
/// strings).
macro_rules! command {
    (in_place $run:path) => {
        /// This command, for `commands::REGISTRY`.
        pub struct Command;
        impl $crate::ffi::InPlace for Command {
            fn run(
                ctx: &redis_module::Context,
                key: &redis_module::RedisString,
                args: &[&[u8]],
            ) -> redis_module::RedisResult {
                super::guard_in_place(ctx, key, args, |c, k, a| $run(c, k, a))
            }
        }
    };
    (with_args $run:path) => {
        /// This command, for `commands::REGISTRY`.
        pub struct Command;
        impl $crate::ffi::WithArgs for Command {
            fn run(
                ctx: &redis_module::Context,
                args: Vec<redis_module::RedisString>,
            ) -> redis_module::RedisResult {
                super::guard(ctx, args, $run)
            }
        }
    };
}
use command;

/// Runs a change on a lock and keeps the holders gauge in step with it.
fn tracked<T>(lock: &mut Lock, change: impl FnOnce(&mut Lock) -> T) -> T {
    let before = lock.len();
    let out = change(lock);
    counters::holders_changed(before, lock.len());
    out
}

/// Whether a grant a waiter is about to be told of still stands: this server
/// is a primary and, on every key, the jid holds with the token it was
/// granted and a lease that has not ended. What a waiter served after a
/// failover or a long block is checked against before its reply goes out
/// (`ffi::Held`): a grant that no longer stands is told as nil.
pub fn grant_stands(ctx: &Context, held: &ffi::Held) -> bool {
    if !crate::role::is_primary() {
        return false;
    }
    let now = ffi::now_ms();
    held.keys.iter().all(|(key, token)| {
        let name = ctx.create_string(key.as_slice());
        LockKey::open(ctx, &name, false).is_some_and(|key| {
            matches!(key.lock(), Ok(Some(lock)) if lock
                .holder(&held.jid)
                .is_some_and(|h| h.token() == *token && h.is_live(now)))
        })
    })
}

/// Keyspace events of this module (class `d`, module events), as C strings:
/// they go to Redis as they are.
pub mod events {
    use std::ffi::CStr;

    /// A new holder.
    pub const LOCK: &CStr = c"unique.lock";
    /// UNLOCK removed a holder.
    pub const UNLOCK: &CStr = c"unique.unlock";
    /// A lease ran out and the holder was removed.
    pub const EXPIRE: &CStr = c"unique.expire";
    /// REAP OWNER removed a holder.
    pub const REAP: &CStr = c"unique.reap";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_becomes_an_error_reply() {
        fn boom(_: &Context, _: Vec<RedisString>) -> RedisResult {
            panic!("bug")
        }
        match guard(&Context::dummy(), Vec::new(), boom) {
            Err(e) => assert!(e.to_string().starts_with("ERR internal error")),
            Ok(v) => panic!("expected an error, got {v:?}"),
        }
    }

    #[test]
    fn every_documented_command_is_registered_once_in_the_docs_order() {
        let public: Vec<&CommandDoc> = REGISTRY.iter().filter_map(Registration::doc).collect();
        assert_eq!(
            public.len(),
            docs::COMMANDS.len(),
            "a docs entry unregistered"
        );
        for (registered, documented) in public.iter().zip(docs::COMMANDS) {
            assert!(
                std::ptr::eq(*registered, *documented),
                "{} registered where the docs have {}",
                registered.name,
                documented.name
            );
        }
        let mut names: Vec<Cow<'static, CStr>> = REGISTRY.iter().map(Registration::name).collect();
        for name in &names {
            let text = name.to_str().unwrap_or_default();
            assert!(
                text.starts_with("unique.") && text == text.to_ascii_lowercase(),
                "{name:?}"
            );
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len(), "a name registered twice");
        assert_eq!(REGISTRY.iter().filter(|r| r.doc().is_none()).count(), 1);
    }

    #[test]
    fn a_registration_gives_the_facts_of_its_docs() {
        let lock = &REGISTRY[0];
        assert_eq!(lock.name().as_ref(), c"unique.lock");
        assert_eq!(lock.flags(), "write deny-oom fast");
        assert_eq!(lock.keys(), (1, 1, 1));
        let metrics = REGISTRY
            .iter()
            .find(|r| r.name().as_ref() == c"unique.metrics");
        assert_eq!(metrics.map(Registration::keys), Some((0, 0, 0)));
        let apply = REGISTRY.iter().find(|r| r.doc().is_none());
        assert_eq!(
            apply.map(Registration::name),
            Some(Cow::Borrowed(crate::codec::APPLY_COMMAND))
        );
        assert_eq!(apply.map(Registration::keys), Some((1, 1, 1)));
    }

    #[test]
    fn argument_errors_have_redis_texts_and_pass_the_engines_on() {
        assert_eq!(ArgError::Syntax.to_string(), "ERR syntax error");
        assert_eq!(
            ArgError::NotAnInteger.to_string(),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            ArgError::from(LockError::InvalidExpire).to_string(),
            "ERR invalid expire time in 'unique.lock' command"
        );
        assert_eq!(
            ArgError::from(LockError::MetaNotObject).to_string(),
            LockError::MetaNotObject.to_string()
        );
        assert_eq!(
            RedisError::from(LockError::InvalidExpire).to_string(),
            "ERR invalid expire time in 'unique.lock' command"
        );
        // In another command, the texts that name one name that one.
        assert_eq!(
            ArgError::from(LockError::InvalidExpire)
                .in_command("unique.lockall")
                .to_string(),
            "ERR invalid expire time in 'unique.lockall' command"
        );
        assert!(
            ArgError::InvalidWait
                .in_command("unique.lockall")
                .to_string()
                .starts_with("ERR invalid wait time in 'unique.lockall' command")
        );
        assert_eq!(
            ArgError::Syntax.in_command("unique.lockall").to_string(),
            "ERR syntax error"
        );
    }

    #[test]
    fn integers() {
        assert_eq!(parse_int(b"-42"), Ok(-42));
        assert_eq!(parse_int(b"9223372036854775807"), Ok(i64::MAX));
        for bad in [
            &b""[..],
            b"1.5",
            b"abc",
            b" 1",
            b"9223372036854775808",
            b"\xff",
        ] {
            assert_eq!(parse_int(bad), Err(ArgError::NotAnInteger), "{bad:?}");
        }
        // What the standard library accepts, and nothing else.
        let mut cases: Vec<String> = [
            "",
            "+",
            "-",
            "+5",
            "-0",
            "007",
            "-9223372036854775808",
            "-9223372036854775809",
            "9223372036854775807",
            "99999999999999999999",
            "1e3",
            "0x10",
            "--1",
            "+-1",
            "٣",
        ]
        .map(String::from)
        .to_vec();
        cases.extend((-3000..3000).map(|i: i64| (i * 104_729).to_string()));
        for case in cases {
            assert_eq!(
                parse_int(case.as_bytes()).ok(),
                case.parse::<i64>().ok(),
                "{case:?}"
            );
        }
    }

    proptest::proptest! {
        /// Any text, and any number with any sign and leading zeros, reads
        /// as the standard library reads it.
        #[test]
        fn integers_read_as_the_standard_library_reads_them(
            text in "[-+0-9a]{0,24}",
            n in proptest::prelude::any::<i64>(),
            sign in "[-+]?",
            zeros in "0{0,6}",
        ) {
            proptest::prop_assert_eq!(parse_int(text.as_bytes()).ok(), text.parse::<i64>().ok());
            let padded = format!("{sign}{zeros}{}", n.unsigned_abs());
            proptest::prop_assert_eq!(parse_int(padded.as_bytes()).ok(), padded.parse::<i64>().ok());
        }

        /// Any bytes, against a keyword of letters, in any case, read as
        /// `eq_ignore_ascii_case` reads them.
        #[test]
        fn keywords_read_as_eq_ignore_ascii_case(
            arg in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..6),
            keyword in "[A-Za-z]{1,5}",
            flips in proptest::collection::vec(proptest::prelude::any::<bool>(), 5),
        ) {
            let keyword = keyword.as_bytes();
            proptest::prop_assert_eq!(is_keyword(&arg, keyword), arg.eq_ignore_ascii_case(keyword));
            let spelled: Vec<u8> = keyword.iter().zip(&flips)
                .map(|(k, &flip)| if flip { k ^ 0x20 } else { *k })
                .collect();
            proptest::prop_assert!(is_keyword(&spelled, keyword));
            // Every byte that folds onto a letter's bit pattern but is not
            // that letter (`@`, `[`, `` ` ``, `{`...) is refused.
            for (i, k) in keyword.iter().enumerate() {
                for b in 0..=u8::MAX {
                    let mut other = keyword.to_vec();
                    other[i] = b;
                    proptest::prop_assert_eq!(
                        is_keyword(&other, keyword),
                        b.eq_ignore_ascii_case(k)
                    );
                }
            }
        }
    }
}
