//! A key's rate: `RATE n PER ms [BURST b]`, decided by GCRA (the generic cell
//! rate algorithm), exactly and in constant memory.
//!
//! GCRA keeps one number per key, the theoretical arrival time (TAT): when
//! the key's spending would be back to nothing if no grant came. A grant at
//! `now` is allowed while `TAT - now <= tau` and moves the TAT on by one
//! emission interval `T`. Here `T = PER / n` and `tau = BURST * T`.
//!
//! Times are counted in units of `1/n` ms, so `T` is exactly `PER` units and
//! nothing is rounded: `now` is `now_ms * n`. The guarantee follows. Take
//! grants `t_1 < ... < t_k` inside a window of `PER` ms, half open. The
//! TAT after grant `i` is at least `t_1 + i*T`. Grant `k` needs
//! `t_k >= TAT_{k-1} - tau >= t_1 + (k-1)*T - tau`, and `t_k - t_1 < PER =
//! n*T`. Together these give `k < n + BURST + 1`. So no key grants more
//! than `n + BURST` in any window of `PER` ms, and under steady demand it
//! grants one every `T`.
//! The engine's property tests check both on random arrivals.

/// The largest `n` of RATE and of BURST: every product below stays in i64.
pub const MAX_RATE: i64 = 1_000_000;
/// The longest PER, about 34.8 years (the longest module timer, so a waiter
/// can always be woken at the next allowed instant).
pub const MAX_PER_MS: i64 = 1 << 40;

/// What a call asks: at most `n` grants per `per` ms, plus `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub n: i64,
    pub per: i64,
    pub burst: i64,
}

impl RateLimit {
    /// A limit within the bounds (n and PER at least 1, BURST at least 0).
    pub fn new(n: i64, per: i64, burst: i64) -> Option<Self> {
        ((1..=MAX_RATE).contains(&n)
            && (1..=MAX_PER_MS).contains(&per)
            && (0..=MAX_RATE).contains(&burst))
        .then_some(Self { n, per, burst })
    }

    /// The emission interval, in units of `1/n` ms.
    fn interval(self) -> i128 {
        i128::from(self.per)
    }

    /// How far ahead of now the TAT may be, in units.
    fn tolerance(self) -> i128 {
        i128::from(self.burst) * i128::from(self.per)
    }

    fn units(self, ms: i64) -> i128 {
        i128::from(ms) * i128::from(self.n)
    }
}

/// A key's rate state: the limit it was last spent under and its TAT, in
/// units of `1/limit.n` ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub limit: RateLimit,
    pub tat: i64,
}

impl Rate {
    /// A rate never spent.
    pub fn new(limit: RateLimit) -> Self {
        Self { limit, tat: 0 }
    }

    /// The same spending under another limit, which applies at once. The TAT
    /// keeps its time, rounded up into the new units: what was spent stays
    /// spent, and nothing is given back by the rounding.
    pub fn under(self, limit: RateLimit) -> Self {
        if limit.n == self.limit.n {
            return Self { limit, ..self };
        }
        let scaled = i128::from(self.tat) * i128::from(limit.n);
        let tat = div_ceil(scaled, i128::from(self.limit.n));
        Self {
            limit,
            tat: clamp(tat),
        }
    }

    /// Whether a grant is allowed at `now`; if not, the first unix ms at
    /// which one is.
    pub fn check(&self, now: i64) -> Result<(), i64> {
        let now_u = self.limit.units(now);
        let tat = i128::from(self.tat).max(now_u);
        if tat - now_u <= self.limit.tolerance() {
            Ok(())
        } else {
            let at = tat - self.limit.tolerance();
            Err(clamp(div_ceil(at, i128::from(self.limit.n))))
        }
    }

    /// Spends one grant at `now` (after [`Rate::check`] allowed it).
    pub fn spend(&mut self, now: i64) {
        let tat = i128::from(self.tat).max(self.limit.units(now));
        self.tat = clamp(tat + self.limit.interval());
    }

    /// How many grants `now` allows, one after the other.
    pub fn remaining(&self, now: i64) -> i64 {
        let now_u = self.limit.units(now);
        let ahead = i128::from(self.tat).max(now_u) - now_u;
        let room = self.limit.tolerance() - ahead;
        if room < 0 {
            0
        } else {
            clamp(room / self.limit.interval() + 1)
        }
    }

    /// The first unix ms at which nothing is spent any more: from then the
    /// state is the same as none at all.
    pub fn idle_at(&self) -> i64 {
        // In i64: a quotient of a TAT by `n` (at least 1) always fits, and
        // i128's division is a library call on every grant with a rate.
        let n = self.limit.n.max(1);
        let ceil = self.tat / n + i64::from(self.tat % n > 0);
        ceil.max(0)
    }

    pub fn is_idle(&self, now: i64) -> bool {
        i128::from(self.tat) <= self.limit.units(now)
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && (a > 0) == (b > 0) {
        q + 1
    } else {
        q
    }
}

fn clamp(v: i128) -> i64 {
    i64::try_from(v.clamp(0, i128::from(i64::MAX))).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_700_000_000_000;

    fn limit(n: i64, per: i64, burst: i64) -> RateLimit {
        RateLimit::new(n, per, burst).expect("a valid limit")
    }

    /// Grants at each of `arrivals` (sorted ms) that the rate allows.
    fn grants(l: RateLimit, arrivals: &[i64]) -> Vec<i64> {
        let mut rate = Rate::new(l);
        arrivals
            .iter()
            .copied()
            .filter(|&t| {
                let ok = rate.check(t).is_ok();
                if ok {
                    rate.spend(t);
                }
                ok
            })
            .collect()
    }

    #[test]
    fn bounds() {
        assert!(RateLimit::new(0, 1000, 0).is_none());
        assert!(RateLimit::new(1, 0, 0).is_none());
        assert!(RateLimit::new(1, 1000, -1).is_none());
        assert!(RateLimit::new(MAX_RATE + 1, 1000, 0).is_none());
        assert!(RateLimit::new(1, MAX_PER_MS + 1, 0).is_none());
        assert!(RateLimit::new(MAX_RATE, MAX_PER_MS, MAX_RATE).is_some());
    }

    #[test]
    fn steady_demand_gets_one_grant_per_interval_and_the_burst_at_once() {
        // 5 per second, no burst: one every 200 ms.
        let every_ms: Vec<i64> = (NOW..NOW + 1000).collect();
        assert_eq!(
            grants(limit(5, 1000, 0), &every_ms),
            [NOW, NOW + 200, NOW + 400, NOW + 600, NOW + 800]
        );
        let three = grants(limit(3, 1000, 0), &(NOW..NOW + 3000).collect::<Vec<_>>());
        // 3 per 1000 ms: 333.3 ms apart, each at the first whole ms allowed
        // (GCRA never grants early, so demand in whole ms runs a little
        // under the rate, never over).
        assert_eq!(
            three,
            [
                NOW,
                NOW + 334,
                NOW + 668,
                NOW + 1002,
                NOW + 1336,
                NOW + 1670,
                NOW + 2004,
                NOW + 2338,
                NOW + 2672
            ]
        );
        // A burst of 2: three at once, then the steady pace.
        let burst = grants(
            limit(5, 1000, 2),
            &[NOW, NOW, NOW, NOW, NOW + 199, NOW + 200],
        );
        assert_eq!(burst, [NOW, NOW, NOW, NOW + 200]);
    }

    #[test]
    fn a_denial_names_the_first_allowed_instant() {
        let mut rate = Rate::new(limit(3, 1000, 0));
        rate.spend(NOW);
        assert_eq!(rate.check(NOW + 1), Err(NOW + 334));
        assert_eq!(rate.check(NOW + 334), Ok(()));
        assert_eq!(rate.remaining(NOW + 1), 0);
        assert_eq!(rate.remaining(NOW + 334), 1);
        assert_eq!(rate.idle_at(), NOW + 334);
        assert!(!rate.is_idle(NOW + 333) && rate.is_idle(NOW + 334));
        let mut burst = Rate::new(limit(10, 1000, 4));
        assert_eq!(burst.remaining(NOW), 5);
        burst.spend(NOW);
        assert_eq!(burst.remaining(NOW), 4);
    }

    #[test]
    fn a_new_limit_applies_at_once_and_keeps_what_was_spent() {
        let mut rate = Rate::new(limit(10, 1000, 0));
        for _ in 0..5 {
            let t = rate.check(NOW).err().unwrap_or(NOW);
            rate.spend(t);
        }
        // Spent up to NOW + 500 at 10/s; at 1/s the next grant is still then.
        let slower = rate.under(limit(1, 1000, 0));
        assert_eq!(slower.idle_at(), rate.idle_at());
        assert_eq!(slower.check(NOW + 100), Err(NOW + 500));
        // At 3/s the units do not divide: the rounding never gives time back.
        let odd = rate.under(limit(3, 1000, 0));
        assert!(odd.idle_at() >= rate.idle_at());
        assert_eq!(odd.check(NOW + 499), Err(NOW + 500));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Never more than n + BURST in any half-open window of PER ms.
        #[test]
        fn never_more_than_n_plus_burst_per_window(
            n in 1i64..8,
            per in 1i64..500,
            burst in 0i64..4,
            gaps in proptest::collection::vec(0i64..60, 1..200),
        ) {
            let l = limit(n, per, burst);
            let mut t = NOW;
            let arrivals: Vec<i64> = gaps.iter().map(|g| { t += g; t }).collect();
            let granted = grants(l, &arrivals);
            for (i, &start) in granted.iter().enumerate() {
                let inside = granted[i..].iter().take_while(|&&g| g < start + per).count();
                prop_assert!(inside as i64 <= n + burst,
                    "{} grants in [{}, {}) under {:?}", inside, start, start + per, l);
            }
        }

        /// Demand at every ms is served at the full rate: n per window, after
        /// the burst (with a whole number of ms between grants: demand in
        /// whole ms cannot be served more finely).
        #[test]
        fn steady_demand_is_served_at_the_full_rate(
            n in 1i64..8,
            spacing in 1i64..40,
            burst in 0i64..4,
            windows in 1i64..6,
        ) {
            let per = n * spacing;
            let l = limit(n, per, burst);
            let arrivals: Vec<i64> = (NOW..NOW + windows * per).collect();
            let got = grants(l, &arrivals).len() as i64;
            prop_assert!(got >= windows * n, "{} < {} under {:?}", got, windows * n, l);
            prop_assert!(got <= windows * n + burst, "{} > {} under {:?}", got, windows * n + burst, l);
        }

        /// The idle instant is the TAT's time rounded up to a whole ms, the
        /// first at which the state is as if never spent.
        #[test]
        fn the_idle_instant_is_the_tat_rounded_up(
            n in 1i64..=MAX_RATE,
            tat in prop_oneof![0i64..1_000_000, any::<i64>()],
        ) {
            let rate = Rate { limit: limit(n, 1000, 0), tat };
            let at = rate.idle_at();
            prop_assert_eq!(at, clamp(div_ceil(i128::from(tat), i128::from(n))));
            if tat >= 0 {
                prop_assert!(rate.is_idle(at));
                prop_assert!(at == 0 || !rate.is_idle(at - 1));
            }
        }

        /// A denial's instant is exact: denied just before, allowed at it.
        #[test]
        fn the_next_allowed_instant_is_exact(
            n in 1i64..50,
            per in 1i64..5000,
            burst in 0i64..5,
            spent in 1usize..20,
            later in 0i64..3000,
        ) {
            let mut rate = Rate::new(limit(n, per, burst));
            for _ in 0..spent {
                let t = rate.check(NOW).err().unwrap_or(NOW);
                rate.spend(t);
            }
            match rate.check(NOW + later) {
                Ok(()) => prop_assert!(rate.remaining(NOW + later) >= 1),
                Err(at) => {
                    prop_assert!(at > NOW + later);
                    prop_assert!(rate.check(at).is_ok());
                    prop_assert!(rate.check(at - 1).is_err());
                    prop_assert_eq!(rate.remaining(NOW + later), 0);
                }
            }
        }
    }
}
