//! Replication and AOF: the `unique.apply` effects a change sends to the
//! replicas and the AOF, and the commands an AOF rewrite emits.

use std::ffi::{c_char, c_longlong};

use redis_module::{Context, RedisString, raw};

use super::argv::{Argv, Owned, shared};
use super::entry::client_string;
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

/// Replicates `UNIQUE.APPLY key GRANT jid "token acquired_at expires_at"
/// ...` for a holder acquired at `now` (a new grant), `UNIQUE.APPLY key now
/// LEASE jid ...` for one acquired before (a renewal): `holder` exactly as
/// it is, with the client's own key
/// string, in the fields and the order of `codec::write_holder` (jid, then
/// the lease's three numbers in one argument, then type, owner, meta, group,
/// mode), less the trailing fields that have their default value (the
/// default type, no owner, meta, group or mode: `codec::HOLD_DEFAULTS`).
/// With `rate` (a grant that spent the key's rate), the rate state's four
/// fields (`codec::write_rate`) follow the lease's numbers in their
/// argument: one effect per grant, and no more arguments than a plain one.
///
/// Redis makes, feeds and frees every argument of an effect as a string
/// object, and that costs more than anything else an effect does; so a
/// grant goes as few of them as it can: the key, the operation's word and
/// the jid are retained (`s`: the client's key and jid, `jid` being the
/// bytes the command read in place; a word made once), the lease (and a
/// renewal's `now`) are made from text written here (`b`; Redis would write
/// a long long one division per digit), and the fields left at their
/// default are not sent.
pub fn replicate_hold(
    ctx: &Context,
    key: &RedisString,
    now: i64,
    jid: &[u8],
    h: &Holder,
    rate: Option<&Rate>,
) {
    // The jid as the client sent it when it is the running command's own
    // argument (LOCK's), else a string made for the call (a served waiter).
    let jid = match client_string(jid) {
        Some(string) => JidString::Client(string),
        None => JidString::Made(Owned::bytes(&h.jid())),
    };
    let Some(jid) = jid.get() else {
        return;
    };
    let ([lock_type, owner, meta, group, mode], tail_len) = optional_fields(h);
    let expires_at = h.expires_at().unwrap_or(NO_EXPIRY);
    let acquired_at = h.acquired_at();
    let lease_text = match rate {
        None => Numbers::of(&[h.token(), acquired_at, expires_at]),
        Some(r) => Numbers::of(&[
            h.token(),
            acquired_at,
            expires_at,
            r.limit.n,
            r.limit.per,
            r.limit.burst,
            r.tat,
        ]),
    };
    let lease = lease_text.bytes();
    // A new grant's acquired_at is `now`: GRANT says so, and `now` is not
    // sent. A renewal sends `now` apart, before LEASE.
    let now_text = (acquired_at != now).then(|| Numbers::of(&[now]));
    let op_word = match now_text {
        None => ApplyOp::Grant,
        Some(_) => ApplyOp::Lease,
    };
    let Some(op) = shared(op_word.word().to_bytes()) else {
        return;
    };
    // One call per length: RM_Replicate is variadic, its format says how
    // many arguments follow: (`now`,) the op, the jid and the lease, then
    // the holder's `tail_len` optional fields.
    macro_rules! replicate {
        ($replicate:expr, $tail_format:literal $(, $field:expr)*) => {
            match &now_text {
                None => $replicate(
                    ctx.get_raw(),
                    APPLY_COMMAND.as_ptr(),
                    concat!("sssb", $tail_format, "\0").as_ptr().cast::<c_char>(),
                    key.inner,
                    op,
                    jid,
                    lease.as_ptr().cast::<c_char>(),
                    lease.len()
                    $(, $field.as_ptr().cast::<c_char>(), $field.len())*
                ),
                Some(now) => $replicate(
                    ctx.get_raw(),
                    APPLY_COMMAND.as_ptr(),
                    concat!("sbssb", $tail_format, "\0").as_ptr().cast::<c_char>(),
                    key.inner,
                    now.bytes().as_ptr().cast::<c_char>(),
                    now.bytes().len(),
                    op,
                    jid,
                    lease.as_ptr().cast::<c_char>(),
                    lease.len()
                    $(, $field.as_ptr().cast::<c_char>(), $field.len())*
                ),
            }
        };
    }
    // SAFETY: `ctx` is the context of the running command; every argument
    // matches the format (s = a live module string, which the call retains;
    // b = a pointer and a length, copied; the format ends with its NUL); the
    // buffers outlive the call.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            match tail_len {
                0 => replicate!(replicate, ""),
                1 => replicate!(replicate, "b", lock_type),
                2 => replicate!(replicate, "bb", lock_type, owner),
                3 => replicate!(replicate, "bbb", lock_type, owner, meta),
                4 => replicate!(replicate, "bbbb", lock_type, owner, meta, group),
                _ => replicate!(replicate, "bbbbb", lock_type, owner, meta, group, mode),
            };
        }
    }
}

/// A holder's optional fields in the effect's order (type, owner, meta,
/// group, mode), and how many of them go: up to the last one that differs
/// from its default (`HOLD_DEFAULTS`: the default type, then empty).
#[inline]
fn optional_fields(h: &Holder) -> ([&[u8]; 5], usize) {
    let (group, mode): (&[u8], &[u8]) = if h.has_fair() {
        (
            h.group().unwrap_or_default(),
            h.mode().map_or("", Mode::name).as_bytes(),
        )
    } else {
        (b"", b"")
    };
    let lock_type = h.lock_type().as_bytes();
    let fields = [
        lock_type,
        h.owner().unwrap_or_default(),
        h.meta().unwrap_or_default(),
        group,
        mode,
    ];
    // Past the type, a field goes when it or a later one is not empty.
    let last_set = fields.iter().skip(1).rposition(|f| !f.is_empty());
    let len = last_set.map_or(
        usize::from(HOLD_DEFAULTS.first() != Some(&lock_type)),
        |i| i + 2,
    );
    (fields, len)
}

/// The jid's string in an effect: the client's own (retained by the call),
/// or one made here and freed after it.
enum JidString {
    Client(*mut raw::RedisModuleString),
    Made(Owned),
}

impl JidString {
    fn get(&self) -> Option<*mut raw::RedisModuleString> {
        match self {
            Self::Client(s) => (!s.is_null()).then_some(*s),
            Self::Made(s) => s.get(),
        }
    }
}

/// Up to [`MAX_NUMBERS`] integers as decimal text separated by a space, on
/// the stack: a lease's numbers (and a rate state's fields after them), or
/// one number. Written from the end of the buffer backwards, eight digits a
/// step, so that nothing is copied: the text is what was written.
struct Numbers {
    buf: [u8; HEADROOM + MAX_NUMBERS * 21],
    start: usize,
}

/// The most numbers one [`Numbers`] writes: a lease's three and a rate
/// state's four.
const MAX_NUMBERS: usize = 7;

/// Room before the text for the unkept bytes of [`Numbers::put_eight`]'s
/// last store.
const HEADROOM: usize = 8;

impl Numbers {
    // Inlined: built in its caller's frame, not copied out of its own.
    #[inline(always)]
    fn of(values: &[i64]) -> Self {
        let mut out = Self {
            buf: [0; HEADROOM + MAX_NUMBERS * 21],
            start: HEADROOM + MAX_NUMBERS * 21,
        };
        let values = values.get(..MAX_NUMBERS).unwrap_or(values);
        for &value in values.iter().rev() {
            if out.start < out.buf.len() {
                out.put(b' ');
            }
            out.put_decimal(value);
        }
        out
    }

    fn put(&mut self, byte: u8) {
        if let Some(at) = self.start.checked_sub(1)
            && let Some(slot) = self.buf.get_mut(at)
        {
            *slot = byte;
            self.start = at;
        }
    }

    /// The last `keep` of `digits` before what is written. All eight bytes
    /// are stored (one store, not a copy of a length known at run time):
    /// those before the kept ones fall where nothing is written yet, and
    /// `HEADROOM` leaves them room before the first number.
    #[inline(always)]
    fn put_eight(&mut self, digits: [u8; 8], keep: usize) {
        if let Some(at) = self.start.checked_sub(8)
            && let Some(to) = self.buf.get_mut(at..at + 8)
        {
            to.copy_from_slice(&digits);
            self.start = at + 8 - keep.min(8);
        }
    }

    // Inlined: called for every number of every effect.
    #[inline(always)]
    fn put_decimal(&mut self, value: i64) {
        let mut n = value.unsigned_abs();
        // Eight digits a step, from the last; the first step's leading zeros
        // trimmed (a number has at least one digit).
        while n >= 100_000_000 {
            let low = n % 100_000_000;
            n /= 100_000_000;
            self.put_eight(eight_digits(low), 8);
        }
        let first = eight_digits(n);
        let zeros = u64::from_le_bytes(first) ^ u64::from_le_bytes([b'0'; 8]);
        let leading = (zeros.trailing_zeros() / 8).min(7) as usize;
        self.put_eight(first, 8 - leading);
        if value < 0 {
            self.put(b'-');
        }
    }

    fn bytes(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }
}

/// The eight decimal digits of `x` (below 10^8, leading zeros included), as
/// text, computed in the lanes of one 64-bit word instead of a division per
/// digit: the two halves of four digits in two 32-bit lanes, each split in
/// two pairs (16-bit lanes), each pair in two digits (8-bit lanes), with
/// multiplications that divide exactly in that range (by 100: `* 10_486 >>
/// 20` below 10^4; by 10: `* 103 >> 10` below 100). Little-endian lanes, so
/// the first digit is the first byte. Above that range it gives 99999999 (a
/// compare, where a remainder would redo the division its callers did).
fn eight_digits(x: u64) -> [u8; 8] {
    let x = x.min(99_999_999);
    let halves = (x / 10_000) | ((x % 10_000) << 32);
    let hundreds = ((halves * 10_486) >> 20) & 0x0000_007F_0000_007F;
    let pairs = ((halves - 100 * hundreds) << 16) | hundreds;
    let tens = ((pairs * 103) >> 10) & 0x000F_000F_000F_000F;
    let digits = ((pairs - 10 * tens) << 8) | tens;
    (digits | 0x3030_3030_3030_3030).to_le_bytes()
}

/// Replicates `UNIQUE.APPLY key now OP [arg]` (RELEASE jid, REAP owner,
/// PRUNE), through RM_Replicate's format as [`replicate_hold`]: `arg`
/// retained when it is the running command's own argument (UNLOCK's jid,
/// REAP's owner), else made.
pub fn replicate_effect(
    ctx: &Context,
    key: &RedisString,
    now: i64,
    op: ApplyOp,
    arg: Option<&[u8]>,
) {
    let Some(op) = shared(op.word().to_bytes()) else {
        return;
    };
    let now = Numbers::of(&[now]);
    let now = now.bytes();
    // SAFETY: as in `replicate_hold`: the arguments match the format (for
    // the optional argument, `s`: the running command's own live string,
    // which the call retains; or `b`, a pointer and a length).
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            match arg.map(|arg| (arg, client_string(arg))) {
                Some((_, Some(own))) => replicate(
                    ctx.get_raw(),
                    APPLY_COMMAND.as_ptr(),
                    c"sbss".as_ptr(),
                    key.inner,
                    now.as_ptr().cast::<c_char>(),
                    now.len(),
                    op,
                    own,
                ),
                Some((arg, None)) => replicate(
                    ctx.get_raw(),
                    APPLY_COMMAND.as_ptr(),
                    c"sbsb".as_ptr(),
                    key.inner,
                    now.as_ptr().cast::<c_char>(),
                    now.len(),
                    op,
                    arg.as_ptr().cast::<c_char>(),
                    arg.len(),
                ),
                None => replicate(
                    ctx.get_raw(),
                    APPLY_COMMAND.as_ptr(),
                    c"sbs".as_ptr(),
                    key.inner,
                    now.as_ptr().cast::<c_char>(),
                    now.len(),
                    op,
                ),
            };
        }
    }
}

/// Replicates `DEL key`: the effect of a change that left the key with no
/// holder and no rate state, which is the key's deletion whatever removed
/// its last holder (so a replica and the AOF get what Redis itself sends for
/// a deleted key, one argument fewer than any `UNIQUE.APPLY`).
pub fn replicate_delete(ctx: &Context, key: &RedisString) {
    // SAFETY: `ctx` is the context of the running command; `s` is the
    // client's live key string, which the call retains.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(ctx.get_raw(), c"DEL".as_ptr(), c"s".as_ptr(), key.inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Numbers;

    #[test]
    fn eight_digits_are_the_zero_padded_number() {
        for x in (0..100_000_000u32)
            .step_by(997)
            .chain([9_999_999, 99_999_999, 10_000, 9_999])
        {
            assert_eq!(
                super::eight_digits(u64::from(x)),
                *format!("{x:08}").as_bytes(),
                "{x}"
            );
        }
    }

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
        values.extend((0..19).map(|e| 10i64.pow(e)));
        values.extend((1..19).map(|e| 10i64.pow(e) - 1));
        values.extend((0..5000).map(|i| i * 1_844_674_407_370_955 + 13));
        for v in values {
            assert_eq!(Numbers::of(&[v]).bytes(), v.to_string().as_bytes(), "{v}");
        }
        let four = [i64::MIN, i64::MAX, 0, -1];
        let text = four.map(|v| v.to_string()).join(" ");
        assert_eq!(Numbers::of(&four).bytes(), text.as_bytes());
        assert_eq!(Numbers::of(&[1, 20, 300]).bytes(), b"1 20 300");
        // The most numbers, each of the most digits: the buffer's whole room.
        let seven = [i64::MIN; 7];
        let text = seven.map(|v| v.to_string()).join(" ");
        assert_eq!(Numbers::of(&seven).bytes(), text.as_bytes());
    }
}
