//! The rules-at-scale phase: meshlimit with 10 / 1,000 / 20,000 rules loaded
//! (`--scale-rules`). Per rules count and round: two closed-loop wrk runs (as
//! the throughput phase) on one Envoy, one to a path one rule covers and one to
//! a path none does, each with its req/s and Envoy's CPU per request; Envoy's
//! resident memory; open-loop latency twice, steady and with the rules file
//! rewritten while the load runs, following the new version from the agent to
//! every filter VM; then the agent's resident memory.

use std::thread;
use std::time::{Duration, Instant};

use crate::counters::{prometheus_label, rss_kib, vms_on_version};
use crate::envoy::Envoy;
use crate::error::{BenchError, Result};
use crate::phases::{parse_loadgen, Bench, WARMUP_SECONDS};
use crate::procs::wait_for;
use crate::records::{Latency, Propagation, ScaleLoad, ScaleRun};
use crate::scenario::{self, Scenario};
use crate::services::Agent;
use crate::wrk;

/// Shortest open-loop run here: a reload must land inside the measured time
/// (the agent reads the file every 500 ms, the filter syncs every second).
const MIN_RELOAD_RUN_SECONDS: f64 = 4.0;

/// How long after the agent shows the new version every filter VM may take to
/// report it (a VM reports a new version as soon as it runs it).
const REACH_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the agent's /metrics is read while a reload propagates.
const POLL: Duration = Duration::from_millis(50);

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
                let p = &run.propagation;
                eprintln!(
                    "bench: rules round {round} ({n} rules) {:>9.0} req/s, {:>9.0} req/s to no rule  RSS {} KiB, agent {} KiB  p99 {:.0} us, {:.0} us with a reload; {} of {} VMs on it {}",
                    run.matched.wrk.rps,
                    run.unmatched.wrk.rps,
                    run.rss_kib.unwrap_or(0),
                    run.agent_rss_kib.unwrap_or(0),
                    run.steady.p99,
                    run.reload.p99,
                    p.reached,
                    p.vms,
                    p.seconds
                        .map_or("(not every VM within the wait)".into(), |s| format!("after {s:.2} s")),
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
        wrk::run(
            &self.opts.load_cpu,
            &self.wrk_args(&sc, &envoy, WARMUP_SECONDS)?,
        )?;
        let matched = self.closed_loop(&sc, &envoy)?;
        let unmatched = self.closed_loop(&scenario::at_scale_no_rule(), &envoy)?;
        let envoy_rss_kib = rss_kib(envoy.proc.pid()).ok();
        // Half of (a)'s saturation, as the latency phase, or half of this
        // configuration's own if that is lower.
        let own = (matched.admitted_rps() / 2.0).round().max(1.0);
        let rate = common_rate.map_or(own, |c| c.min(own));
        let seconds = self.opts.latency_seconds.max(MIN_RELOAD_RUN_SECONDS);
        let args = self.loadgen_args(&sc, &envoy, rate, seconds)?;
        let steady = parse_loadgen(sc.id, round, &self.run_loadgen(&sc, &args)?)?;
        *generation += 1;
        let next = scenario::scale_rules_yaml(n, *generation);
        let args = self.loadgen_args(&sc, &envoy, rate, seconds)?;
        let (reload, propagation) = self.with_reload(&sc, round, &args, seconds, agent, &next)?;
        envoy.proc.check_running()?;
        let agent_rss_kib = rss_kib(agent.proc.pid()).ok();
        Ok(ScaleRun {
            rules: n,
            round,
            matched,
            unmatched,
            rss_kib: envoy_rss_kib,
            agent_rss_kib,
            steady,
            reload,
            propagation,
        })
    }

    /// One measured wrk run of `sc`'s requests on `envoy`, with Envoy's CPU
    /// seconds around it.
    fn closed_loop(&mut self, sc: &Scenario, envoy: &Envoy) -> Result<ScaleLoad> {
        let cpu = self.opts.load_cpu.clone();
        let measured = self.wrk_args(sc, envoy, self.opts.seconds)?;
        self.results.step(
            format!("wrk (rules at scale, to {})", sc.path),
            format!(
                "taskset -c {cpu} wrk {}",
                crate::phases::shell_words(&measured)
            ),
        );
        let cpu_before = envoy.proc.cpu_seconds()?;
        let wrk = wrk::run(&cpu, &measured)?;
        Ok(ScaleLoad {
            wrk,
            envoy_cpu_s: envoy.proc.cpu_seconds()? - cpu_before,
        })
    }

    /// Runs meshlimit-loadgen with `args` and rewrites the agent's rules file
    /// to `next` a quarter into the measured time, following the new version
    /// to the filter VMs while the load runs.
    fn with_reload(
        &mut self,
        sc: &Scenario,
        round: usize,
        args: &[String],
        seconds: f64,
        agent: &Agent,
        next: &str,
    ) -> Result<(Latency, Propagation)> {
        let mut cmd = self.loadgen_command(sc, args);
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::new(format!("start meshlimit-loadgen: {e}")))?;
        // The loadgen's 1 s warm-up, then a quarter of the measured time.
        thread::sleep(Duration::from_secs_f64(1.0 + seconds / 4.0));
        // Kept until the loadgen is reaped, so a failure here leaves no child.
        let propagation = reload_and_follow(agent, next, Duration::from_secs_f64(seconds));
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
        Ok((latency, propagation?))
    }
}

/// The rules version the agent has in force, per its /metrics.
fn agent_version(metrics: &str) -> Option<String> {
    prometheus_label(metrics, "meshlimit_rules_version_info", "version")
}

/// Rewrites the agent's rules file to `next`, waits up to `load_timeout` for
/// the agent to show a new version, then up to [`REACH_TIMEOUT`] for every
/// filter VM that was on the old version just before the rewrite to report the
/// new one. Times are taken when a read of /metrics returns, every [`POLL`].
fn reload_and_follow(agent: &Agent, next: &str, load_timeout: Duration) -> Result<Propagation> {
    let before = agent.metrics()?;
    let old = agent_version(&before);
    let vms = old.as_deref().map_or(0, |v| vms_on_version(&before, v));
    agent.rewrite_rules(next)?;
    let new = wait_for(
        load_timeout,
        "the agent to load the rewritten rules",
        || Ok(agent_version(&agent.metrics()?).filter(|v| Some(v) != old.as_ref())),
    )?;
    let loaded = Instant::now();
    let deadline = loaded + REACH_TIMEOUT;
    loop {
        let reached = vms_on_version(&agent.metrics()?, &new);
        let now = Instant::now();
        if vms > 0 && reached >= vms {
            let seconds = Some(now.duration_since(loaded).as_secs_f64());
            return Ok(Propagation {
                vms,
                reached,
                seconds,
            });
        }
        if now >= deadline {
            return Ok(Propagation {
                vms,
                reached,
                seconds: None,
            });
        }
        thread::sleep(POLL);
    }
}
