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
    /// The same percentiles over the 2xx answers only.
    pub admitted_p50: f64,
    pub admitted_p99: f64,
    pub admitted_p999: f64,
    pub completed: u64,
    /// Requests sent, the open-loop warm-up included.
    pub issued: u64,
    pub errors: u64,
    pub non_2xx: u64,
}

/// Lease-call counters of meshlimit's filter over one run, per Envoy's admin
/// (`wasmcustom.meshlimit.lease_*`); `None` where this filter build defines no
/// such counter.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LeaseCounts {
    /// Lease calls dispatched (`meshlimit.lease_calls`).
    pub calls: Option<u64>,
    /// Calls started ahead of need (`meshlimit.lease_refills`).
    pub refills: Option<u64>,
    /// Requests that waited on a call already in flight (`meshlimit.lease_waits`).
    pub waits: Option<u64>,
}

/// One open-loop run of the request-path phase, with what the filter, the
/// agent and Redis did during it.
#[derive(Debug, Clone)]
pub struct PathRun {
    pub latency: Latency,
    /// Envoy's CPU seconds over the run (open-loop warm-up included, as in
    /// `latency.issued`).
    pub envoy_cpu_s: f64,
    /// Wall-clock seconds of the run.
    pub wall_s: f64,
    /// Redis script calls and all commands (Redis store, meshlimit only).
    pub redis: Option<(u64, u64)>,
    /// Lease items the agent answered for the configuration's rule (granted or
    /// denied, from its /metrics).
    pub agent_leases: Option<u64>,
    pub lease: LeaseCounts,
    /// The same counters over the measured seconds only (from the end of the
    /// open-loop warm-up second), the span of `latency.completed`.
    pub measured_lease: LeaseCounts,
    /// meshlimit's decision counters that moved, by `<rule>.<outcome>`.
    pub decisions: BTreeMap<String, u64>,
}

/// The request-path phase's settings, derived from the throughput phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathSettings {
    /// The hot key's rate: half of (c)'s median saturation (or of (a)'s, when lower).
    pub rate: f64,
    /// The cold keys' rate: the same, or half of (d)'s saturation if lower.
    pub cold_rate: f64,
    /// `bench-lease`'s limit (all admitted) and `bench-lease-3x`'s.
    pub admitted_limit: u64,
    pub over_limit: u64,
}

/// One closed-loop run of the rules-at-scale phase.
#[derive(Debug, Clone, Copy)]
pub struct ScaleLoad {
    pub wrk: WrkResult,
    /// Envoy's CPU seconds during the run.
    pub envoy_cpu_s: f64,
}

impl ScaleLoad {
    pub fn admitted_rps(&self) -> f64 {
        self.wrk.admitted_rps()
    }

    /// Envoy CPU microseconds per request, from /proc.
    pub fn cpu_us(&self) -> f64 {
        self.envoy_cpu_s / self.wrk.requests.max(1) as f64 * 1e6
    }
}

/// How a rules reload reached the filter VMs of one Envoy, per the agent's
/// `meshlimit_filters_on_version`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Propagation {
    /// VMs on the old version just before the rules file was rewritten.
    pub vms: u64,
    /// VMs on the new version when the wait ended.
    pub reached: u64,
    /// Seconds from the agent showing the new version to the last of `vms`
    /// reporting it; `None` when they did not all within the wait.
    pub seconds: Option<f64>,
}

impl Propagation {
    /// Whether every VM that was on the old version reported the new one.
    pub fn every_vm(&self) -> bool {
        self.vms > 0 && self.reached >= self.vms && self.seconds.is_some()
    }
}

/// One round of the rules-at-scale phase for one rules count.
#[derive(Debug, Clone)]
pub struct ScaleRun {
    pub rules: usize,
    pub round: usize,
    /// wrk to the path one rule covers (`scenario::SCALE_PATH`).
    pub matched: ScaleLoad,
    /// wrk to the path no rule covers (`scenario::NO_RULE_PATH`), right after,
    /// same Envoy.
    pub unmatched: ScaleLoad,
    /// Envoy's VmRSS after the wrk runs, KiB.
    pub rss_kib: Option<u64>,
    /// The agent's VmRSS after all of the round's runs of this rules count, KiB.
    pub agent_rss_kib: Option<u64>,
    /// Open loop without and with a rules reload in the middle.
    pub steady: Latency,
    pub reload: Latency,
    pub propagation: Propagation,
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
    pub path: Vec<PathRun>,
    pub path_settings: Option<PathSettings>,
    pub scale: Vec<ScaleRun>,
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

    pub fn path_runs<'a>(&'a self, scenario: &'a str) -> impl Iterator<Item = &'a PathRun> + 'a {
        self.path
            .iter()
            .filter(move |p| p.latency.scenario == scenario)
    }

    /// A figure comparing each request-path run of `x` with (a)'s run at the
    /// same rate in the same round, over the rounds.
    pub fn path_paired(&self, x: &str, f: impl Fn(&PathRun, &PathRun) -> f64) -> Option<Spread> {
        Spread::of(self.path_runs(x).filter_map(|p| {
            let a = self.path_runs("a").find(|a| {
                a.latency.round == p.latency.round && (a.latency.rate - p.latency.rate).abs() < 0.5
            })?;
            Some(f(p, a))
        }))
    }

    /// A rules-at-scale figure of `rules` against the smallest rules count's run
    /// in the same round, over the rounds.
    pub fn scale_paired(
        &self,
        rules: usize,
        f: impl Fn(&ScaleRun, &ScaleRun) -> Option<f64>,
    ) -> Option<Spread> {
        let base = self.scale.iter().map(|s| s.rules).min()?;
        Spread::of(
            self.scale
                .iter()
                .filter(|s| s.rules == rules)
                .filter_map(|s| {
                    let b = self
                        .scale
                        .iter()
                        .find(|b| b.rules == base && b.round == s.round)?;
                    f(s, b)
                }),
        )
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

    #[test]
    fn a_reload_reaches_every_vm_only_when_all_that_were_on_the_old_version_report_it() {
        let p = |vms, reached, seconds| Propagation {
            vms,
            reached,
            seconds,
        };
        assert!(p(2, 2, Some(1.2)).every_vm());
        assert!(!p(2, 1, None).every_vm());
        // No VM seen before the rewrite: nothing shows the reload reached one.
        assert!(!p(0, 0, None).every_vm());
        assert!(!p(0, 1, Some(0.5)).every_vm());
    }
}
