//! UNIQUE.METRICS [MINUTES n] [FORMAT resp|json|prometheus]  ·  UNIQUE.METRICS RESET

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::reply::Stream;
use super::{ArgError, is_keyword, parse_int};
use crate::config;
use crate::ffi::command_now_ms;
use crate::metrics::{self, Counters, Report};

super::command!(with_args run);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Resp,
    Json,
    Prometheus,
}

pub fn run(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if let [_, reset] = args.as_slice()
        && is_keyword(reset, b"RESET")
    {
        metrics::reset();
        return Ok(RedisValue::SimpleStringStatic("OK"));
    }
    let (minutes, format) = parse_options(args.get(1..).unwrap_or_default())?;
    let report = metrics::report(command_now_ms(), minutes);
    match format {
        Format::Json => Ok(RedisValue::BulkString(report.to_json())),
        Format::Prometheus => Ok(RedisValue::BulkString(report.to_prometheus())),
        Format::Resp => {
            reply_resp(&Stream::new(ctx), &report);
            Ok(RedisValue::NoReply)
        }
    }
}

fn parse_options(options: &[RedisString]) -> Result<(Option<usize>, Format), ArgError> {
    let (mut minutes, mut format) = (None, None);
    let mut rest = options.iter();
    while let Some(name) = rest.next() {
        let value: &[u8] = rest.next().ok_or(ArgError::Syntax)?;
        if is_keyword(name, b"MINUTES") && minutes.is_none() {
            let n = parse_int(value)?;
            let kept = config::metrics_minutes();
            let n = usize::try_from(n)
                .ok()
                .filter(|n| (1..=kept).contains(n))
                .ok_or(ArgError::Minutes(kept))?;
            minutes = Some(n);
        } else if is_keyword(name, b"FORMAT") && format.is_none() {
            format = Some(match value.to_ascii_lowercase().as_slice() {
                b"resp" => Format::Resp,
                b"json" => Format::Json,
                b"prometheus" => Format::Prometheus,
                _ => return Err(ArgError::Syntax),
            });
        } else {
            return Err(ArgError::Syntax);
        }
    }
    Ok((minutes, format.unwrap_or(Format::Resp)))
}

/// The map `locks`, `holders`, `total`, `types`, in that order (a flat array
/// on RESP2).
fn reply_resp(reply: &Stream<'_>, report: &Report) {
    let counters = |c: &Counters| {
        reply.map(c.0.len());
        for (name, n) in c.named() {
            reply.bulk(name.as_bytes());
            reply.count(n);
        }
    };
    reply.map(4);
    reply.bulk(b"locks");
    reply.int(report.locks);
    reply.bulk(b"holders");
    reply.int(report.holders);
    reply.bulk(b"total");
    counters(&report.total);
    reply.bulk(b"types");
    reply.map(report.types.len());
    for (name, c) in &report.types {
        reply.bulk(name.as_bytes());
        counters(c);
    }
}
