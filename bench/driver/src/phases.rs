//! The measured phases. Every run starts a fresh Envoy for its configuration,
//! warms it up, measures, and stops it; configurations are interleaved
//! (a b c d e f, a b c d e f, …) so slow drifts of a shared machine land on all
//! of them alike.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::envoy::Envoy;
use crate::error::{BenchError, Context, Result};
use crate::options::Options;
use crate::procs::{output, Running};
use crate::profile;
use crate::records::{Latency, Results, Throughput};
use crate::scenario::{self, Filter, Keys, Scenario};
use crate::services::{
    script_and_total_calls, start_store_and_agent, Agent, CommandCounts, RateLimitService, Redis,
};
use crate::wrk;

/// Seconds of unmeasured load before each wrk run (connections, leases, JIT).
pub(crate) const WARMUP_SECONDS: u32 = 1;
/// meshlimit-loadgen's open-loop warm-up before the measured seconds.
pub(crate) const LOADGEN_WARMUP: Duration = Duration::from_secs(1);
/// Open-loop connections: enough that a stall of a few ms does not starve the
/// schedule of free connections at half of saturation.
const LOADGEN_CONNECTIONS: u32 = 64;

pub struct Bench<'a> {
    pub(crate) opts: &'a Options,
    pub(crate) dir: &'a Path,
    pub(crate) redis: Option<Redis>,
    pub(crate) agent: Agent,
    /// The per-request remote check's service, on the agent's Redis (none on
    /// the memory store: its configurations are then skipped).
    pub(crate) rls: Option<RateLimitService>,
    pub results: Results,
}

/// Counters read before and after a measured run.
struct Snapshot {
    envoy_cpu: f64,
    agent_cpu: f64,
    redis: Option<CommandCounts>,
    /// Every `wasmcustom.meshlimit.*` stat of Envoy's admin.
    meshlimit: BTreeMap<String, u64>,
    /// Envoy's ratelimit filter's counters ([`REMOTE_STATS`]).
    remote: BTreeMap<String, u64>,
}

impl<'a> Bench<'a> {
    pub fn start(opts: &'a Options, dir: &'a Path) -> Result<Bench<'a>> {
        let rules = scenario::rules_yaml(scenario::HIGH_LIMIT);
        let (redis, agent, store) =
            start_store_and_agent(opts.store, &rules, &opts.agent_cpu, dir)?;
        let mut results = Results {
            store,
            ..Results::default()
        };
        results.step("agent", agent.command.clone());
        let rls = match &redis {
            Some(redis) => Some(RateLimitService::start(redis, &opts.agent_cpu, dir)?),
            None => {
                eprintln!("bench: no Redis, so no per-request remote check (r), (rl)");
                None
            }
        };
        if let Some(rls) = &rls {
            results.step("rate limit service (r)", rls.command.clone());
        }
        Ok(Bench {
            opts,
            dir,
            redis,
            agent,
            rls,
            results,
        })
    }

    /// Whether `sc` runs: selected, and its remote service there.
    pub(crate) fn runs(&self, sc: &Scenario) -> bool {
        self.opts.selected(sc.id)
            && (self.rls.is_some() || !matches!(sc.filter, Filter::RemoteCheck(_)))
    }

    /// (a)–(f), interleaved, `rounds` times.
    pub fn throughput(&mut self) -> Result<()> {
        let planned: Vec<Scenario> = scenario::throughput_round()
            .into_iter()
            .filter(|s| self.runs(s))
            .collect();
        for round in 1..=self.opts.rounds {
            for sc in &planned {
                let t = self.measure(sc, round)?;
                eprintln!(
                    "bench: throughput round {round} ({}) {:>9.0} req/s  non-2xx {}",
                    sc.id, t.wrk.rps, t.wrk.non_2xx
                );
                self.results.throughput.push(t);
            }
        }
        Ok(())
    }

    /// `--perf`: one more, unrecorded run of (c), (e), (f) and the attribution
    /// configurations with Envoy sampled by perf (the sampling would perturb a
    /// measured run).
    pub fn profile(&mut self) -> Result<()> {
        for sc in scenario::throughput_round()
            .into_iter()
            .filter(|s| ["d", "c", "e", "f", "e1", "e2", "e3", "e4"].contains(&s.id))
        {
            self.measure(&sc, 0)?;
            eprintln!("bench: profiled ({})", sc.id);
        }
        Ok(())
    }

    /// (b) and (c) again, with a limit a third of what (c) admitted, so about
    /// three times the limit is offered.
    pub fn over_limit(&mut self) -> Result<()> {
        let c = self.results.spread("c", |t| Some(t.wrk.admitted_rps()));
        let limit = c.map_or(1_000, |s| (s.median / 3.0).max(10.0) as u64);
        self.results.over_limit = Some(limit);
        // A new agent whose `bench-limited` rule has the limit (same store).
        let rules = scenario::rules_yaml(limit);
        let store = self.agent.store.clone();
        self.agent = Agent::start("agent-3x", &rules, &store, &self.opts.agent_cpu, self.dir)?;
        for round in 1..=self.opts.rounds {
            for sc in scenario::over_limit(limit)
                .into_iter()
                .filter(|s| self.opts.selected(s.id))
            {
                let t = self.measure(&sc, round)?;
                eprintln!(
                    "bench: 3x limit round {round} ({}) {:>9.0} req/s  admitted {:.0}/s",
                    sc.id,
                    t.wrk.rps,
                    t.wrk.admitted_rps()
                );
                self.results.throughput.push(t);
            }
        }
        Ok(())
    }

    /// (g0), (g1) interleaved, `rounds` times: Envoy's CPU per request with the
    /// decision log off and on, at 10% rejections and 1% of allowed decisions
    /// sampled. Printed as it runs; the aim is (g1) at most 1.02 × (g0).
    pub fn decision_log(&mut self) -> Result<()> {
        let mut per_request: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
        for round in 1..=self.opts.rounds {
            for sc in scenario::decision_log()
                .into_iter()
                .filter(|s| self.opts.selected(s.id))
            {
                let t = self.measure(&sc, round)?;
                let us = t.envoy_cpu_s / t.wrk.requests.max(1) as f64 * 1e6;
                eprintln!(
                    "bench: decision log round {round} ({}) {:>9.0} req/s  non-2xx {}  Envoy {us:.2} us CPU/request",
                    sc.id, t.wrk.rps, t.wrk.non_2xx
                );
                per_request.entry(sc.id).or_default().push(us);
                self.results.throughput.push(t);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        let off = per_request.get_mut("g0").and_then(median);
        let on = per_request.get_mut("g1").and_then(median);
        if let (Some(off), Some(on)) = (off, on) {
            eprintln!(
                "bench: decision log: Envoy {on:.2} us CPU/request on, {off:.2} off: {:.3}x (aim: at most 1.02x)",
                on / off.max(f64::MIN_POSITIVE)
            );
        }
        Ok(())
    }

    /// Open-loop latency of (a)–(f) at half of (a)'s median saturation: the same
    /// offered load for all, so what a filter costs shows as added latency. Only
    /// a configuration that cannot sustain that rate at all (its own saturation is
    /// lower, as for (d), bound by the agent round trip) runs at half of its own:
    /// past saturation an open loop measures an ever-growing queue. The report
    /// marks such rates and compares them with nothing.
    pub fn latency(&mut self) -> Result<()> {
        let a = self
            .results
            .spread("a", |t| Some(t.wrk.rps))
            .map_or(1_000.0, |s| s.median);
        let rate = (a / 2.0).round();
        self.results.latency_rate = Some(rate);
        for round in 1..=self.opts.latency_rounds {
            for sc in scenario::admitted()
                .into_iter()
                .filter(|s| self.opts.selected(s.id))
            {
                let own = self
                    .results
                    .spread(sc.id, |t| Some(t.wrk.admitted_rps()))
                    .map_or(rate * 2.0, |s| s.median);
                let this_rate = if rate < own {
                    rate
                } else {
                    (own / 2.0).round()
                };
                let l = self.open_loop(&sc, round, this_rate)?;
                eprintln!("bench: latency round {round} ({}) at {:.0}/s p50 {:.0} p99 {:.0} p99.9 {:.0} us", sc.id, l.rate, l.p50, l.p99, l.p999);
                self.results.latency.push(l);
            }
        }
        Ok(())
    }

    fn measure(&mut self, sc: &Scenario, round: usize) -> Result<Throughput> {
        let envoy = self.start_envoy(sc, self.agent.port)?;
        let cpu = self.opts.load_cpu.clone();
        let warm = self.wrk_args(sc, &envoy, WARMUP_SECONDS)?;
        wrk::run(&cpu, &warm)?;
        let measured = self.wrk_args(sc, &envoy, self.opts.seconds)?;
        self.results.step(
            format!("wrk ({})", sc.id),
            format!("taskset -c {cpu} wrk {}", shell_words(&measured)),
        );
        let profiling = round == 0;
        let perf_dir = meshlimit_tests::repo_root()
            .join(&self.opts.out)
            .join("perf");
        if profiling {
            std::fs::create_dir_all(&perf_dir).context(perf_dir.display())?;
        }
        let perf_file = perf_dir.join(format!("perf-{}.data", sc.id));
        let mut perf = match profiling {
            true => Some(profile::start(
                envoy.proc.pid(),
                self.opts.seconds,
                &cpu,
                &perf_file,
            )?),
            false => None,
        };
        let before = self.snapshot(&envoy)?;
        let result = wrk::run(&cpu, &measured)?;
        let after = self.snapshot(&envoy)?;
        if let Some(p) = perf.as_mut() {
            let _ = p.wait();
            let mut summary = profile::summarise(sc.id, &perf_file)?;
            summary.cpu_us_per_request =
                (after.envoy_cpu - before.envoy_cpu) / result.requests.max(1) as f64 * 1e6;
            self.results.profiles.push(summary);
        }
        let mut envoy = envoy;
        envoy.proc.check_running()?;
        let mut decisions = decisions(&before.meshlimit, &after.meshlimit);
        decisions.extend(remote_decisions(&before.remote, &after.remote));
        Ok(Throughput {
            scenario: sc.id,
            round,
            wrk: result,
            envoy_cpu_s: after.envoy_cpu - before.envoy_cpu,
            agent_cpu_s: sc
                .uses_agent()
                .then_some(after.agent_cpu - before.agent_cpu),
            redis: match (&before.redis, &after.redis) {
                (Some(b), Some(a)) if sc.uses_agent() => Some(script_and_total_calls(b, a)),
                _ => None,
            },
            decisions,
        })
    }

    /// wrk's arguments for `sc`'s requests (its keys, to its path) on `envoy`.
    pub(crate) fn wrk_args(
        &self,
        sc: &Scenario,
        envoy: &Envoy,
        seconds: u32,
    ) -> Result<Vec<String>> {
        let script = match sc.keys {
            Keys::Unique(header) => Some(wrk::unique_key_script(self.dir, header, &nonce())?),
            Keys::TenthRejected(header, value) => {
                Some(wrk::tenth_rejected_script(self.dir, header, value)?)
            }
            Keys::Fixed(..) => None,
        };
        Ok(wrk::args(
            &envoy.url_to(sc.path),
            seconds,
            self.opts.connections,
            sc.keys,
            script.as_deref(),
        ))
    }

    fn snapshot(&self, envoy: &Envoy) -> Result<Snapshot> {
        Ok(Snapshot {
            envoy_cpu: envoy.proc.cpu_seconds()?,
            agent_cpu: self.agent.proc.cpu_seconds()?,
            redis: self.redis.as_ref().map(Redis::command_counts).transpose()?,
            meshlimit: envoy.stats(MESHLIMIT_STATS)?,
            remote: envoy.stats(REMOTE_STATS)?,
        })
    }

    fn open_loop(&mut self, sc: &Scenario, round: usize, rate: f64) -> Result<Latency> {
        let mut envoy = self.start_envoy(sc, self.agent.port)?;
        let args = self.loadgen_args(sc, &envoy, rate, self.opts.latency_seconds)?;
        let text = self.run_loadgen(sc, &args)?;
        envoy.proc.check_running()?;
        parse_loadgen(sc.id, round, &text)
    }

    /// A fresh Envoy for `sc` on the agent at `agent_port` (or, for the remote
    /// check, on the rate limit service), recorded in the report's commands.
    pub(crate) fn start_envoy(&mut self, sc: &Scenario, agent_port: u16) -> Result<Envoy> {
        let service_port = match (sc.filter, &self.rls) {
            (Filter::RemoteCheck(_), Some(rls)) => rls.port,
            (Filter::RemoteCheck(_), None) => {
                return Err(BenchError::new(format!(
                    "({}) needs the rate limit service, which runs on Redis only",
                    sc.id
                )))
            }
            _ => agent_port,
        };
        let envoy = Envoy::start(
            sc,
            service_port,
            self.opts.filter_timeout_ms,
            &self.opts.envoy_cpu,
            self.dir,
        )?;
        self.results
            .step(format!("Envoy ({})", sc.id), envoy.command.clone());
        Ok(envoy)
    }

    /// Warms `envoy` up with a closed-loop second (V8 tiers the module up, the
    /// pools fill, so the open-loop warm-up starts from a steady Envoy), then
    /// returns meshlimit-loadgen's arguments for `seconds` at `rate` after a
    /// 1 s open-loop warm-up.
    pub(crate) fn loadgen_args(
        &self,
        sc: &Scenario,
        envoy: &Envoy,
        rate: f64,
        seconds: f64,
    ) -> Result<Vec<String>> {
        let warm = self.wrk_args(sc, envoy, WARMUP_SECONDS)?;
        wrk::run(&self.opts.load_cpu, &warm)?;
        let mut args = vec![
            "--url".to_string(),
            envoy.url(),
            "--rate".into(),
            format!("{rate}"),
            "--duration".into(),
            format!("{seconds}"),
            "--warmup".into(),
            format!("{}", LOADGEN_WARMUP.as_secs_f64()),
            "--connections".into(),
            LOADGEN_CONNECTIONS.to_string(),
        ];
        match sc.keys {
            Keys::Fixed(name, value) => {
                args.extend(["--header".into(), format!("{name}: {value}")])
            }
            Keys::Unique(name) => args.extend(["--unique-header".into(), name.to_string()]),
            Keys::TenthRejected(..) => {
                return Err(BenchError::new(format!(
                    "({}) runs with wrk only: meshlimit-loadgen sends one header",
                    sc.id
                )))
            }
        }
        Ok(args)
    }

    /// meshlimit-loadgen with `args`, pinned to the load CPU, recorded in the
    /// report's commands.
    pub(crate) fn loadgen_command(&mut self, sc: &Scenario, args: &[String]) -> Command {
        let bin = loadgen_bin();
        let cpu = &self.opts.load_cpu;
        self.results.step(
            format!("loadgen ({})", sc.id),
            format!("taskset -c {cpu} {} {}", bin.display(), shell_words(args)),
        );
        let mut cmd = Command::new("taskset");
        cmd.arg("-c").arg(cpu).arg(&bin).args(args);
        cmd
    }

    /// Runs meshlimit-loadgen to completion; its JSON output.
    pub(crate) fn run_loadgen(&mut self, sc: &Scenario, args: &[String]) -> Result<String> {
        output(&mut self.loadgen_command(sc, args))
    }

    /// Starts meshlimit-loadgen; [`Running::finish`] gives its JSON output.
    pub(crate) fn start_loadgen(&mut self, sc: &Scenario, args: &[String]) -> Result<Running> {
        Running::start(&mut self.loadgen_command(sc, args))
    }
}

pub fn loadgen_bin() -> PathBuf {
    meshlimit_tests::target_dir().join("release/meshlimit-loadgen")
}

pub(crate) fn parse_loadgen(scenario: &'static str, round: usize, text: &str) -> Result<Latency> {
    let v: serde_json::Value =
        serde_json::from_str(text.trim()).context("meshlimit-loadgen output")?;
    let f = |path: &str| v.pointer(path).and_then(serde_json::Value::as_f64);
    let u = |path: &str| v.pointer(path).and_then(serde_json::Value::as_u64);
    let non_2xx = v
        .get("status")
        .and_then(serde_json::Value::as_object)
        .map_or(0, |m| {
            m.iter()
                .filter(|(code, _)| !code.starts_with('2'))
                .filter_map(|(_, n)| n.as_u64())
                .sum()
        });
    let missing = || BenchError::new(format!("meshlimit-loadgen output lacks a field: {text}"));
    Ok(Latency {
        scenario,
        round,
        rate: f("/rate").ok_or_else(missing)?,
        p50: f("/latency_us/p50").ok_or_else(missing)?,
        p99: f("/latency_us/p99").ok_or_else(missing)?,
        p999: f("/latency_us/p999").ok_or_else(missing)?,
        max: f("/latency_us/max").ok_or_else(missing)?,
        admitted_p50: f("/admitted_us/p50").ok_or_else(missing)?,
        admitted_p99: f("/admitted_us/p99").ok_or_else(missing)?,
        admitted_p999: f("/admitted_us/p999").ok_or_else(missing)?,
        completed: u("/completed").ok_or_else(missing)?,
        issued: u("/issued").ok_or_else(missing)?,
        errors: u("/errors").unwrap_or(0) + u("/dropped").unwrap_or(0),
        non_2xx,
    })
}

/// The prefix of meshlimit's stats in Envoy's admin (Envoy shows metrics a Wasm
/// module defines under `wasmcustom.`).
pub(crate) const MESHLIMIT_STATS: &str = "wasmcustom.meshlimit.";

/// meshlimit's decision counters (`wasmcustom.meshlimit.rule.<rule>.<outcome>`)
/// that moved between two readings of Envoy's stats, by `<rule>.<outcome>`.
pub(crate) fn decisions(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    let prefix = format!("{MESHLIMIT_STATS}rule.");
    after
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix(&prefix)?;
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (name.to_string(), d))
        })
        .collect()
}

/// Envoy's ratelimit filter's counters, kept under the route's cluster
/// (`backend`).
pub(crate) const REMOTE_STATS: &str = "cluster.backend.ratelimit.";

/// The ratelimit filter's answers that moved between two readings, named as
/// meshlimit's decisions are (`<rule>.<outcome>`), so the tables count the
/// remote check's failure-mode admissions as they count meshlimit's failure
/// policies. Its `error` counter is left out: with `failure_mode_deny: false`
/// every error is also a `failure_mode_allowed`.
pub(crate) fn remote_decisions(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    [
        ("ok", "remote.allowed"),
        ("over_limit", "remote.limited"),
        ("failure_mode_allowed", "remote.failed_open"),
    ]
    .into_iter()
    .filter_map(|(stat, name)| {
        let key = format!("{REMOTE_STATS}{stat}");
        let d = after
            .get(&key)?
            .saturating_sub(before.get(&key).copied().unwrap_or(0));
        (d > 0).then(|| (name.to_string(), d))
    })
    .collect()
}

/// A value unique to this run, for unique keys.
fn nonce() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}", nanos & 0xffff_ffff_ffff)
}

/// Arguments quoted for a shell where needed, for the report.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
