//! Replication and AOF: the `unique.apply` effects a change sends to the
//! replicas and the AOF, and the commands an AOF rewrite emits.

use std::ffi::{c_char, c_longlong};

use redis_module::{Context, RedisString, raw};

use super::argv::Argv;
use crate::codec::{APPLY_COMMAND, ApplyOp, HOLD_DEFAULTS, NO_EXPIRY, write_rate};
use crate::engine::{Holder, Mode, Rate};

/// Emits the command that recreates `holder` of `key` into a rewritten AOF,
/// with time 0 so that replay removes nothing.
pub(crate) fn emit_aof_hold(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    h: &Holder,
) {
    emit_aof_apply(io, key, ApplyOp::Hold, Argv::holder(h));
}

/// Emits the command that recreates the rate state of `key` into a rewritten
/// AOF, with time 0 so that replay removes nothing.
pub(crate) fn emit_aof_rate(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    rate: &Rate,
) {
    let mut argv = Argv::new();
    write_rate(rate, &mut argv);
    emit_aof_apply(io, key, ApplyOp::Rate, argv);
}

/// Emits `UNIQUE.APPLY key 0 OP <argv>` into a rewritten AOF.
fn emit_aof_apply(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    op: ApplyOp,
    mut argv: Argv,
) {
    // SAFETY: `io` and `key` are what Redis passed to aof_rewrite; every
    // argument matches the format (s = a module string, l = long long, c = C
    // string, v = an array of module strings and its length); `argv`
    // outlives the call.
    unsafe {
        if let Some(emit) = raw::RedisModule_EmitAOF {
            emit(
                io,
                APPLY_COMMAND.as_ptr(),
                c"slcv".as_ptr(),
                key,
                0 as c_longlong,
                op.word().as_ptr(),
                argv.strings.as_mut_ptr(),
                argv.len,
            );
        }
    }
}

/// Replicates `UNIQUE.APPLY key now HOLD ...`: `holder` exactly as it is,
/// with the client's own key string, in the fields and the order of
/// `codec::write_holder` (jid, token, acquired_at, expires_at, type, owner,
/// meta, group, mode), less the trailing fields that have their default
/// value (the default type, no owner, meta, group or mode:
/// `codec::HOLD_DEFAULTS`; so a plain grant's effect is what it was before
/// groups and modes, and a replica of an older version applies it). Each argument
/// of an effect is a string object Redis makes, feeds and frees, so a plain
/// grant goes as 7 arguments instead of 10. Through RM_Replicate's format:
/// Redis makes each argument once, for the replication stream itself,
/// instead of module strings made, retained and freed around it.
///
/// With `rate` (a grant that spent the key's rate), the same effect as
/// `RATEHOLD`, the rate state's fields (`codec::write_rate`) in one argument
/// before the holder's: one effect per grant, as a plain one.
pub fn replicate_hold(ctx: &Context, key: &RedisString, now: i64, h: &Holder, rate: Option<&Rate>) {
    let jid = h.jid();
    let (group, mode): (&[u8], &[u8]) = if h.has_fair() {
        (
            h.group().unwrap_or_default(),
            h.mode().map_or("", Mode::name).as_bytes(),
        )
    } else {
        (b"", b"")
    };
    let (lock_type, owner, meta) = (
        h.lock_type().as_bytes(),
        h.owner().unwrap_or_default(),
        h.meta().unwrap_or_default(),
    );
    // How many of the optional fields go: up to the last one that differs
    // from its default (`HOLD_DEFAULTS`: the default type, then empty).
    let tail_len = if !mode.is_empty() {
        5
    } else if !group.is_empty() {
        4
    } else if !meta.is_empty() {
        3
    } else if !owner.is_empty() {
        2
    } else if Some(&lock_type) != HOLD_DEFAULTS.first() {
        1
    } else {
        0
    };
    // The numbers go as text made here (`b`), not as `l`: Redis turns a long
    // long into text one division per digit, and these are 13-digit times
    // and tokens. A new grant's acquired_at is `now`: made once.
    let now_text = Decimal::new(now);
    let acquired_text = (h.acquired_at != now).then(|| Decimal::new(h.acquired_at));
    let acquired = acquired_text.as_ref().unwrap_or(&now_text).bytes();
    let now_text = now_text.bytes();
    let token = Decimal::new(h.token);
    let token = token.bytes();
    let expires_at = Decimal::new(h.expires_at().unwrap_or(NO_EXPIRY));
    let expires_at = expires_at.bytes();
    // One call per length: RM_Replicate is variadic, its format says how
    // many arguments follow: `now`, the op, the rate's fields if any
    // (`$pre`), the holder's four, then its `tail_len` optional ones.
    macro_rules! replicate {
        ($replicate:expr, $op:expr, $pre_format:literal [$($pre:expr),*] $tail_format:literal
            $(, $field:expr)*) => {
            $replicate(
                ctx.get_raw(),
                APPLY_COMMAND.as_ptr(),
                concat!("sbc", $pre_format, "bbbb", $tail_format, "\0")
                    .as_ptr()
                    .cast::<c_char>(),
                key.inner,
                now_text.as_ptr().cast::<c_char>(),
                now_text.len(),
                $op.word().as_ptr(),
                $($pre.as_ptr().cast::<c_char>(), $pre.len(),)*
                jid.as_ptr().cast::<c_char>(),
                jid.len(),
                token.as_ptr().cast::<c_char>(),
                token.len(),
                acquired.as_ptr().cast::<c_char>(),
                acquired.len(),
                expires_at.as_ptr().cast::<c_char>(),
                expires_at.len()
                $(, $field.as_ptr().cast::<c_char>(), $field.len())*
            )
        };
    }
    macro_rules! by_tail {
        ($replicate:expr, $op:expr, $pre_format:literal [$($pre:expr),*]) => {
            match tail_len {
                0 => replicate!($replicate, $op, $pre_format [$($pre),*] ""),
                1 => replicate!($replicate, $op, $pre_format [$($pre),*] "b", lock_type),
                2 => replicate!($replicate, $op, $pre_format [$($pre),*] "bb", lock_type, owner),
                3 => replicate!(
                    $replicate, $op, $pre_format [$($pre),*] "bbb", lock_type, owner, meta
                ),
                4 => replicate!(
                    $replicate, $op, $pre_format [$($pre),*] "bbbb", lock_type, owner, meta, group
                ),
                _ => replicate!(
                    $replicate, $op, $pre_format [$($pre),*] "bbbbb",
                    lock_type, owner, meta, group, mode
                ),
            }
        };
    }
    // SAFETY: `ctx` is the context of the running command; every argument
    // matches the format (s = a module string, c = C string, b = a pointer
    // and a length; the format ends with its NUL); the buffers outlive the
    // call, which copies them.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            match rate {
                None => by_tail!(replicate, ApplyOp::Hold, "" []),
                Some(rate) => {
                    let rate = RateText::new(rate);
                    let rate = rate.bytes();
                    by_tail!(replicate, ApplyOp::RateHold, "b"[rate])
                }
            };
        }
    }
}

/// A rate state's fields (`codec::write_rate`'s order) as one argument of
/// RATEHOLD, separated by a space, on the stack.
struct RateText {
    buf: [u8; 4 * 21],
    len: usize,
}

impl RateText {
    fn new(rate: &Rate) -> Self {
        let mut out = Self {
            buf: [0; 4 * 21],
            len: 0,
        };
        let fields = [rate.limit.n, rate.limit.per, rate.limit.burst, rate.tat];
        for (i, field) in fields.into_iter().enumerate() {
            let field = Decimal::new(field);
            let sep: &[u8] = if i == 0 { b"" } else { b" " };
            for part in [sep, field.bytes()] {
                if let Some(to) = out.buf.get_mut(out.len..out.len + part.len()) {
                    to.copy_from_slice(part);
                    out.len += part.len();
                }
            }
        }
        out
    }

    fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

/// An integer as decimal text, on the stack, two digits a step.
struct Decimal {
    buf: [u8; 20],
    start: usize,
}

impl Decimal {
    fn new(value: i64) -> Self {
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut out = Self {
            buf: [0; 20],
            start: 20,
        };
        let mut n = value.unsigned_abs();
        let mut put = |byte: u8| {
            out.start -= 1;
            if let Some(slot) = out.buf.get_mut(out.start) {
                *slot = byte;
            }
        };
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            put(PAIRS.get(pair + 1).copied().unwrap_or(b'0'));
            put(PAIRS.get(pair).copied().unwrap_or(b'0'));
        }
        if n >= 10 {
            let pair = n as usize * 2;
            put(PAIRS.get(pair + 1).copied().unwrap_or(b'0'));
            put(PAIRS.get(pair).copied().unwrap_or(b'0'));
        } else {
            put(b'0' + n as u8);
        }
        if value < 0 {
            put(b'-');
        }
        out
    }

    fn bytes(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }
}

/// Replicates `UNIQUE.APPLY key now OP [arg]` (RELEASE jid, REAP owner,
/// PRUNE), through RM_Replicate's format as [`replicate_hold`].
pub fn replicate_effect(
    ctx: &Context,
    key: &RedisString,
    now: i64,
    op: ApplyOp,
    arg: Option<&[u8]>,
) {
    let now = Decimal::new(now);
    let now = now.bytes();
    // SAFETY: as in `replicate_hold`: the arguments match the format (with
    // `b`, a pointer and a length, for the optional argument).
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            match arg {
                Some(arg) => replicate(
                    ctx.get_raw(),
                    APPLY_COMMAND.as_ptr(),
                    c"sbcb".as_ptr(),
                    key.inner,
                    now.as_ptr().cast::<c_char>(),
                    now.len(),
                    op.word().as_ptr(),
                    arg.as_ptr().cast::<c_char>(),
                    arg.len(),
                ),
                None => replicate(
                    ctx.get_raw(),
                    APPLY_COMMAND.as_ptr(),
                    c"sbc".as_ptr(),
                    key.inner,
                    now.as_ptr().cast::<c_char>(),
                    now.len(),
                    op.word().as_ptr(),
                ),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    #[test]
    fn decimals_are_what_rust_prints() {
        let mut values = vec![
            0,
            1,
            9,
            10,
            99,
            100,
            101,
            1_700_000_000_123,
            i64::MAX,
            i64::MIN,
        ];
        values.extend((0..2000).map(|i| i * 7919 - 5000));
        for v in values {
            assert_eq!(Decimal::new(v).bytes(), v.to_string().as_bytes(), "{v}");
        }
    }
}
