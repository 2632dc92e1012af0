//! A limit: `requests` every `per`, counted by one of three algorithms
//! ([`Algorithm`]): a token bucket of `burst` tokens refilled with `requests`
//! tokens every `per` (the default), or a fixed or sliding window of `requests`
//! per `per` (where `burst` is `requests`). Built only through [`Limit::new`] (and
//! [`Limit::with_algorithm`]), so a zero rate, burst or period cannot exist past
//! the rules compiler.

use std::num::{NonZeroU32, NonZeroU64};

use serde::{Deserialize, Serialize};

use crate::{NANOS_PER_MS, NANOS_PER_SEC};

/// How a limit counts requests (`algorithm:` on a rule or under `defaults:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// `burst` tokens, refilled at `requests` per `per` (the default).
    #[default]
    TokenBucket,
    /// `requests` per window of `per`, windows aligned to the Unix epoch on the
    /// store's clock; the count starts again at each window's start.
    FixedWindow,
    /// `requests` per `per` over a window that slides: the previous window's
    /// count, weighted by the share of it still within `per` of now, plus the
    /// current window's count, is at most `requests`.
    SlidingWindow,
}

impl Algorithm {
    /// Its name in a rules file.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }

    /// True for the window algorithms, which count `requests` per `per` and have
    /// no `burst` of their own.
    pub fn is_window(self) -> bool {
        !matches!(self, Algorithm::TokenBucket)
    }
}

/// A validated limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    requests: NonZeroU32,
    per_ns: NonZeroU64,
    burst: NonZeroU32,
    #[serde(default, skip_serializing_if = "is_token_bucket")]
    algorithm: Algorithm,
}

fn is_token_bucket(a: &Algorithm) -> bool {
    *a == Algorithm::TokenBucket
}

impl Limit {
    /// A token bucket of `requests` per `per_ns`, holding at most `burst` tokens.
    pub fn new(requests: NonZeroU32, per_ns: NonZeroU64, burst: NonZeroU32) -> Self {
        Self {
            requests,
            per_ns,
            burst,
            algorithm: Algorithm::TokenBucket,
        }
    }

    /// The same limit counted by `algorithm`. A window's burst is its `requests`:
    /// at most that many are admitted within one window.
    pub fn with_algorithm(self, algorithm: Algorithm) -> Self {
        Self {
            burst: if algorithm.is_window() {
                self.requests
            } else {
                self.burst
            },
            algorithm,
            ..self
        }
    }

    /// How the limit counts.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Tokens added per period.
    pub fn requests(&self) -> u32 {
        self.requests.get()
    }

    /// The refill period in nanoseconds.
    pub fn per_ns(&self) -> u64 {
        self.per_ns.get()
    }

    /// Bucket capacity; for a window, `requests`.
    pub fn burst(&self) -> u32 {
        self.burst.get()
    }

    /// Tokens per nanosecond.
    pub fn rate_per_ns(&self) -> f64 {
        f64::from(self.requests.get()) / self.per_ns.get() as f64
    }

    /// Tokens per second, the figure rules are ordered by (strictest first).
    pub fn rate_per_sec(&self) -> f64 {
        self.rate_per_ns() * NANOS_PER_SEC as f64
    }

    /// The longest any request can honestly be told to wait: for a token bucket
    /// the time to refill the whole burst, divided by the smallest share a region
    /// can hold (`min_share`, 1 for a region-scoped rule); for a fixed window one
    /// window (`per`), for a sliding window two (the rest of this one and the
    /// next, whose weighted count falls to nothing at its end).
    pub fn max_wait_ns(&self, min_share: f64) -> u64 {
        let ns = match self.algorithm {
            Algorithm::TokenBucket => {
                f64::from(self.burst.get()) / self.rate_per_ns() / min_share.max(1e-3)
            }
            Algorithm::FixedWindow => self.per_ns.get() as f64,
            Algorithm::SlidingWindow => 2.0 * self.per_ns.get() as f64,
        };
        if ns.is_finite() {
            (ns.ceil() as u64).saturating_add(NANOS_PER_MS)
        } else {
            u64::MAX
        }
    }

    /// The period in whole seconds, at least 1 (the `w` of RateLimit-Policy).
    pub fn window_secs(&self) -> u64 {
        self.per_ns.get().div_ceil(NANOS_PER_SEC).max(1)
    }

    /// The quota a client is told, as `(q, w)` of RateLimit-Policy: `w` is the
    /// period rounded up to whole seconds ([`Limit::window_secs`]) and `q` the
    /// rule's rate over `w` seconds, rounded down, so a period that is not whole
    /// seconds is never advertised as more than it enforces (5 per 250 ms is
    /// `q=20;w=1`, 5 per 1500 ms is `q=6;w=2`, 100 per hour `q=100;w=3600`).
    pub fn window_quota(&self) -> (u64, u64) {
        let w = self.window_secs();
        let (requests, per_ns) = (u64::from(self.requests.get()), self.per_ns.get());
        // In u64 when the product fits (up to 5.1 million requests per hour,
        // 213,000 per day, any count per second): every allowed response is
        // told its policy, and u128 division is a software routine on wasm32.
        let q = match requests
            .checked_mul(w)
            .and_then(|n| n.checked_mul(NANOS_PER_SEC))
        {
            Some(n) => n / per_ns,
            None => {
                let q = u128::from(requests) * u128::from(w) * u128::from(NANOS_PER_SEC)
                    / u128::from(per_ns);
                u64::try_from(q).unwrap_or(u64::MAX)
            }
        };
        (q, w)
    }

    /// The same limit with rate and burst scaled by `factor` (a region's share, or
    /// a node's fail-local slice), never below one token.
    pub fn scaled(&self, factor: f64) -> Limit {
        let scale = |n: NonZeroU32| {
            let v = (f64::from(n.get()) * factor).floor();
            NonZeroU32::new(v.clamp(1.0, f64::from(u32::MAX)) as u32).unwrap_or(NonZeroU32::MIN)
        };
        Limit {
            requests: scale(self.requests),
            per_ns: self.per_ns,
            burst: scale(self.burst),
            algorithm: self.algorithm,
        }
    }
}

#[cfg(test)]
pub(crate) fn limit(requests: u32, per_ns: u64, burst: u32) -> Limit {
    #![allow(clippy::unwrap_used)]
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(per_ns).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_keeps_its_algorithm_on_the_wire_and_a_bucket_writes_none() {
        let bucket = limit(5, NANOS_PER_SEC, 5);
        let json = serde_json::to_value(bucket).unwrap();
        assert!(json.get("algorithm").is_none(), "{json}");
        let window = bucket.with_algorithm(Algorithm::FixedWindow);
        let json = serde_json::to_string(&window).unwrap();
        let back: Limit = serde_json::from_str(&json).unwrap();
        assert_eq!(back, window);
        assert_ne!(back, bucket);
    }

    #[test]
    fn window_rounds_up_to_whole_seconds() {
        assert_eq!(limit(5, 250_000_000, 5).window_secs(), 1);
        assert_eq!(limit(5, 60 * NANOS_PER_SEC, 5).window_secs(), 60);
        assert_eq!(limit(5, 1_500_000_000, 5).window_secs(), 2);
    }

    #[test]
    fn the_advertised_quota_is_the_enforced_rate_over_whole_seconds() {
        let q = |requests, per_ns| limit(requests, per_ns, 1).window_quota();
        assert_eq!(q(5, 250_000_000), (20, 1));
        assert_eq!(q(5, 1_500_000_000), (6, 2));
        assert_eq!(q(100, 3600 * NANOS_PER_SEC), (100, 3600));
        assert_eq!(q(10, NANOS_PER_SEC), (10, 1));
        assert_eq!(q(3, 300_000_000), (10, 1));
        // A period of 1 ns: the largest quota there is, no overflow.
        assert_eq!(q(u32::MAX, 1), (u64::from(u32::MAX) * NANOS_PER_SEC, 1));
        // A day-long window past u64's product: the wide path, same answer.
        assert_eq!(
            q(u32::MAX, 86_400 * NANOS_PER_SEC),
            (u64::from(u32::MAX), 86_400)
        );
    }

    proptest::proptest! {
        /// The u64 fast path gives what the exact u128 sum gives, for any
        /// count and period.
        #[test]
        fn the_advertised_quota_is_the_exact_quotient(
            requests in proptest::prop_oneof![1..=100_000u32, 1..=u32::MAX],
            per_ns in proptest::prop_oneof![
                1..=120 * NANOS_PER_SEC,
                1..=400 * 86_400 * NANOS_PER_SEC,
            ],
        ) {
            let l = limit(requests, per_ns, 1);
            let w = l.window_secs();
            let exact = u128::from(requests) * u128::from(w) * u128::from(NANOS_PER_SEC)
                / u128::from(per_ns);
            proptest::prop_assert_eq!(l.window_quota(), (u64::try_from(exact).unwrap_or(u64::MAX), w));
        }
    }

    #[test]
    fn rates_per_nanosecond_and_per_second() {
        let l = limit(300, 60 * NANOS_PER_SEC, 300);
        assert_eq!(l.per_ns(), 60 * NANOS_PER_SEC);
        assert!((l.rate_per_sec() - 5.0).abs() < 1e-9);
        assert!((l.rate_per_ns() - 5e-9).abs() < 1e-18);
    }

    #[test]
    fn the_longest_wait_refills_the_whole_burst_of_the_smallest_share() {
        // 10 per second, burst 20: two seconds to refill, plus a millisecond.
        let l = limit(10, NANOS_PER_SEC, 20);
        assert_eq!(l.max_wait_ns(1.0), 2 * NANOS_PER_SEC + NANOS_PER_MS);
        // A region holding a tenth of a global rule refills ten times slower.
        assert_eq!(l.max_wait_ns(0.1), 20 * NANOS_PER_SEC + NANOS_PER_MS);
        // A share is never taken below a thousandth.
        assert_eq!(l.max_wait_ns(0.0), 2_000 * NANOS_PER_SEC + NANOS_PER_MS);
    }

    #[test]
    fn scaled_never_reaches_zero() {
        let l = limit(10, NANOS_PER_SEC, 20).scaled(0.01);
        assert_eq!((l.requests(), l.burst()), (1, 1));
        let l = limit(10, NANOS_PER_SEC, 20).scaled(2.0);
        assert_eq!((l.requests(), l.burst()), (20, 40));
    }
}
