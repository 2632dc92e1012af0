//! What the phases measured, one record per run, and the summaries the report
//! is built from: medians with min–max across rounds.

use std::collections::BTreeMap;

use crate::wrk::WrkResult;

/// One closed-loop (wrk) run.
#[derive(Debug, Clone)]
pub struct Throughput {
    pub scenario: &'static str,
    pub round: usize,
    pub wrk: WrkResult,
    /// Envoy's CPU seconds during the run (one worker, pinned).
    pub envoy_cpu_s: f64,
    /// The agent's CPU seconds during the run (configurations that use it).
    pub agent_cpu_s: Option<f64>,
    /// Redis script calls and all commands during the run (Redis store only).
    pub redis: Option<(u64, u64)>,
    /// meshlimit's `wasmcustom.meshlimit.rule.*` counters that moved.
    pub decisions: BTreeMap<String, u64>,
}

/// One open-loop (meshlimit-loadgen) run. Latencies in microseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    pub scenario: &'static str,
    pub round: usize,
    pub rate: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub completed: u64,
    pub errors: u64,
    pub non_2xx: u64,
}

/// One criterion benchmark: median time per iteration and its 95% interval.
#[derive(Debug, Clone)]
pub struct Micro {
    pub name: String,
    pub median_ns: f64,
    pub lower_ns: f64,
    pub upper_ns: f64,
}

/// A command as it was run, for the report.
#[derive(Debug, Clone)]
pub struct Step {
    pub what: String,
    pub command: String,
}

#[derive(Debug, Default)]
pub struct Results {
    pub throughput: Vec<Throughput>,
    pub latency: Vec<Latency>,
    pub micro: Vec<Micro>,
    pub steps: Vec<Step>,
    pub profiles: Vec<crate::profile::Profile>,
    /// The store the agent used, and why.
    pub store: String,
    /// `bench-limited`'s limit in the over-limit phase, per second.
    pub over_limit: Option<u64>,
    /// The open-loop rate: half of (a)'s median saturation.
    pub latency_rate: Option<f64>,
}

/// Median and range of a set of values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

impl Results {
    pub fn runs<'a>(&'a self, scenario: &'a str) -> impl Iterator<Item = &'a Throughput> + 'a {
        self.throughput
            .iter()
            .filter(move |t| t.scenario == scenario)
    }

    /// A figure of every run of `scenario`.
    pub fn spread(&self, scenario: &str, f: impl Fn(&Throughput) -> Option<f64>) -> Option<Spread> {
        Spread::of(self.runs(scenario).filter_map(f))
    }

    /// A figure comparing `x` and `base` run by run within the same round (they
    /// ran back to back), over the rounds.
    pub fn paired(
        &self,
        x: &str,
        base: &str,
        f: impl Fn(&Throughput, &Throughput) -> f64,
    ) -> Option<Spread> {
        Spread::of(self.runs(x).filter_map(|t| {
            let b = self.runs(base).find(|b| b.round == t.round)?;
            Some(f(t, b))
        }))
    }

    pub fn latencies<'a>(&'a self, scenario: &'a str) -> impl Iterator<Item = &'a Latency> + 'a {
        self.latency.iter().filter(move |l| l.scenario == scenario)
    }

    pub fn micro(&self, name: &str) -> Option<&Micro> {
        self.micro.iter().find(|m| m.name == name)
    }

    pub fn step(&mut self, what: impl Into<String>, command: impl Into<String>) {
        let what = what.into();
        if !self.steps.iter().any(|s| s.what == what) {
            self.steps.push(Step {
                what,
                command: command.into(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_middle() {
        let s = Spread::of([3.0, 1.0, 2.0, f64::NAN]);
        assert_eq!(
            s,
            Some(Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            })
        );
        assert_eq!(Spread::of([1.0, 2.0]).map(|s| s.median), Some(1.5));
        assert_eq!(Spread::of([]), None);
    }
}
