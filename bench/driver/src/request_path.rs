//! The request-path phase: a hot key on the lease path, all admitted (h) and at
//! 3× its limit (h3), and cold keys of an `accuracy: fast` rule at half their
//! saturation (k) and at a light load (kl), the per-request remote check at
//! (kl)'s rate (rl), and the floor of a cold key's wait (kf: one HTTP call a
//! request to the agent, which does nothing), each open
//! loop beside (a) at the same rate in the same round. Around every run it reads
//! Envoy's CPU, Redis's script calls, the agent's lease items and the filter's
//! lease-call counters.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::counters::{agent_lease_items, lease_counts};
use crate::error::Result;
use crate::phases::{
    decisions, parse_loadgen, remote_decisions, Bench, LOADGEN_WARMUP, MESHLIMIT_STATS,
    REMOTE_STATS,
};
use crate::records::{PathRun, PathSettings};
use crate::scenario::{self, Scenario};
use crate::services::{script_and_total_calls, Agent, CommandCounts};

/// How far above the offered rate (h)'s limit sits: every request admitted,
/// leases still renewed.
const ADMITTED_HEADROOM: f64 = 4.0;

/// (kl)'s rate, req/s (or (k)'s, if lower): a new key every millisecond. At
/// half of (d)'s saturation, (k) measures the agent's core, which this
/// machine's load generator, agent and Redis share, as much as the path; (kl)
/// measures the path with that core mostly idle.
const LIGHT_COLD_RATE: f64 = 1_000.0;

/// What is read before and after a run.
struct Reading {
    envoy_cpu: f64,
    redis: Option<CommandCounts>,
    agent: String,
    meshlimit: BTreeMap<String, u64>,
    remote: BTreeMap<String, u64>,
}

impl Bench<'_> {
    /// (a) (h) (h3) [(a) again] (k) [(a) again] (kl) (kc) (rl) (kf), `latency_rounds` times, on an agent of its
    /// own whose rules are sized from the throughput phase.
    pub fn request_path(&mut self) -> Result<()> {
        // Half of what meshlimit's filter sustains on a hot key ((c)), or of
        // (a)'s when that is lower: past the filter's own saturation an open
        // loop measures Envoy's queue, not the request path.
        let a_half = self.half_saturation("a").unwrap_or(1_000.0);
        let rate = self
            .half_saturation("c")
            .filter(|c| *c < a_half)
            .unwrap_or(a_half);
        // Cold keys cannot always be offered (a)'s rate: each waits on the agent.
        let cold_rate = self
            .half_saturation("d")
            .filter(|d| *d < rate)
            .unwrap_or(rate);
        let settings = PathSettings {
            rate,
            cold_rate,
            admitted_limit: (rate * ADMITTED_HEADROOM).round() as u64,
            over_limit: (rate / 3.0).round().max(10.0) as u64,
        };
        self.results.path_settings = Some(settings);
        let rules = scenario::request_path_rules(settings.admitted_limit, settings.over_limit);
        let store = self.agent.store.clone();
        let agent = Agent::start("agent-path", &rules, &store, &self.opts.agent_cpu, self.dir)?;
        self.results
            .step("agent (request path)", agent.command.clone());
        // (a) at each rate used, just before the configurations compared with it.
        let none = scenario::admitted().into_iter().find(|s| s.id == "a");
        let mut plan: Vec<(Scenario, f64)> = Vec::new();
        for sc in scenario::request_path() {
            let this_rate = match sc.id {
                "k" => cold_rate,
                "kl" | "kc" | "kf" | "rl" => LIGHT_COLD_RATE.min(cold_rate),
                _ => rate,
            };
            if let Some(a) = none {
                if !plan.iter().any(|(s, r)| s.id == "a" && *r == this_rate) {
                    plan.push((a, this_rate));
                }
            }
            plan.push((sc, this_rate));
        }
        plan.retain(|(s, _)| self.runs(s));
        for round in 1..=self.opts.latency_rounds {
            for (sc, rate) in &plan {
                let run = self.path_run(sc, round, *rate, &agent)?;
                let l = &run.latency;
                eprintln!(
                    "bench: request path round {round} ({}) at {:.0}/s admitted p50 {:.0} p99 {:.0} p99.9 {:.0} us, non-2xx {}",
                    sc.id, l.rate, l.admitted_p50, l.admitted_p99, l.admitted_p999, l.non_2xx
                );
                self.results.path.push(run);
            }
        }
        Ok(())
    }

    /// Half of `id`'s median admitted req/s in the throughput phase.
    pub(crate) fn half_saturation(&self, id: &str) -> Option<f64> {
        self.results
            .spread(id, |t| Some(t.wrk.admitted_rps()))
            .map(|s| (s.median / 2.0).round())
            .filter(|r| *r >= 1.0)
    }

    fn path_run(
        &mut self,
        sc: &Scenario,
        round: usize,
        rate: f64,
        agent: &Agent,
    ) -> Result<PathRun> {
        let mut envoy = self.start_envoy(sc, agent.port)?;
        let args = self.loadgen_args(sc, &envoy, rate, self.opts.latency_seconds)?;
        let read = |bench: &Self| -> Result<Reading> {
            Ok(Reading {
                envoy_cpu: envoy.proc.cpu_seconds()?,
                redis: bench
                    .redis
                    .as_ref()
                    .map(crate::services::Redis::command_counts)
                    .transpose()?,
                agent: agent.metrics()?,
                meshlimit: envoy.stats(MESHLIMIT_STATS)?,
                remote: envoy.stats(REMOTE_STATS)?,
            })
        };
        let before = read(self)?;
        let started = Instant::now();
        let loadgen = self.start_loadgen(sc, &args)?;
        // The filter's counters at the end of the open-loop warm-up second,
        // as near as a sleep gets (a few ms early: the loadgen's own start
        // is in its second, so the reading may count a little of the warm-up,
        // never miss a measured second).
        std::thread::sleep(LOADGEN_WARMUP);
        let warmed = envoy.stats(MESHLIMIT_STATS)?;
        let text = loadgen.finish()?;
        let wall_s = started.elapsed().as_secs_f64();
        let after = read(self)?;
        envoy.proc.check_running()?;
        let uses_agent = sc.uses_agent();
        let mut decisions = decisions(&before.meshlimit, &after.meshlimit);
        decisions.extend(remote_decisions(&before.remote, &after.remote));
        Ok(PathRun {
            latency: parse_loadgen(sc.id, round, &text)?,
            envoy_cpu_s: after.envoy_cpu - before.envoy_cpu,
            wall_s,
            redis: match (&before.redis, &after.redis) {
                (Some(b), Some(a)) if uses_agent => Some(script_and_total_calls(b, a)),
                _ => None,
            },
            agent_leases: scenario::rule_of(sc.id)
                .and_then(|rule| agent_lease_items(&before.agent, &after.agent, rule)),
            lease: lease_counts(&before.meshlimit, &after.meshlimit),
            measured_lease: lease_counts(&warmed, &after.meshlimit),
            decisions,
        })
    }
}
