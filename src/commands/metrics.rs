//! UNIQUE.METRICS [MINUTES n] [FORMAT resp|json|prometheus]  ·  UNIQUE.METRICS RESET

use std::ffi::{c_char, c_long};

use redis_module::{Context, RedisResult, RedisString, RedisValue, raw};

use super::parse_int;
use crate::config;
use crate::ffi::now_ms;
use crate::lock::LockError;
use crate::metrics::{self, Counters, Report};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Resp,
    Json,
    Prometheus,
}

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if let [_, reset] = args.as_slice()
        && reset.eq_ignore_ascii_case(b"RESET")
    {
        metrics::global().reset();
        return Ok(RedisValue::SimpleStringStatic("OK"));
    }
    let (minutes, format) = parse_options(args.get(1..).unwrap_or_default())?;
    let report = metrics::report(now_ms(), minutes);
    match format {
        Format::Json => Ok(RedisValue::BulkString(report.to_json())),
        Format::Prometheus => Ok(RedisValue::BulkString(report.to_prometheus())),
        Format::Resp => {
            reply_resp(ctx.get_raw(), &report);
            Ok(RedisValue::NoReply)
        }
    }
}

fn parse_options(options: &[RedisString]) -> Result<(Option<usize>, Format), LockError> {
    let (mut minutes, mut format) = (None, None);
    let mut rest = options.iter();
    while let Some(name) = rest.next() {
        let value: &[u8] = rest.next().ok_or(LockError::Syntax)?;
        if name.eq_ignore_ascii_case(b"MINUTES") && minutes.is_none() {
            let n = usize::try_from(parse_int(value)?).map_err(|_| LockError::NotAnInteger)?;
            if !(1..=config::metrics_minutes()).contains(&n) {
                return Err(LockError::NotAnInteger);
            }
            minutes = Some(n);
        } else if name.eq_ignore_ascii_case(b"FORMAT") && format.is_none() {
            format = Some(match value.to_ascii_lowercase().as_slice() {
                b"resp" => Format::Resp,
                b"json" => Format::Json,
                b"prometheus" => Format::Prometheus,
                _ => return Err(LockError::Syntax),
            });
        } else {
            return Err(LockError::Syntax);
        }
    }
    Ok((minutes, format.unwrap_or(Format::Resp)))
}

/// The map `locks`, `holders`, `total`, `types`, in that order (a flat array
/// on RESP2).
fn reply_resp(ctx: *mut raw::RedisModuleCtx, report: &Report) {
    let key = |name: &str| {
        raw::reply_with_string_buffer(ctx, name.as_ptr().cast::<c_char>(), name.len());
    };
    let counters = |c: &Counters| {
        raw::reply_with_map(ctx, c.0.len() as c_long);
        for (name, n) in c.named() {
            key(name);
            raw::reply_with_long_long(ctx, i64::try_from(n).unwrap_or(i64::MAX));
        }
    };
    raw::reply_with_map(ctx, 4);
    key("locks");
    raw::reply_with_long_long(ctx, report.locks);
    key("holders");
    raw::reply_with_long_long(ctx, report.holders);
    key("total");
    counters(&report.total);
    key("types");
    raw::reply_with_map(ctx, report.types.len() as c_long);
    for (name, c) in &report.types {
        key(name);
        counters(c);
    }
}
