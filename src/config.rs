//! The module's configuration (`unique.<name>`): settable as module arguments
//! (with or without the prefix), in redis.conf and with CONFIG SET. Redis
//! enforces the ranges given at registration (`lib.rs`) for redis.conf and
//! CONFIG SET; `parse_args` checks the module arguments.
//!
//! It imports nothing from the crate: what reads an option lives with its
//! user (the metrics limits in `metrics.rs`), and registering the options
//! with Redis lives in `lib.rs`.

use std::sync::atomic::{AtomicI64, Ordering};

/// A numeric option: its name without the `unique.` prefix, default and range.
pub struct Numeric {
    pub name: &'static str,
    pub default: i64,
    pub min: i64,
    pub max: i64,
    pub value: AtomicI64,
}

impl Numeric {
    const fn new(name: &'static str, default: i64, min: i64, max: i64) -> Self {
        Self {
            name,
            default,
            min,
            max,
            value: AtomicI64::new(default),
        }
    }

    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }

    fn get_usize(&self) -> usize {
        usize::try_from(self.get()).unwrap_or(0)
    }
}

/// Background reaper period in ms; 0 turns it off.
pub static REAP_INTERVAL: Numeric = Numeric::new("reap-interval", 100, 0, 60_000);
/// Lock keys examined per background tick.
pub static REAP_BATCH: Numeric = Numeric::new("reap-batch", 100, 1, 100_000);
/// The largest META accepted, in bytes.
pub static MAX_META_BYTES: Numeric = Numeric::new("max-meta-bytes", 16 * 1024, 0, 1024 * 1024);
/// How many minutes of per-minute counters are kept.
pub static METRICS_MINUTES: Numeric = Numeric::new("metrics-minutes", 60, 1, 1440);
/// Distinct type names counted before `other`.
pub static METRICS_MAX_TYPES: Numeric = Numeric::new("metrics-max-types", 64, 1, 4096);

pub fn max_meta_bytes() -> usize {
    MAX_META_BYTES.get_usize()
}

pub fn reap_batch() -> usize {
    REAP_BATCH.get_usize().max(1)
}

pub fn metrics_minutes() -> usize {
    METRICS_MINUTES.get_usize().max(1)
}

pub fn metrics_max_types() -> usize {
    METRICS_MAX_TYPES.get_usize().max(1)
}

// ---------------------------------------------------------------------------
// Module arguments, read by hand: the crate's configuration macro ignores
// an unknown module argument and does not check ranges, so a typo or an
// out-of-range value would be dropped in silence. Here each one is read,
// named in the error, and fails the load.
// ---------------------------------------------------------------------------

/// Every option, in the order of the docs.
pub static ALL: [&Numeric; 5] = [
    &REAP_INTERVAL,
    &REAP_BATCH,
    &MAX_META_BYTES,
    &METRICS_MINUTES,
    &METRICS_MAX_TYPES,
];

/// The prefix Redis gives the module's configuration names.
pub const PREFIX: &str = "unique.";

fn accepted() -> String {
    let names: Vec<String> = ALL
        .iter()
        .map(|n| format!("{} ({} to {})", n.name, n.min, n.max))
        .collect();
    format!(
        "accepted: {}, each followed by its value, with or without the `{PREFIX}` prefix",
        names.join(", ")
    )
}

/// The values that module arguments (`loadmodule ... reap-interval 50
/// unique.reap-batch 10`) give, one per option at most. An unknown name, a
/// missing or bad value, or an option given twice is an error: the text to
/// log, naming the argument and what is accepted.
pub fn parse_args(args: &[&[u8]]) -> Result<Vec<(&'static Numeric, i64)>, String> {
    let mut out: Vec<(&'static Numeric, i64)> = Vec::new();
    let mut rest = args;
    while let [name, tail @ ..] = rest {
        let text = String::from_utf8_lossy(name);
        let bare = text
            .get(..PREFIX.len())
            .filter(|p| p.eq_ignore_ascii_case(PREFIX))
            .map_or(&*text, |_| &text[PREFIX.len()..]);
        let Some(option) = ALL.iter().find(|n| n.name.eq_ignore_ascii_case(bare)) else {
            return Err(format!("unknown module argument `{text}`; {}", accepted()));
        };
        let Some((value, tail)) = tail.split_first() else {
            return Err(format!(
                "module argument `{text}` has no value ({PREFIX}{} takes {} to {}); {}",
                option.name,
                option.min,
                option.max,
                accepted()
            ));
        };
        let value_text = String::from_utf8_lossy(value);
        let parsed = value_text
            .parse::<i64>()
            .ok()
            .filter(|v| (option.min..=option.max).contains(v));
        let Some(parsed) = parsed else {
            return Err(format!(
                "module argument `{text} {value_text}`: {PREFIX}{} takes an integer from {} to {}; {}",
                option.name,
                option.min,
                option.max,
                accepted()
            ));
        };
        if out.iter().any(|(n, _)| std::ptr::eq(*n, *option)) {
            return Err(format!(
                "module argument `{text}` sets {PREFIX}{} a second time; {}",
                option.name,
                accepted()
            ));
        }
        out.push((option, parsed));
        rest = tail;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Vec<(&'static str, i64)>, String> {
        let raw: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_args(&raw).map(|v| v.into_iter().map(|(n, x)| (n.name, x)).collect())
    }

    #[test]
    fn both_spellings_any_case() {
        assert_eq!(parse(&[]), Ok(vec![]));
        assert_eq!(
            parse(&[
                "unique.reap-interval",
                "50",
                "REAP-BATCH",
                "7",
                "Unique.Max-Meta-Bytes",
                "0"
            ]),
            Ok(vec![
                ("reap-interval", 50),
                ("reap-batch", 7),
                ("max-meta-bytes", 0)
            ])
        );
    }

    #[test]
    fn bad_arguments_name_themselves_and_what_is_accepted() {
        for (args, start) in [
            (
                &["reap-intervall", "1"][..],
                "unknown module argument `reap-intervall`",
            ),
            (&["unique."], "unknown module argument `unique.`"),
            (
                &["reap-interval"],
                "module argument `reap-interval` has no value",
            ),
            (
                &["reap-interval", "60001"],
                "module argument `reap-interval 60001`: unique.reap-interval takes an integer from 0 to 60000",
            ),
            (
                &["reap-interval", "-1"],
                "module argument `reap-interval -1`",
            ),
            (
                &["reap-interval", " 5"],
                "module argument `reap-interval  5`",
            ),
            (
                &["reap-interval", "5", "unique.REAP-interval", "6"],
                "module argument `unique.REAP-interval` sets unique.reap-interval a second time",
            ),
        ] {
            let err = parse(args).expect_err("an error");
            assert!(err.starts_with(start), "{args:?}: {err}");
            assert!(err.contains("metrics-max-types (1 to 4096)"), "{err}");
        }
    }
}
