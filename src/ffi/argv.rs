//! The argv of a replicated effect, built from the codec's fields with as few
//! new strings as it can: the words every effect repeats are made once.

use std::ffi::c_char;
use std::ptr::NonNull;

use redis_module::raw;

use crate::codec::{Sink, write_holder};
use crate::engine::Holder;

/// Redis strings built through the codec's [`Sink`]: a holder goes to a
/// rewritten AOF, and a rate state to the replicas, in the fields and the
/// order they have in the RDB (`codec::write_holder`, `codec::write_rate`).
/// Ours until dropped. (A holder's own effect goes through RM_Replicate's
/// format: `replication::replicate_hold`.)
///
/// Most fields of a grant repeat from one effect to the next: the operation
/// name, a known lock type, an empty owner or meta, and `acquired_at`, which
/// is the effect's own `now` on a new grant. Those are not made again: the
/// string made once ([`shared`]) or the one just made is retained, so a
/// replicated grant makes three strings instead of ten.
pub(super) struct Argv {
    pub(super) strings: [*mut raw::RedisModuleString; 10],
    pub(super) len: usize,
    /// The numbers made so far, with their strings.
    numbers: [(i64, *mut raw::RedisModuleString); 5],
    numbers_len: usize,
}

impl Argv {
    pub(super) fn new() -> Self {
        Self {
            strings: [std::ptr::null_mut(); 10],
            len: 0,
            numbers: [(0, std::ptr::null_mut()); 5],
            numbers_len: 0,
        }
    }

    /// The fields of `h`.
    pub(super) fn holder(h: &Holder) -> Self {
        let mut argv = Self::new();
        write_holder(h, &mut argv);
        argv
    }

    /// Keeps `s`; false when it could not (and is freed).
    fn push(&mut self, s: *mut raw::RedisModuleString) -> bool {
        match self.strings.get_mut(self.len) {
            Some(slot) if !s.is_null() => {
                *slot = s;
                self.len += 1;
                true
            }
            // More fields than room: cannot happen (a holder has 9).
            _ => {
                free_string(s);
                false
            }
        }
    }
}

impl Sink for Argv {
    fn unsigned(&mut self, value: u64) {
        self.signed(value as i64);
    }
    fn signed(&mut self, value: i64) {
        let mut made = self.numbers.iter().take(self.numbers_len);
        let s = match made.find(|(n, _)| *n == value) {
            Some(&(_, s)) => retain_string(s),
            _ => Owned::number(value).into_raw(),
        };
        if self.push(s)
            && let Some(slot) = self.numbers.get_mut(self.numbers_len)
        {
            *slot = (value, s);
            self.numbers_len += 1;
        }
    }
    fn buffer(&mut self, bytes: &[u8]) {
        let s = match shared(bytes) {
            Some(s) => retain_string(s),
            None => Owned::bytes(bytes).into_raw(),
        };
        self.push(s);
    }
}

impl Drop for Argv {
    fn drop(&mut self) {
        for &s in self.strings.iter().take(self.len) {
            free_string(s);
        }
    }
}

/// One more reference to `s` (a string made with no context), for an [`Argv`]
/// that frees each of its strings once.
fn retain_string(s: *mut raw::RedisModuleString) -> *mut raw::RedisModuleString {
    // SAFETY: `s` is a live string made with no context; with no context
    // RetainString only raises its reference count.
    unsafe {
        match raw::RedisModule_RetainString {
            Some(f) => {
                f(std::ptr::null_mut(), s);
                s
            }
            None => std::ptr::null_mut(),
        }
    }
}

/// A Redis string made with no context (so never freed by Redis on its
/// own), ours until dropped: the one owner of the strings an effect makes.
/// Transparent, so that a slice of them is an argv.
#[repr(transparent)]
pub(super) struct Owned(*mut raw::RedisModuleString);

impl Owned {
    /// The string of `bytes` (null when Redis could not make it).
    pub(super) fn bytes(bytes: &[u8]) -> Self {
        // SAFETY: with no context the string is not auto-freed: `Drop` frees
        // it; the buffer is valid for `bytes.len()` bytes.
        Self(unsafe {
            raw::RedisModule_CreateString.map_or(std::ptr::null_mut(), |f| {
                f(
                    std::ptr::null_mut(),
                    bytes.as_ptr().cast::<c_char>(),
                    bytes.len(),
                )
            })
        })
    }

    /// The decimal string of `value` (null when Redis could not make it).
    pub(super) fn number(value: i64) -> Self {
        // SAFETY: with no context the string is not auto-freed: `Drop` frees it.
        Self(unsafe {
            raw::RedisModule_CreateStringFromLongLong
                .map_or(std::ptr::null_mut(), |f| f(std::ptr::null_mut(), value))
        })
    }

    /// The string, still owned here; `None` when it could not be made.
    pub(super) fn get(&self) -> Option<*mut raw::RedisModuleString> {
        (!self.0.is_null()).then_some(self.0)
    }

    /// The string, handed to a caller that frees it (`free_string`).
    fn into_raw(self) -> *mut raw::RedisModuleString {
        let s = self.0;
        std::mem::forget(self);
        s
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        free_string(self.0);
    }
}

fn free_string(s: *mut raw::RedisModuleString) {
    if s.is_null() {
        return;
    }
    // SAFETY: `s` was created with no context and is freed once.
    unsafe {
        if let Some(f) = raw::RedisModule_FreeString {
            f(std::ptr::null_mut(), s);
        }
    }
}

/// The words that every effect repeats (see [`word`]), as strings made once
/// for the life of the process (never freed: an `Argv` only retains and
/// releases them).
struct Shared([Option<NonNull<raw::RedisModuleString>>; WORDS.len()]);

// SAFETY: the strings are never changed or freed; their reference counts are
// only moved by the thread that runs commands and AOF rewrites (the main
// thread, or the rewrite's own process), as Redis requires of every string.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

static SHARED: std::sync::OnceLock<Shared> = std::sync::OnceLock::new();

/// The words of [`word`], in its order.
const WORDS: [&str; 19] = [
    "",
    "HOLD",
    "RELEASE",
    "REAP",
    "PRUNE",
    "RATE",
    "HOLDALL",
    "RELEASEALL",
    "lock",
    "until_executed",
    "until_executing",
    "while_executing",
    "until_and_while_executing",
    "until_expired",
    "shared",
    "exclusive",
    "RATEHOLD",
    "LEASE",
    "GRANT",
];

/// The index in [`WORDS`] of `bytes`: the operation names, the known lock
/// types and the empty field. Matched as constants (a length and a load or
/// two each), not searched: this runs for every field of every effect.
fn word(bytes: &[u8]) -> Option<usize> {
    Some(match bytes {
        b"" => 0,
        b"HOLD" => 1,
        b"RELEASE" => 2,
        b"REAP" => 3,
        b"PRUNE" => 4,
        b"RATE" => 5,
        b"HOLDALL" => 6,
        b"RELEASEALL" => 7,
        b"lock" => 8,
        b"until_executed" => 9,
        b"until_executing" => 10,
        b"while_executing" => 11,
        b"until_and_while_executing" => 12,
        b"until_expired" => 13,
        b"shared" => 14,
        b"exclusive" => 15,
        b"RATEHOLD" => 16,
        b"LEASE" => 17,
        b"GRANT" => 18,
        _ => return None,
    })
}

/// The string made once for `bytes`, if it is one of the [`WORDS`]: an
/// effect passes it to RM_Replicate as `s` (retained and released, not made
/// and freed).
pub(super) fn shared(bytes: &[u8]) -> Option<*mut raw::RedisModuleString> {
    let i = word(bytes)?;
    let shared = SHARED.get_or_init(|| {
        Shared(WORDS.map(|w| {
            // SAFETY: a string with no context, which is never freed.
            let s = unsafe {
                raw::RedisModule_CreateString
                    .map(|f| f(std::ptr::null_mut(), w.as_ptr().cast::<c_char>(), w.len()))
            };
            s.and_then(NonNull::new)
        }))
    });
    shared.0.get(i).copied().flatten().map(NonNull::as_ptr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::ApplyOp;

    #[test]
    fn the_shared_words_are_the_operations_the_known_types_and_the_empty_field() {
        for op in ApplyOp::ALL {
            assert!(word(op.word().to_bytes()).is_some(), "{op:?}");
        }
        for (i, w) in WORDS.iter().enumerate() {
            assert_eq!(word(w.as_bytes()), Some(i), "{w}");
        }
        for t in crate::engine::KNOWN_TYPES {
            assert!(word(t.as_bytes()).is_some(), "{t}");
        }
        for other in [&b"hold"[..], b"HOLD ", b"lock:1", b"job", b"x"] {
            assert_eq!(word(other), None);
        }
    }
}
