//! UNIQUE.LOCKEDBY key \[WITHMETA\] [CURSOR cursor] [COUNT n]

use std::ops::Deref;

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::reply::Stream;
use super::{ArgError, is_keyword, parse_int};
use crate::codec::NO_EXPIRY;
use crate::datatype::LockKey;
use crate::engine::Holder;
use crate::ffi::command_now_ms;

super::command!(in_place run_in_place);

/// Holders a page gives when CURSOR comes without COUNT.
const DEFAULT_COUNT: usize = 100;

/// What a LOCKEDBY call asks for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Options {
    with_meta: bool,
    /// `Some((cursor, count))`: one page, as SSCAN gives.
    page: Option<(usize, usize)>,
}

fn parse_options<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Options, ArgError> {
    let mut opts = Options::default();
    let (mut cursor, mut count) = (None, None);
    let mut rest = args.iter();
    while let Some(name) = rest.next() {
        let is = |option: &str| is_keyword(name, option.as_bytes());
        if is("WITHMETA") && !opts.with_meta {
            opts.with_meta = true;
            continue;
        }
        let value: &[u8] = rest.next().ok_or(ArgError::Syntax)?;
        let positive = |min: i64| {
            parse_int(value)
                .ok()
                .filter(|&n| n >= min)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or(ArgError::NotAnInteger)
        };
        if is("CURSOR") && cursor.is_none() {
            cursor = Some(positive(0)?);
        } else if is("COUNT") && count.is_none() {
            count = Some(positive(1)?);
        } else {
            return Err(ArgError::Syntax);
        }
    }
    opts.page = match (cursor, count) {
        (None, None) => None,
        (Some(cursor), count) => Some((cursor, count.unwrap_or(DEFAULT_COUNT))),
        (None, Some(_)) => return Err(ArgError::Syntax),
    };
    Ok(opts)
}

/// LOCKEDBY on its arguments read in place (`key_name` is `args[1]`).
///
/// Read-only: expired holders are hidden, never removed, so this is right on
/// a replica too.
pub fn run_in_place<A: Deref<Target = [u8]>>(
    ctx: &Context,
    key_name: &RedisString,
    args: &[A],
) -> RedisResult {
    let [_, _, options @ ..] = args else {
        return Err(RedisError::WrongArity);
    };
    let opts = parse_options(options)?;
    let key = LockKey::open(ctx, key_name, false);
    let lock = match &key {
        Some(key) => key.lock()?,
        None => None,
    };
    let now = command_now_ms();
    let reply = Stream::new(ctx);
    let one = |holder: &Holder| {
        if opts.with_meta {
            reply_holder(&reply, holder, now);
        } else {
            reply.bulk(&holder.jid());
        }
    };
    match opts.page {
        None => {
            let live = || lock.into_iter().flat_map(|l| l.live_holders(now));
            reply.array(live().count());
            live().for_each(one);
        }
        // A page of a big lock costs its COUNT, not the lock's size.
        Some((cursor, count)) => {
            let (next, page) = lock.map_or((0, Vec::new()), |l| l.holders_page(cursor, count));
            let live: Vec<&Holder> = page.into_iter().filter(|h| h.is_live(now)).collect();
            reply.array(2);
            reply.bulk(next.to_string().as_bytes());
            reply.array(live.len());
            live.into_iter().for_each(one);
        }
    }
    Ok(RedisValue::NoReply)
}

/// One holder as a map (RESP3), which Redis sends as a flat array on RESP2.
fn reply_holder(reply: &Stream<'_>, h: &Holder, now: i64) {
    reply.map(10);
    reply.bulk(b"jid");
    reply.bulk(&h.jid());
    reply.bulk(b"token");
    reply.int(h.token());
    reply.bulk(b"acquired_at");
    reply.int(h.acquired_at());
    reply.bulk(b"expires_at");
    reply.int(h.expires_at().unwrap_or(NO_EXPIRY));
    reply.bulk(b"ttl");
    reply.int(h.ttl(now).unwrap_or(NO_EXPIRY));
    reply.bulk(b"type");
    reply.bulk(h.lock_type().as_bytes());
    reply.bulk(b"owner");
    reply.optional_bulk(h.owner());
    reply.bulk(b"meta");
    reply.optional_bulk(h.meta());
    reply.bulk(b"group");
    reply.optional_bulk(h.group());
    reply.bulk(b"mode");
    reply.optional_bulk(h.mode().map(|m| m.name().as_bytes()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, ArgError> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_options(&args)
    }

    #[test]
    fn options() {
        assert_eq!(parse(&[]), Ok(Options::default()));
        assert_eq!(
            parse(&["withmeta", "cursor", "0"]),
            Ok(Options {
                with_meta: true,
                page: Some((0, DEFAULT_COUNT))
            })
        );
        assert_eq!(
            parse(&["COUNT", "5", "CURSOR", "12"]).map(|o| o.page),
            Ok(Some((12, 5)))
        );
        for bad in [
            &["COUNT", "5"][..],
            &["WITHMETA", "WITHMETA"],
            &["CURSOR"],
            &["CURSOR", "1", "CURSOR", "2"],
            &["NOPE"],
        ] {
            assert_eq!(parse(bad).err(), Some(ArgError::Syntax), "{bad:?}");
        }
        for bad in [
            &["CURSOR", "-1"][..],
            &["CURSOR", "0", "COUNT", "0"],
            &["CURSOR", "x"],
        ] {
            assert_eq!(parse(bad).err(), Some(ArgError::NotAnInteger), "{bad:?}");
        }
    }
}
