//! Blocked clients (`UNIQUE.LOCK ... WAIT`): blocking, unblocking with a
//! reply, and the callbacks Redis calls for them.

use std::ffi::c_void;
use std::ptr::NonNull;

use redis_module::{Context, RedisError, RedisResult, RedisValue, raw};

/// A client blocked by UNIQUE.LOCK ... WAIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(NonNull<raw::RedisModuleBlockedClient>);

/// What a served waiter is told.
#[derive(Debug, PartialEq, Eq)]
pub enum WaiterReply {
    Token(i64),
    /// An array of tokens (a call over several keys).
    Tokens(Vec<i64>),
    Error(String),
    /// A grant, checked again when the reply goes out (see [`Held`]).
    Held(Box<Held>),
}

/// A grant a waiter is told of, as it was made: its jid and, per key, its
/// token. The reply goes out after the command or timer that served the
/// waiter (Redis sends it when the event loop comes round), and in between
/// the server may have been blocked for longer than the lease, or turned
/// into a replica whose data replaced the grant. So the reply callback asks
/// `stands` first (the client's database selected), and a grant that no
/// longer stands is told as nil (not locked), never as held.
#[derive(Debug)]
pub struct Held {
    pub stands: fn(&Context, &Held) -> bool,
    pub jid: Vec<u8>,
    /// Each key with the token granted on it.
    pub keys: Vec<(Vec<u8>, i64)>,
    /// An array of tokens (LOCKALL), or one.
    pub many: bool,
}

/// The same grant (whatever checks it).
impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (&self.jid, &self.keys, self.many) == (&other.jid, &other.keys, other.many)
    }
}

impl Eq for Held {}

/// What Redis calls back for a blocked client, besides the reply that
/// [`unblock`] gives it.
pub trait BlockHandler {
    /// `CLIENT UNBLOCK` ended the wait: the client's reply.
    fn on_timeout(ctx: &Context, blocked: Option<Blocked>) -> RedisResult;
    /// The client went away while blocked.
    fn on_disconnect(ctx: &Context, blocked: Blocked);
}

/// Blocks the calling client with no deadline of Redis's: the module ends
/// the wait with [`unblock`], its own timer included (see `waiting.rs`: a
/// Redis timeout could fire after the module granted the client a slot, and
/// Redis would then drop the grant's reply). Redis calls `H::on_timeout` for
/// `CLIENT UNBLOCK` and `H::on_disconnect` if the client goes away.
pub fn block_client<H: BlockHandler>(ctx: &Context) -> Option<Blocked> {
    // SAFETY: `ctx` is the context of the command being run; the callbacks
    // are `extern "C"` functions of this module that live as long as it.
    unsafe {
        let block = raw::RedisModule_BlockClient?;
        let bc = NonNull::new(block(
            ctx.get_raw(),
            Some(waiter_reply),
            Some(waiter_timeout::<H>),
            Some(free_waiter_reply),
            0,
        ))?;
        if let Some(on_disconnect) = raw::RedisModule_SetDisconnectCallback {
            on_disconnect(bc.as_ptr(), Some(waiter_disconnected::<H>));
        }
        Some(Blocked(bc))
    }
}

/// Ends a wait: the client gets `reply`, or nothing when it already had its
/// reply (timeout) or is gone (disconnect). Call it exactly once per client.
pub fn unblock(blocked: Blocked, reply: Option<WaiterReply>) {
    let privdata = reply.map_or(std::ptr::null_mut(), |r| {
        Box::into_raw(Box::new(r)).cast::<c_void>()
    });
    // SAFETY: `blocked` is a handle Redis gave us and that was not unblocked
    // yet; Redis frees `privdata` through `free_waiter_reply`.
    unsafe {
        if let Some(f) = raw::RedisModule_UnblockClient {
            f(blocked.0.as_ptr(), privdata);
        }
    }
}

/// The blocked client a timeout callback runs for.
fn blocked_of(ctx: *mut raw::RedisModuleCtx) -> Option<Blocked> {
    // SAFETY: `ctx` is the context of a blocked-client callback.
    let bc = unsafe { raw::RedisModule_GetBlockedClientHandle.map(|f| f(ctx)) }?;
    NonNull::new(bc).map(Blocked)
}

/// Replies to a served waiter with what `unblock` gave it.
extern "C" fn waiter_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: std::ffi::c_int,
) -> std::ffi::c_int {
    let context = Context::new(ctx);
    // SAFETY: the private data of our blocked clients is a `WaiterReply`
    // box (or null); Redis frees it after this callback.
    let reply = unsafe { raw::RedisModule_GetBlockedClientPrivateData.map(|f| f(ctx)) }
        .and_then(|p| unsafe { p.cast::<WaiterReply>().as_ref() });
    let reply = match reply {
        Some(WaiterReply::Token(token)) => Ok(RedisValue::Integer(*token)),
        Some(WaiterReply::Tokens(tokens)) => Ok(RedisValue::Array(
            tokens.iter().map(|&t| RedisValue::Integer(t)).collect(),
        )),
        Some(WaiterReply::Error(e)) => Err(RedisError::String(e.clone())),
        Some(WaiterReply::Held(held)) => {
            let stands = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (held.stands)(&context, held)
            }))
            .unwrap_or(false);
            match held.keys.as_slice() {
                _ if !stands => Ok(RedisValue::Null),
                [(_, token)] if !held.many => Ok(RedisValue::Integer(*token)),
                keys => Ok(RedisValue::Array(
                    keys.iter().map(|&(_, t)| RedisValue::Integer(t)).collect(),
                )),
            }
        }
        None => Ok(RedisValue::Null),
    };
    context.reply(reply);
    raw::REDISMODULE_OK as std::ffi::c_int
}

extern "C" fn waiter_timeout<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: std::ffi::c_int,
) -> std::ffi::c_int {
    let context = Context::new(ctx);
    let blocked = blocked_of(ctx);
    let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        H::on_timeout(&context, blocked)
    }))
    .unwrap_or(Ok(RedisValue::Null));
    context.reply(reply);
    raw::REDISMODULE_OK as std::ffi::c_int
}

extern "C" fn waiter_disconnected<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let context = Context::new(ctx);
    if let Some(bc) = NonNull::new(bc) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            H::on_disconnect(&context, Blocked(bc))
        }));
    }
}

extern "C" fn free_waiter_reply(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        // SAFETY: `privdata` is the box `unblock` gave Redis, freed once.
        drop(unsafe { Box::from_raw(privdata.cast::<WaiterReply>()) });
    }
}
