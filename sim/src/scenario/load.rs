//! The offered load: a total rate over time, split over keys by popularity and
//! over gateways by a spread that may shift once during the run.

use serde::Deserialize;

use super::time::Secs;
use crate::error::ScenarioError;

/// How traffic is offered.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    /// The header the rules key on; requests carry `k0`, `k1`, ... in it.
    #[serde(default = "Traffic::default_header")]
    pub key_header: String,
    /// Total offered requests per second over time.
    #[serde(default)]
    pub rate: Rate,
    #[serde(default = "Traffic::default_keys")]
    pub keys: usize,
    #[serde(default)]
    pub popularity: Popularity,
    #[serde(default)]
    pub spread: Spread,
    /// From `at` on, traffic is spread as `to` says.
    #[serde(default)]
    pub shift: Option<Shift>,
    #[serde(default)]
    pub arrivals: Arrivals,
    /// The race: how many asks are sent at once.
    #[serde(default = "Traffic::default_race_asks")]
    pub race_asks: usize,
}

/// Total offered requests per second over time.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Rate {
    Steady(f64),
    /// `from` until `at`, then `to`.
    Step {
        from: f64,
        to: f64,
        at: Secs,
    },
    /// `from` until `start`, linear to `to` at `end`, then `to`.
    Ramp {
        from: f64,
        to: f64,
        start: Secs,
        end: Secs,
    },
    /// `base`, except `peak` during [`at`, `at + for`).
    Burst {
        base: f64,
        peak: f64,
        at: Secs,
        #[serde(rename = "for")]
        lasting: Secs,
    },
}

/// How requests pick their key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Popularity {
    #[default]
    Uniform,
    /// Key 0 takes `share` of the requests, the others share the rest evenly.
    Hot { share: f64 },
    /// Key i is chosen with weight 1 / (i + 1)^s.
    Zipf { s: f64 },
}

/// How requests are spread over gateways.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Spread {
    #[default]
    Even,
    /// Gateway i takes weight 1 / (i + 1)^s.
    Skewed { s: f64 },
    /// Gateway 0 takes `share`, the others share the rest evenly.
    One { share: f64 },
    /// Only gateways `from..to` take traffic, evenly.
    Range { from: usize, to: usize },
}

/// A change of spread during the run.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shift {
    pub at: Secs,
    pub to: Spread,
}

/// Arrival times: a Poisson process (the default) or evenly spaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    #[default]
    Poisson,
    Uniform,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            key_header: Traffic::default_header(),
            rate: Rate::default(),
            keys: 1,
            popularity: Popularity::Uniform,
            spread: Spread::Even,
            shift: None,
            arrivals: Arrivals::Poisson,
            race_asks: Traffic::default_race_asks(),
        }
    }
}

impl Traffic {
    fn default_header() -> String {
        "x-key".into()
    }
    fn default_keys() -> usize {
        1
    }
    fn default_race_asks() -> usize {
        1_000
    }

    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.keys == 0 || self.keys > u32::MAX as usize {
            return Err(ScenarioError::Keys);
        }
        if !self.rate.is_valid() {
            return Err(ScenarioError::Rate);
        }
        let shares_ok = |s: f64| (0.0..=1.0).contains(&s);
        match self.popularity {
            Popularity::Hot { share } if !shares_ok(share) => return Err(ScenarioError::HotShare),
            Popularity::Zipf { s } if !(s.is_finite() && s >= 0.0) => {
                return Err(ScenarioError::ZipfExponent)
            }
            _ => {}
        }
        for spread in std::iter::once(self.spread).chain(self.shift.map(|s| s.to)) {
            match spread {
                Spread::One { share } if !shares_ok(share) => return Err(ScenarioError::OneShare),
                Spread::Range { from, to } if from >= to => return Err(ScenarioError::Range),
                Spread::Skewed { s } if !(s.is_finite() && s >= 0.0) => {
                    return Err(ScenarioError::SkewedExponent)
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The spread in force at `t` seconds.
    pub fn spread_at(&self, t: f64) -> Spread {
        match self.shift {
            Some(shift) if t >= shift.at.0 => shift.to,
            _ => self.spread,
        }
    }
}

impl Default for Rate {
    fn default() -> Self {
        Rate::Steady(0.0)
    }
}

impl Rate {
    /// Requests per second at `t` seconds.
    pub fn at(&self, t: f64) -> f64 {
        match *self {
            Rate::Steady(r) => r,
            Rate::Step { from, to, at } => {
                if t < at.0 {
                    from
                } else {
                    to
                }
            }
            Rate::Ramp {
                from,
                to,
                start,
                end,
            } => {
                if t <= start.0 {
                    from
                } else if t >= end.0 {
                    to
                } else {
                    from + (to - from) * (t - start.0) / (end.0 - start.0)
                }
            }
            Rate::Burst {
                base,
                peak,
                at,
                lasting,
            } => {
                if t >= at.0 && t < at.0 + lasting.0 {
                    peak
                } else {
                    base
                }
            }
        }
    }

    /// The highest rate at any time.
    pub fn max(&self) -> f64 {
        match *self {
            Rate::Steady(r) => r,
            Rate::Step { from, to, .. } | Rate::Ramp { from, to, .. } => from.max(to),
            Rate::Burst { base, peak, .. } => base.max(peak),
        }
    }

    fn is_valid(&self) -> bool {
        let ok = |r: f64| r.is_finite() && r >= 0.0;
        match *self {
            Rate::Steady(r) => ok(r),
            Rate::Step { from, to, .. } => ok(from) && ok(to),
            Rate::Ramp {
                from,
                to,
                start,
                end,
            } => ok(from) && ok(to) && start.0 < end.0,
            Rate::Burst { base, peak, .. } => ok(base) && ok(peak),
        }
    }
}

impl Popularity {
    /// Each key's share of the requests (they sum to 1).
    pub fn weights(&self, keys: usize) -> Vec<f64> {
        let raw: Vec<f64> = match *self {
            Popularity::Uniform => vec![1.0; keys],
            Popularity::Hot { share } if keys == 1 => vec![share.max(f64::MIN_POSITIVE)],
            Popularity::Hot { share } => {
                let rest = (1.0 - share) / (keys - 1) as f64;
                (0..keys)
                    .map(|i| if i == 0 { share } else { rest })
                    .collect()
            }
            Popularity::Zipf { s } => (0..keys).map(|i| 1.0 / ((i + 1) as f64).powf(s)).collect(),
        };
        normalise(raw)
    }
}

impl Spread {
    /// Each gateway's share of the traffic (they sum to 1).
    pub fn weights(&self, gateways: usize) -> Vec<f64> {
        let raw: Vec<f64> = match *self {
            Spread::Even => vec![1.0; gateways],
            Spread::Skewed { s } => (0..gateways)
                .map(|i| 1.0 / ((i + 1) as f64).powf(s))
                .collect(),
            Spread::One { share } if gateways == 1 => vec![share.max(f64::MIN_POSITIVE)],
            Spread::One { share } => {
                let rest = (1.0 - share) / (gateways - 1) as f64;
                (0..gateways)
                    .map(|i| if i == 0 { share } else { rest })
                    .collect()
            }
            Spread::Range { from, to } => (0..gateways)
                .map(|i| if (from..to).contains(&i) { 1.0 } else { 0.0 })
                .collect(),
        };
        normalise(raw)
    }
}

fn normalise(raw: Vec<f64>) -> Vec<f64> {
    let total: f64 = raw.iter().sum();
    if total > 0.0 {
        raw.into_iter().map(|w| w / total).collect()
    } else {
        raw
    }
}
