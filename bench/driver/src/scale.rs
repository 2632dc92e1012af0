//! The rules-at-scale phase: meshlimit with 10 / 1,000 / 20,000 rules loaded
//! (`--scale-rules`), one of which applies to each request. Per rules count and
//! round: wrk's req/s and Envoy's CPU per request (closed loop, as the throughput
//! phase), Envoy's resident memory, and open-loop latency twice, steady and with
//! the rules file rewritten while the load runs.

use std::thread;
use std::time::Duration;

use crate::counters::{prometheus_label, prometheus_sum, rss_kib};
use crate::error::{BenchError, Result};
use crate::phases::{parse_loadgen, Bench, WARMUP_SECONDS};
use crate::procs::wait_for;
use crate::records::{Latency, ScaleRun};
use crate::scenario::{self, Scenario};
use crate::services::Agent;
use crate::wrk;

/// Shortest open-loop run here: a reload must land inside the measured time
/// (the agent reads the file every 500 ms, the filter syncs every second).
const MIN_RELOAD_RUN_SECONDS: f64 = 4.0;

/// How long after the open loop a filter VM may take to report the new version.
const REACH_TIMEOUT: Duration = Duration::from_secs(5);

impl Bench<'_> {
    /// Every rules count once per round, interleaved, each on an agent of its
    /// own (so a rules count never waits for another's reload).
    pub fn rules_at_scale(&mut self) -> Result<()> {
        let store = self.agent.store.clone();
        let mut agents = Vec::new();
        for &n in &self.opts.scale_rules {
            let rules = scenario::scale_rules_yaml(n, 0);
            let agent = Agent::start(
                &format!("agent-rules-{n}"),
                &rules,
                &store,
                &self.opts.agent_cpu,
                self.dir,
            )?;
            self.results
                .step(format!("agent ({n} rules)"), agent.command.clone());
            agents.push((n, agent, 0u64));
        }
        let common = self.half_saturation("a");
        for round in 1..=self.opts.latency_rounds {
            for (n, agent, generation) in agents.iter_mut() {
                let run = self.scale_run(*n, round, common, agent, generation)?;
                eprintln!(
                    "bench: rules round {round} ({n} rules) {:>9.0} req/s  RSS {} KiB  p99 {:.0} us, {:.0} us with a reload{}",
                    run.wrk.rps,
                    run.rss_kib.unwrap_or(0),
                    run.steady.p99,
                    run.reload.p99,
                    if run.reload_reached { "" } else { " (not seen by the filter)" }
                );
                self.results.scale.push(run);
            }
        }
        Ok(())
    }

    fn scale_run(
        &mut self,
        n: usize,
        round: usize,
        common_rate: Option<f64>,
        agent: &Agent,
        generation: &mut u64,
    ) -> Result<ScaleRun> {
        let sc = scenario::at_scale();
        let mut envoy = self.start_envoy(&sc, agent.port)?;
        let cpu = self.opts.load_cpu.clone();
        wrk::run(&cpu, &self.wrk_args(&sc, &envoy, WARMUP_SECONDS)?)?;
        let measured = self.wrk_args(&sc, &envoy, self.opts.seconds)?;
        self.results.step(
            "wrk (rules at scale)",
            format!(
                "taskset -c {cpu} wrk {}",
                crate::phases::shell_words(&measured)
            ),
        );
        let cpu_before = envoy.proc.cpu_seconds()?;
        let result = wrk::run(&cpu, &measured)?;
        let envoy_cpu_s = envoy.proc.cpu_seconds()? - cpu_before;
        let rss_kib = rss_kib(envoy.proc.pid()).ok();
        // Half of (a)'s saturation, as the latency phase, or half of this
        // configuration's own if that is lower.
        let own = (result.admitted_rps() / 2.0).round().max(1.0);
        let rate = common_rate.map_or(own, |c| c.min(own));
        let seconds = self.opts.latency_seconds.max(MIN_RELOAD_RUN_SECONDS);
        let args = self.loadgen_args(&sc, &envoy, rate, seconds)?;
        let steady = parse_loadgen(sc.id, round, &self.run_loadgen(&sc, &args)?)?;
        *generation += 1;
        let next = scenario::scale_rules_yaml(n, *generation);
        let args = self.loadgen_args(&sc, &envoy, rate, seconds)?;
        let (reload, reload_reached) =
            self.with_reload(&sc, round, &args, seconds, agent, &next)?;
        envoy.proc.check_running()?;
        Ok(ScaleRun {
            rules: n,
            round,
            wrk: result,
            envoy_cpu_s,
            rss_kib,
            steady,
            reload,
            reload_reached,
        })
    }

    /// Runs meshlimit-loadgen with `args` and rewrites the agent's rules file
    /// to `next` a quarter into the measured time; then whether a filter VM
    /// reported the new version to the agent.
    fn with_reload(
        &mut self,
        sc: &Scenario,
        round: usize,
        args: &[String],
        seconds: f64,
        agent: &Agent,
        next: &str,
    ) -> Result<(Latency, bool)> {
        let version =
            |text: &str| prometheus_label(text, "meshlimit_rules_version_info", "version");
        let old = version(&agent.metrics()?);
        let mut cmd = self.loadgen_command(sc, args);
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::new(format!("start meshlimit-loadgen: {e}")))?;
        // The loadgen's 1 s warm-up, then a quarter of the measured time.
        thread::sleep(Duration::from_secs_f64(1.0 + seconds / 4.0));
        agent.rewrite_rules(next)?;
        let new = wait_for(
            Duration::from_secs_f64(seconds),
            "the agent to load the rewritten rules",
            || {
                let now = version(&agent.metrics()?);
                Ok(now.filter(|v| Some(v) != old.as_ref()))
            },
        );
        let out = child
            .wait_with_output()
            .map_err(|e| BenchError::new(format!("meshlimit-loadgen: {e}")))?;
        if !out.status.success() {
            return Err(BenchError::new(format!(
                "meshlimit-loadgen failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let latency = parse_loadgen(sc.id, round, &String::from_utf8_lossy(&out.stdout))?;
        let new = new?;
        let label = format!("version=\"{new}\"");
        let reached = wait_for(REACH_TIMEOUT, "a filter VM on the new rules", || {
            let on = prometheus_sum(&agent.metrics()?, "meshlimit_filters_on_version", &label);
            Ok(on.filter(|n| *n >= 1.0).map(|_| ()))
        })
        .is_ok();
        Ok((latency, reached))
    }
}
