//! What this server has done with locks: counters per lock type and in total,
//! per minute for a window of recent minutes, and the two gauges.
//!
//! The counters are pure data ([`Metrics`]), kept on Redis's main thread,
//! where everything that counts or reports them runs: commands, timers,
//! keyspace events, the type's `unlink2`, INFO. No mutex: the one callback
//! that runs off the main thread, the type's `free` (on a lazy-free thread:
//! FLUSHALL ASYNC, UNLINK), only moves the two gauges, which are atomics.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::{Map, Value, json};

use crate::config;

/// The events counted, in the order every format lists them.
pub const EVENT_NAMES: [&str; 10] = [
    "acquired",
    "renewed",
    "denied",
    "released",
    "unlock_missed",
    "expired",
    "reaped",
    "waited",
    "timed_out",
    "rate_denied",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A new holder.
    Acquired,
    /// A holder renewed.
    Renewed,
    /// A LOCK refused.
    Denied,
    /// UNLOCK of a live holder.
    Released,
    /// UNLOCK that removed nothing.
    UnlockMissed,
    /// A holder removed because its lease ran out.
    Expired,
    /// A holder removed by REAP OWNER.
    Reaped,
    /// A grant after blocking.
    Waited,
    /// A WAIT that ran out.
    TimedOut,
    /// Of the LOCKs refused (counted in `Denied` too), those the key's RATE
    /// refused while the lock had room.
    RateDenied,
}

/// Names beyond `unique.metrics-max-types` count under this one.
pub const OTHER_TYPE: &str = "other";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters(pub [u64; 10]);

/// FNV-1a: these maps hold at most `unique.metrics-max-types` short names,
/// counted on every command, where SipHash would cost more than the rest.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Counters per type name (for a report).
type ByType = HashMap<Box<str>, Counters, BuildHasherDefault<Fnv>>;

impl Counters {
    fn add(&mut self, other: &Counters) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    fn bump(&mut self, event: Event, n: u64) {
        if let Some(c) = self.0.get_mut(event as usize) {
            *c += n;
        }
    }

    pub fn get(&self, event: Event) -> u64 {
        self.0.get(event as usize).copied().unwrap_or(0)
    }

    /// (name, count) in the order of [`EVENT_NAMES`].
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        EVENT_NAMES.iter().copied().zip(self.0)
    }
}

/// The limits that come from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// unique.metrics-max-types
    pub max_types: usize,
    /// unique.metrics-minutes
    pub minutes: usize,
}

impl Limits {
    /// The limits as configured now.
    pub fn configured() -> Self {
        Self {
            max_types: config::metrics_max_types(),
            minutes: config::metrics_minutes(),
        }
    }
}

#[derive(Debug, Default)]
struct Minute {
    /// Minutes since the epoch.
    minute: i64,
    total: Counters,
    /// By the index of the type's name in `Metrics::names`; a type not
    /// counted in this minute is all zeros (or not there yet).
    types: Vec<Counters>,
}

/// The counters. A type's counters, in total and in each minute, are found
/// by the index of its name: a name is looked up once per event (the last
/// one used first, then a map), not once per map of counters.
#[derive(Debug, Default)]
pub struct Metrics {
    total: Counters,
    /// The type names counted so far, in order of appearance.
    names: Vec<Box<str>>,
    /// The index of each of `names`.
    index: HashMap<Box<str>, usize, BuildHasherDefault<Fnv>>,
    /// The index last looked up: most servers count one or two types.
    last: usize,
    /// By the index of the name.
    types: Vec<Counters>,
    /// Oldest first; at most `Limits::minutes` of them.
    minutes: VecDeque<Minute>,
}

/// Counters to report: in total and per type, types sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub locks: i64,
    pub holders: i64,
    pub total: Counters,
    pub types: Vec<(String, Counters)>,
}

/// Counts into `types[i]`, growing `types` to it.
fn bump_index(types: &mut Vec<Counters>, i: usize, event: Event, n: u64) {
    if types.len() <= i {
        types.resize(i + 1, Counters::default());
    }
    if let Some(c) = types.get_mut(i) {
        c.bump(event, n);
    }
}

fn minute_of(now_ms: i64) -> i64 {
    now_ms.div_euclid(60_000)
}

impl Metrics {
    /// Counts `n` of `event` for `lock_type` (`None`: in the total only).
    pub fn record(
        &mut self,
        now_ms: i64,
        lock_type: Option<&str>,
        event: Event,
        n: u64,
        limits: Limits,
    ) {
        if n == 0 {
            return;
        }
        self.total.bump(event, n);
        let i = lock_type.map(|t| self.type_index(t, limits.max_types));
        if let Some(i) = i {
            bump_index(&mut self.types, i, event, n);
        }
        self.bump_minute(now_ms, limits.minutes, i, event, n);
    }

    /// The index of the name to count `lock_type` under: itself while fewer
    /// than `max_types` names are known, else [`OTHER_TYPE`]; added the
    /// first time.
    fn type_index(&mut self, lock_type: &str, max_types: usize) -> usize {
        if self.names.get(self.last).is_some_and(|n| **n == *lock_type) {
            return self.last;
        }
        let i = match self.index.get(lock_type) {
            Some(&i) => i,
            None => {
                let known = self.names.len() - usize::from(self.index.contains_key(OTHER_TYPE));
                let name = if known < max_types {
                    lock_type
                } else {
                    OTHER_TYPE
                };
                match self.index.get(name) {
                    Some(&i) => i,
                    None => {
                        self.names.push(name.into());
                        self.index.insert(name.into(), self.names.len() - 1);
                        self.names.len() - 1
                    }
                }
            }
        };
        self.last = i;
        i
    }

    fn bump_minute(&mut self, now_ms: i64, keep: usize, i: Option<usize>, event: Event, n: u64) {
        let minute = minute_of(now_ms);
        let keep = keep.max(1);
        // Most calls fall in the newest minute with nothing to forget: count
        // there without the walk below (the same result, fewer steps).
        let oldest = minute.saturating_sub(keep as i64 - 1);
        if self.minutes.len() <= keep
            && self.minutes.front().is_some_and(|m| m.minute >= oldest)
            && let Some(m) = self.minutes.back_mut().filter(|m| m.minute == minute)
        {
            m.total.bump(event, n);
            if let Some(i) = i {
                bump_index(&mut m.types, i, event, n);
            }
            return;
        }
        if self.minutes.back().is_none_or(|m| m.minute < minute) {
            self.minutes.push_back(Minute {
                minute,
                ..Minute::default()
            });
        }
        self.forget_before(minute, keep);
        // The clock may step back: that counts into the newest minute.
        if let Some(m) = self.minutes.back_mut() {
            m.total.bump(event, n);
            if let Some(i) = i {
                bump_index(&mut m.types, i, event, n);
            }
        }
    }

    fn forget_before(&mut self, minute: i64, keep: usize) {
        let oldest = minute.saturating_sub(keep.max(1) as i64 - 1);
        while self.minutes.front().is_some_and(|m| m.minute < oldest)
            || self.minutes.len() > keep.max(1)
        {
            self.minutes.pop_front();
        }
    }

    /// Zeroes every counter, per-minute ones too, and forgets the type names.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// The counters since load or RESET (`minutes: None`), or summed over the
    /// current minute and the `n - 1` before it.
    pub fn report(&self, now_ms: i64, minutes: Option<usize>) -> Report {
        let (total, types) = match minutes {
            None => (
                self.total,
                self.names
                    .iter()
                    .cloned()
                    .zip(self.types.iter().copied())
                    .collect::<ByType>(),
            ),
            Some(n) => {
                let oldest = minute_of(now_ms).saturating_sub(n as i64 - 1);
                let mut total = Counters::default();
                let mut types = ByType::default();
                for m in self.minutes.iter().filter(|m| m.minute >= oldest) {
                    total.add(&m.total);
                    // A type counted in no minute of the window is left out.
                    for (name, c) in self.names.iter().zip(m.types.iter()) {
                        if *c != Counters::default() {
                            types.entry(name.clone()).or_default().add(c);
                        }
                    }
                }
                (total, types)
            }
        };
        let mut types: Vec<(String, Counters)> =
            types.into_iter().map(|(k, v)| (k.into(), v)).collect();
        types.sort_by(|a, b| a.0.cmp(&b.0));
        Report {
            locks: 0,
            holders: 0,
            total,
            types,
        }
    }
}

impl Report {
    fn counters_json(c: &Counters) -> Value {
        Value::Object(c.named().map(|(k, v)| (k.to_string(), json!(v))).collect())
    }

    /// The same structure as the RESP reply, as JSON text.
    pub fn to_json(&self) -> String {
        let types: Map<String, Value> = self
            .types
            .iter()
            .map(|(name, c)| (name.clone(), Self::counters_json(c)))
            .collect();
        json!({
            "locks": self.locks,
            "holders": self.holders,
            "total": Self::counters_json(&self.total),
            "types": types,
        })
        .to_string()
    }

    /// The Prometheus text exposition format.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP unique_events_total Lock events on this server, by lock type and event.\n",
        );
        out.push_str("# TYPE unique_events_total counter\n");
        for (name, c) in &self.types {
            // A missed UNLOCK names no type: its series is the one below.
            for (event, n) in c.named().filter(|(event, _)| *event != "unlock_missed") {
                // Type names are [A-Za-z0-9_:.-]: nothing to escape in a label.
                let _ = writeln!(
                    out,
                    "unique_events_total{{type=\"{name}\",event=\"{event}\"}} {n}"
                );
            }
        }
        out.push_str(
            "# HELP unique_unlock_missed_total UNLOCK calls that removed nothing (they name no lock type).\n",
        );
        out.push_str("# TYPE unique_unlock_missed_total counter\n");
        let _ = writeln!(
            out,
            "unique_unlock_missed_total {}",
            self.total.get(Event::UnlockMissed)
        );
        out.push_str("# HELP unique_locks Keys of type uniq-lock.\n");
        out.push_str("# TYPE unique_locks gauge\n");
        let _ = writeln!(out, "unique_locks {}", self.locks);
        out.push_str("# HELP unique_holders Holders of all locks.\n");
        out.push_str("# TYPE unique_holders gauge\n");
        let _ = writeln!(out, "unique_holders {}", self.holders);
        out
    }
}

// ---- the server's metrics ----------------------------------------------

thread_local! {
    /// The counters, on Redis's main thread.
    static METRICS: RefCell<Metrics> = RefCell::new(Metrics::default());
}

/// Keys of type uniq-lock, and holders in memory, on this server.
static LOCKS: AtomicI64 = AtomicI64::new(0);
static HOLDERS: AtomicI64 = AtomicI64::new(0);

fn with_metrics<T>(f: impl FnOnce(&mut Metrics) -> T) -> T {
    METRICS.with(|m| f(&mut m.borrow_mut()))
}

/// Counts one event for one holder of `lock_type` (`None`: total only).
pub fn record(now_ms: i64, lock_type: Option<&str>, event: Event) {
    let limits = Limits::configured();
    with_metrics(|m| m.record(now_ms, lock_type, event, 1, limits));
}

/// Sets every counter to 0 and forgets the type names seen (METRICS RESET).
pub fn reset() {
    with_metrics(Metrics::reset);
}

/// A lock value came into memory (created, loaded, copied) with `holders`.
pub fn lock_added(holders: usize) {
    LOCKS.fetch_add(1, Ordering::Relaxed);
    holders_changed(0, holders);
}

/// A lock value left memory with `holders`.
pub fn lock_freed(holders: usize) {
    LOCKS.fetch_sub(1, Ordering::Relaxed);
    holders_changed(holders, 0);
}

/// The number of holders of a lock went from `before` to `after`.
pub fn holders_changed(before: usize, after: usize) {
    // Most calls change nothing (a renewal, a denial, a lock freed empty):
    // those skip the atomic add, a locked read-modify-write that also
    // orders every store before it.
    if before != after {
        HOLDERS.fetch_add(after as i64 - before as i64, Ordering::Relaxed);
    }
}

/// The report with the current gauges.
pub fn report(now_ms: i64, minutes: Option<usize>) -> Report {
    let mut report = with_metrics(|m| m.report(now_ms, minutes));
    report.locks = LOCKS.load(Ordering::Relaxed);
    report.holders = HOLDERS.load(Ordering::Relaxed);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const T0: i64 = 1_700_000_000_000 / MIN * MIN; // the start of a minute
    const LIMITS: Limits = Limits {
        max_types: 3,
        minutes: 5,
    };

    fn counts(pairs: &[(Event, u64)]) -> Counters {
        let mut c = Counters::default();
        for (e, n) in pairs {
            c.bump(*e, *n);
        }
        c
    }

    #[test]
    fn counts_per_type_and_in_total() {
        let mut m = Metrics::default();
        m.record(T0, Some("until_executed"), Event::Acquired, 1, LIMITS);
        m.record(T0, Some("until_executed"), Event::Acquired, 1, LIMITS);
        m.record(T0, Some("lock"), Event::Denied, 1, LIMITS);
        m.record(T0, None, Event::UnlockMissed, 1, LIMITS);
        let r = m.report(T0, None);
        assert_eq!(
            r.total,
            counts(&[
                (Event::Acquired, 2),
                (Event::Denied, 1),
                (Event::UnlockMissed, 1)
            ])
        );
        assert_eq!(
            r.types,
            [
                ("lock".to_string(), counts(&[(Event::Denied, 1)])),
                (
                    "until_executed".to_string(),
                    counts(&[(Event::Acquired, 2)])
                ),
            ]
        );
    }

    #[test]
    fn type_names_beyond_the_cap_count_as_other() {
        let mut m = Metrics::default();
        for t in ["a", "b", "c", "d", "e", "a"] {
            m.record(T0, Some(t), Event::Acquired, 1, LIMITS);
        }
        let names: Vec<(String, u64)> = m
            .report(T0, None)
            .types
            .iter()
            .map(|(n, c)| (n.clone(), c.get(Event::Acquired)))
            .collect();
        assert_eq!(
            names,
            [
                ("a".into(), 2),
                ("b".into(), 1),
                ("c".into(), 1),
                ("other".into(), 2)
            ]
        );
    }

    #[test]
    fn minutes_sum_the_current_and_previous_minutes_and_forget_old_ones() {
        let mut m = Metrics::default();
        for i in 0..8 {
            m.record(
                T0 + i * MIN + 5,
                Some("t"),
                Event::Released,
                i as u64 + 1,
                LIMITS,
            );
        }
        let now = T0 + 7 * MIN + 30_000;
        assert_eq!(m.report(now, Some(1)).total.get(Event::Released), 8);
        assert_eq!(m.report(now, Some(2)).total.get(Event::Released), 8 + 7);
        // Only 5 minutes are kept: 8 + 7 + 6 + 5 + 4.
        assert_eq!(m.report(now, Some(5)).total.get(Event::Released), 30);
        assert_eq!(m.report(now, Some(5)).types[0].1.get(Event::Released), 30);
        assert_eq!(
            m.report(now, None).total.get(Event::Released),
            36,
            "since load: everything"
        );
        // Nothing happened in the last minute once it has passed.
        assert_eq!(
            m.report(now + 2 * MIN, Some(1)).total.get(Event::Released),
            0
        );
    }

    #[test]
    fn a_clock_step_back_counts_into_the_newest_minute() {
        let mut m = Metrics::default();
        m.record(T0 + 3 * MIN, Some("t"), Event::Acquired, 1, LIMITS);
        m.record(T0, Some("t"), Event::Acquired, 1, LIMITS);
        assert_eq!(
            m.report(T0 + 3 * MIN, Some(1)).total.get(Event::Acquired),
            2
        );
    }

    #[test]
    fn reset_zeroes_and_forgets_types() {
        let mut m = Metrics::default();
        for t in ["a", "b", "c"] {
            m.record(T0, Some(t), Event::Acquired, 1, LIMITS);
        }
        m.reset();
        assert_eq!(
            m.report(T0, None),
            Report {
                locks: 0,
                holders: 0,
                total: Counters::default(),
                types: vec![]
            }
        );
        assert_eq!(m.report(T0, Some(5)).total, Counters::default());
        m.record(T0, Some("d"), Event::Acquired, 1, LIMITS);
        assert_eq!(
            m.report(T0, None).types[0].0,
            "d",
            "the cap counts names seen since RESET"
        );
    }

    #[test]
    fn json_has_the_same_structure() {
        let mut m = Metrics::default();
        m.record(T0, Some("t"), Event::Expired, 3, LIMITS);
        let mut r = m.report(T0, None);
        r.locks = 2;
        r.holders = 5;
        let v: Value = serde_json::from_str(&r.to_json()).expect("valid JSON");
        assert_eq!(v["locks"], 2);
        assert_eq!(v["holders"], 5);
        assert_eq!(v["total"]["expired"], 3);
        assert_eq!(v["total"]["timed_out"], 0);
        assert_eq!(v["types"]["t"]["expired"], 3);
        assert_eq!(
            v["total"].as_object().map(|o| o.len()),
            Some(EVENT_NAMES.len())
        );
    }

    #[test]
    fn prometheus_text_exposition() {
        let mut m = Metrics::default();
        m.record(T0, Some("until_executed"), Event::Acquired, 4, LIMITS);
        let mut r = m.report(T0, None);
        r.locks = 1;
        r.holders = 4;
        let text = r.to_prometheus();
        assert!(text.contains("# TYPE unique_events_total counter\n"));
        assert!(
            text.contains("unique_events_total{type=\"until_executed\",event=\"acquired\"} 4\n")
        );
        assert!(
            text.contains("unique_events_total{type=\"until_executed\",event=\"timed_out\"} 0\n")
        );
        assert!(text.contains("# TYPE unique_locks gauge\nunique_locks 1\n"));
        assert!(text.contains("# TYPE unique_holders gauge\nunique_holders 4\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap_or_default();
            assert!(value.parse::<i64>().is_ok(), "{line}");
        }
    }
}
