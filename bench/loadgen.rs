//! The load generator of `make bench`: one command, many connections,
//! pipelining, and keys that never repeat.
//!
//! redis-benchmark draws its keys at random, so a run of grants renews some
//! locks instead of granting them and a run of releases misses some keys.
//! Here `{}` in an argument becomes a sequence number (12 digits, zero
//! padded) that every request takes in turn, so that each grant is on a fresh
//! key and each release finds the key its number names. Both sides of every
//! comparison are run by this same tool.
//!
//! ```text
//! loadgen --port 6379 [--clients 50] [--pipeline 1] [--requests 200000]
//!         [--from 0] [--cycle 0] -- UNIQUE.LOCK lock:{} job TTL 60000 [--and ARG...]
//! ```
//!
//! Commands separated by `--and` take turns (request i is command i mod k,
//! numbered i / k: a grant and the release of the same jid, in one batch when
//! the pipeline is a multiple of k). `--cycle M` numbers the requests within
//! M instead (a scrambled walk over 0..M, each number as often: renewals of M
//! existing holders in no particular order).
//!
//! One thread serves every connection in turn, as redis-benchmark's event
//! loop does: each connection has one batch of `--pipeline` requests in
//! flight; when its replies are in, it sends the next. It prints one JSON
//! line: requests per second, latency percentiles (from a batch's write to
//! its last reply, for each request in it) and the count of each kind of
//! reply, so that a caller can check that every grant was granted and every
//! release released.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

const DIGITS: usize = 12;

struct Options {
    port: u16,
    clients: usize,
    pipeline: usize,
    requests: u64,
    from: u64,
    cycle: u64,
    args: Vec<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: loadgen --port N [--clients 50] [--pipeline 1] [--requests 200000] [--from 0] \
         [--cycle 0] -- ARG... [--and ARG...]"
    );
    std::process::exit(2)
}

fn options() -> Options {
    let mut o = Options {
        port: 6379,
        clients: 50,
        pipeline: 1,
        requests: 200_000,
        from: 0,
        cycle: 0,
        args: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            o.args = it.by_ref().collect();
            break;
        }
        let v = it.next().unwrap_or_else(|| usage());
        let n: u64 = v.parse().unwrap_or_else(|_| usage());
        match a.as_str() {
            "--port" => o.port = u16::try_from(n).unwrap_or_else(|_| usage()),
            "--clients" => o.clients = n.max(1) as usize,
            "--pipeline" => o.pipeline = n.max(1) as usize,
            "--requests" => o.requests = n,
            "--from" => o.from = n,
            "--cycle" => o.cycle = n,
            _ => usage(),
        }
    }
    if o.args.is_empty() {
        usage()
    }
    o
}

/// The RESP encoding of the command with a hole of `DIGITS` bytes for each
/// `{}`; `holes` are their offsets.
struct Template {
    bytes: Vec<u8>,
    holes: Vec<usize>,
}

impl Template {
    fn new(args: &[String]) -> Self {
        let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
        let mut holes = Vec::new();
        for a in args {
            let parts: Vec<&str> = a.split("{}").collect();
            let len = a.len() + (parts.len() - 1) * (DIGITS - 2);
            bytes.extend_from_slice(format!("${len}\r\n").as_bytes());
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    holes.push(bytes.len());
                    bytes.extend_from_slice(&[b'0'; DIGITS]);
                }
                bytes.extend_from_slice(p.as_bytes());
            }
            bytes.extend_from_slice(b"\r\n");
        }
        Self { bytes, holes }
    }

    fn write(&self, out: &mut Vec<u8>, n: u64) {
        let start = out.len();
        out.extend_from_slice(&self.bytes);
        for &h in &self.holes {
            let mut v = n;
            for d in out[start + h..start + h + DIGITS].iter_mut().rev() {
                *d = b'0' + (v % 10) as u8;
                v /= 10;
            }
        }
    }
}

#[derive(Default)]
struct Tally {
    ints: u64,
    zeros: u64,
    nulls: u64,
    errors: u64,
    other: u64,
    first_error: Option<String>,
}

/// The end of the line that starts at `pos`.
fn line(buf: &[u8], pos: usize) -> Option<usize> {
    buf.get(pos..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| pos + i)
}

fn number(bytes: &[u8]) -> i64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Parses one reply at `pos`: where the next one starts, or `None` when the
/// buffer does not hold all of it yet.
fn reply(buf: &[u8], pos: usize, tally: &mut Tally, top: bool) -> Option<usize> {
    let end = line(buf, pos)?;
    let kind = *buf.get(pos)?;
    let body = &buf[pos + 1..end];
    let next = end + 2;
    let count = |t: &mut Tally, f: fn(&mut Tally)| {
        if top {
            f(t)
        }
    };
    match kind {
        b':' => {
            let zero = number(body) == 0;
            count(
                tally,
                if zero {
                    |t| t.zeros += 1
                } else {
                    |t| t.ints += 1
                },
            );
            Some(next)
        }
        b'-' => {
            if tally.first_error.is_none() {
                tally.first_error = Some(String::from_utf8_lossy(body).into_owned());
            }
            count(tally, |t| t.errors += 1);
            Some(next)
        }
        b'$' => {
            let n = number(body);
            if n < 0 {
                count(tally, |t| t.nulls += 1);
                return Some(next);
            }
            let after = next + n as usize + 2;
            (buf.len() >= after).then(|| {
                count(tally, |t| t.other += 1);
                after
            })
        }
        b'*' => {
            let n = number(body);
            if n < 0 {
                count(tally, |t| t.nulls += 1);
                return Some(next);
            }
            let mut at = next;
            for _ in 0..n {
                at = reply(buf, at, tally, false)?;
            }
            count(tally, |t| t.other += 1);
            Some(at)
        }
        b'_' => {
            count(tally, |t| t.nulls += 1);
            Some(next)
        }
        _ => {
            count(tally, |t| t.other += 1);
            Some(next)
        }
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    in_flight: usize,
    batch: usize,
    sent_at: Instant,
}

fn main() {
    let o = options();
    let templates: Vec<Template> = o.args.split(|a| a == "--and").map(Template::new).collect();
    let kinds = templates.len() as u64;
    // A multiplier prime to any cycle below it: a walk over every number.
    const SCRAMBLE: u64 = 2_654_435_761;
    let number = |seq: u64| {
        let k = seq / kinds;
        o.from
            + if o.cycle > 0 {
                (u128::from(k % o.cycle) * u128::from(SCRAMBLE) % u128::from(o.cycle)) as u64
            } else {
                k
            }
    };
    let mut conns: Vec<Conn> = (0..o.clients)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", o.port)).unwrap_or_else(|e| {
                eprintln!("loadgen: cannot connect to port {}: {e}", o.port);
                std::process::exit(1)
            });
            let _ = stream.set_nodelay(true);
            Conn {
                stream,
                buf: Vec::with_capacity(1 << 16),
                in_flight: 0,
                batch: 0,
                sent_at: Instant::now(),
            }
        })
        .collect();
    let mut next = 0u64;
    let mut tally = Tally::default();
    let mut latencies: Vec<u32> = Vec::with_capacity(o.requests as usize);
    let longest = templates.iter().map(|t| t.bytes.len()).max().unwrap_or(0);
    let mut out = Vec::with_capacity(longest * o.pipeline);
    let mut chunk = vec![0u8; 1 << 16];

    let send = |c: &mut Conn, next: &mut u64, out: &mut Vec<u8>| {
        let n = (o.requests - *next).min(o.pipeline as u64);
        if n == 0 {
            return;
        }
        out.clear();
        for seq in *next..*next + n {
            if let Some(t) = templates.get((seq % kinds) as usize) {
                t.write(out, number(seq));
            }
        }
        *next += n;
        c.in_flight = n as usize;
        c.batch = n as usize;
        c.sent_at = Instant::now();
        c.stream.write_all(out).unwrap_or_else(|e| {
            eprintln!("loadgen: write: {e}");
            std::process::exit(1)
        });
    };

    let start = Instant::now();
    for c in conns.iter_mut() {
        send(c, &mut next, &mut out);
    }
    loop {
        let mut busy = false;
        for c in conns.iter_mut().filter(|c| c.in_flight > 0) {
            busy = true;
            let mut pos = 0;
            while c.in_flight > 0 {
                match reply(&c.buf, pos, &mut tally, true) {
                    Some(p) => {
                        pos = p;
                        c.in_flight -= 1;
                    }
                    None => {
                        c.buf.drain(..pos);
                        pos = 0;
                        let n = c.stream.read(&mut chunk).unwrap_or(0);
                        if n == 0 {
                            eprintln!("loadgen: the server closed the connection");
                            std::process::exit(1)
                        }
                        c.buf.extend_from_slice(&chunk[..n]);
                    }
                }
            }
            c.buf.drain(..pos);
            let us = c.sent_at.elapsed().as_micros().min(u32::MAX as u128) as u32;
            latencies.extend(std::iter::repeat_n(us, c.batch));
            send(c, &mut next, &mut out);
        }
        if !busy {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(i).map_or(0.0, |&us| f64::from(us) / 1000.0)
    };
    let first_error = tally
        .first_error
        .as_deref()
        .map_or("null".to_string(), |e| format!("{e:?}"));
    println!(
        "{{\"rps\": {:.1}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"seconds\": {:.3}, \
         \"replies\": {{\"int\": {}, \"zero\": {}, \"null\": {}, \"error\": {}, \"other\": {}}}, \
         \"first_error\": {}}}",
        o.requests as f64 / secs,
        pct(0.5),
        pct(0.99),
        secs,
        tally.ints,
        tally.zeros,
        tally.nulls,
        tally.errors,
        tally.other,
        first_error
    );
}
