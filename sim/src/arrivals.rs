//! Each gateway's arrivals, planned ahead of time from the scenario: when (a
//! Poisson process, or evenly spaced, at the gateway's share of the total rate)
//! and for which key (by popularity). Seeded, so a scenario offers the same load
//! every run.

use std::rc::Rc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::scenario::Arrivals as Kind;
use crate::scenario::{Rate, Traffic};

/// One gateway's arrival process.
pub struct ArrivalGen {
    rng: SmallRng,
    kind: Kind,
    rate: Rate,
    /// The gateway's share before and after the shift (if any), and when.
    share: f64,
    shift: Option<(f64, f64)>,
    /// The thinning bound: the highest rate this gateway ever sees.
    max_rate: f64,
    horizon: f64,
    t: f64,
    /// Cumulative key weights.
    keys: Rc<Vec<f64>>,
}

/// One planned arrival.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    pub at_ns: u64,
    pub key: u32,
}

/// Cumulative weights of the keys, for sampling.
pub fn key_cdf(traffic: &Traffic) -> Vec<f64> {
    let mut total = 0.0;
    traffic
        .popularity
        .weights(traffic.keys)
        .into_iter()
        .map(|w| {
            total += w;
            total
        })
        .collect()
}

impl ArrivalGen {
    /// Gateway `gateway` of `gateways`, over `horizon` seconds.
    pub fn new(
        traffic: &Traffic,
        gateway: usize,
        gateways: usize,
        horizon: f64,
        seed: u64,
        keys: Rc<Vec<f64>>,
    ) -> ArrivalGen {
        let weight = |spread: crate::scenario::Spread| {
            spread
                .weights(gateways)
                .get(gateway)
                .copied()
                .unwrap_or(0.0)
        };
        let share = weight(traffic.spread);
        let shift = traffic.shift.map(|s| (s.at.0, weight(s.to)));
        let max_share = shift.map_or(share, |(_, after)| share.max(after));
        let mut rng = SmallRng::seed_from_u64(seed ^ (gateway as u64).wrapping_mul(0x9E37_79B9));
        // Evenly spaced arrivals start at a random phase, so gateways don't march
        // in step.
        let phase: f64 = rng.random::<f64>();
        let max_rate = traffic.rate.max() * max_share;
        let t = match traffic.arrivals {
            Kind::Uniform if max_rate > 0.0 => phase / max_rate,
            _ => 0.0,
        };
        ArrivalGen {
            rng,
            kind: traffic.arrivals,
            rate: traffic.rate,
            share,
            shift,
            max_rate,
            horizon,
            t,
            keys,
        }
    }

    fn rate_at(&self, t: f64) -> f64 {
        let share = match self.shift {
            Some((at, after)) if t >= at => after,
            _ => self.share,
        };
        self.rate.at(t) * share
    }

    fn next_time(&mut self) -> Option<f64> {
        if self.max_rate <= 0.0 {
            return None;
        }
        loop {
            match self.kind {
                Kind::Poisson => {
                    // Thinning: candidates at the highest rate, each kept with
                    // probability rate(t) / highest.
                    let u: f64 = self.rng.random::<f64>();
                    self.t += -(1.0 - u).ln() / self.max_rate;
                    if self.t >= self.horizon {
                        return None;
                    }
                    let keep: f64 = self.rng.random::<f64>();
                    if keep * self.max_rate < self.rate_at(self.t) {
                        return Some(self.t);
                    }
                }
                Kind::Uniform => {
                    let now = self.t;
                    if now >= self.horizon {
                        return None;
                    }
                    let rate = self.rate_at(now);
                    // A pause in the traffic is stepped over 1 ms at a time.
                    self.t += if rate > 0.0 { 1.0 / rate } else { 1e-3 };
                    if rate > 0.0 {
                        return Some(now);
                    }
                }
            }
        }
    }
}

impl Iterator for ArrivalGen {
    type Item = Planned;

    fn next(&mut self) -> Option<Planned> {
        let t = self.next_time()?;
        let u: f64 = self.rng.random::<f64>();
        let last = self.keys.len().saturating_sub(1);
        let key = self.keys.partition_point(|&c| c < u).min(last);
        Some(Planned {
            at_ns: (t * 1e9) as u64,
            key: u32::try_from(key).unwrap_or(u32::MAX),
        })
    }
}

#[cfg(test)]
mod tests;
