//! `bench/results/latest.md`: the machine line, how the run was made, every
//! figure with its baseline, ratio and target, and the commands to rerun it.

use std::fmt::Write;

use crate::machine::Machine;
use crate::number::fmt_num;
use crate::options::Options;
use crate::records::Results;
use crate::{scenario, tables};

pub fn render(r: &Results, opts: &Options, machine: &Machine) -> String {
    let mut md = String::new();
    let _ = write!(
        md,
        "# meshlimit benchmarks: latest run\n\n\
         Written by `make bench{smoke}` (bench/driver); raw figures in the CSV beside this file. \
         What is measured and against what: `docs/performance/method.md`; how to read this: `bench/README.md`.\n\n\
         - **Machine:** {machine_line}\n\
         - **Run:** {date}, commit {commit}; throughput {rounds} interleaved rounds × {secs} s per configuration \
         (wrk, 1 thread, {conns} connections, after 1 s of warm-up); latency {lrounds} rounds × {lsecs} s \
         (meshlimit-loadgen, open loop, 64 connections, after 1 s of warm-up)\n\
         - **Pinning:** Envoy (`--concurrency 1`: one worker) on CPU {ecpu}; wrk and meshlimit-loadgen on CPU {lcpu}; \
         the agent, redis-server and the remote check's rate limit service on CPU {acpu}\n\
         - **Load average (1, 5, 15 min):** {load_start} at the start, {load_end} at the end (other work \
         on this shared machine shows here; every ratio is taken within a round to cancel what it can)\n\
         - **Agent store:** {store}; meshlimit's lease-call deadline `timeout_ms` = {timeout} (envoy.yaml: 5)\n\
         - **Reading it:** median [min–max] over rounds. A ratio or difference is taken within each round \
         (the two runs were back to back), then summarised.\n\n",
        smoke = if opts.smoke { "-smoke" } else { "" },
        machine_line = machine.line(),
        date = machine.date,
        commit = machine.commit,
        rounds = opts.rounds,
        secs = opts.seconds,
        conns = opts.connections,
        lrounds = opts.latency_rounds,
        lsecs = opts.latency_seconds,
        ecpu = opts.envoy_cpu,
        lcpu = opts.load_cpu,
        acpu = opts.agent_cpu,
        store = r.store,
        load_start = machine.load_start,
        load_end = crate::machine::load_average(),
        timeout = opts.filter_timeout_ms,
    );
    if opts.smoke {
        md.push_str("> **Smoke run** (one short round): checks that the benchmark works; its figures mean little.\n\n");
    }
    md.push_str("## Headline\n\n");
    md.push_str(&tables::headline(r));
    md.push_str("\n## Throughput, every request admitted\n\n");
    md.push_str(
        "Closed loop, so Envoy's one worker is saturated and 1/(req/s) is its CPU time per request. \
         The limits are far above the load: every request is admitted (non-2xx must be 0).\n\n",
    );
    md.push_str(&tables::throughput(r));
    md.push_str(
        "\n## Where (c)'s cost goes: the floor plus one of the filter's host interactions\n\n",
    );
    md.push_str(
        "Each row is the floor filter (e) plus one more thing meshlimit's filter does per request, \
         measured in the same rounds; its difference from (e) prices that interaction. What (c) adds \
         beyond their sum is meshlimit's own Wasm code (rules matching, key building, slot \
         encode/decode) and the clock.\n\n",
    );
    md.push_str(&tables::attribution(r));
    md.push_str("\n## Over the limit: (b) and (c) offered about 3× their limit\n\n");
    md.push_str(&tables::over_limit(r));
    md.push_str("\n## Latency at a fixed rate (open loop)\n\n");
    let _ = writeln!(
        md,
        "Every configuration at {} req/s, half of (a)'s median saturation, except one whose own \
         saturation is below that rate ((d), bound by the agent round trip), which runs at half of \
         its own. Latency runs from each request's scheduled send time, so a stall counts against \
         every request it delayed (no coordinated omission). Added = this configuration minus (a) \
         in the same round.\n",
        r.latency_rate.map_or("n/a".into(), |x| fmt_num(x, 0))
    );
    md.push_str(&tables::latency(r));
    md.push_str(&request_path_section(r));
    md.push_str(&rules_at_scale_section(r, opts));
    md.push_str("\n## Agent CPU and Redis commands\n\n");
    md.push_str(
        "Agent CPU from /proc/<pid>/stat over each measured run; Redis calls from INFO commandstats \
         (script calls: the lease script, EVALSHA; the heartbeat and the false-limit SLI's peeks go as EVAL and count only among all commands). n/a: the agent ran on its memory store.\n\n",
    );
    md.push_str(&tables::agent(r));
    md.push_str("\n## One decision in `core` (criterion), beside governor in the same binary\n\n");
    md.push_str(
        "`keyed/*`: one of 1,000 keys, clock read + lookup + take; both read the same (quanta) clock. \
         `rules/applicable/N`: which of N rules apply to a request (one matches); \
         `rules/applicable_none/N`: the same, none matches; `rules_compile/N`: compiling N rules.\n\n",
    );
    md.push_str(&tables::micro(r));
    md.push_str(&crate::profile::render(&r.profiles));
    md.push_str("\n## Configurations\n\n");
    for s in scenario::throughput_round() {
        let _ = writeln!(md, "- ({}) {}", s.id, s.label);
    }
    for s in scenario::request_path() {
        let _ = writeln!(md, "- ({}) {}", s.id, s.label);
    }
    md.push_str(
        "- (b3), (c3): (b) and (c) with the limit at a third of (c)'s admitted rate\n\n\
         Every configuration is sent one request header (`x-bench-key: hot`; (d) a unique `x-bench-cold` per \
         request from a wrk Lua script or `--unique-header`, as (r); (c3) `x-bench-limited: hot`). \
         (r) and (rl) run Envoy's `ratelimit` filter (domain `bench`, a descriptor `key` = the cold keys' \
         header, `failure_mode_deny: false`, the same timeout) calling bench/rls over HTTP/2 on loopback: \
         per request one Redis round trip (INCRBY + EXPIRE of a fixed-window counter) on the agent's Redis, \
         limit far above the load; its failure-mode admissions count as failed decisions. \
         meshlimit runs with envoy.yaml's plugin configuration (IETF response headers on) except \
         `timeout_ms`, raised to the driver's `--filter-timeout-ms` so that a saturated Envoy, whose own \
         event loop holds the agent's answer for several ms, measures the lease path rather than the \
         failure policy. The hot rules keep the default failure policy (`local`: still admitted, \
         counted in the tables); the cold rule fails closed, so a request the agent did not answer is a \
         503 and is not counted as admitted. The rules:\n\n```yaml\n",
    );
    md.push_str(&scenario::rules_yaml(
        r.over_limit.unwrap_or(scenario::HIGH_LIMIT),
    ));
    if let Some(p) = r.path_settings {
        md.push_str("```\n\nThe request-path phase's rules (its own agent):\n\n```yaml\n");
        md.push_str(&scenario::request_path_rules(
            p.admitted_limit,
            p.over_limit,
        ));
    }
    md.push_str("```\n\n## Commands\n\n```sh\n");
    let _ = writeln!(
        md,
        "make {}",
        if opts.smoke { "bench-smoke" } else { "bench" }
    );
    for step in &r.steps {
        let _ = writeln!(md, "# {}\n{}", step.what, step.command);
    }
    md.push_str("```\n");
    md
}

fn request_path_section(r: &Results) -> String {
    let mut md =
        String::from("\n## Request path: a hot key on leases, and cold keys (open loop)\n\n");
    match r.path_settings {
        Some(p) => {
            let _ = writeln!(
                md,
                "meshlimit-loadgen at {rate} req/s (half of the hot key's saturation (c), or of (a)'s when lower) for (h), (h3) and \
                 (a); (k) at {cold} req/s{cold_why}. (h): rule `bench-lease`, limit {adm}/s (4× the rate: \
                 every request admitted, yet leases of about 100 ms of demand are renewed all the time); \
                 (h3): `bench-lease-3x`, limit {over}/s (a third of the rate); (k) and (kl): `bench-new`, a new key \
                 on every request; (kc): `bench-cold-start`, the same with `cold_start: admit` (each request \
                 admitted at once, its lease asked behind it), at (kl)'s rate. All `accuracy: fast` on the agent's store, with a fresh agent for \
                 the phase. (kf), at (kl)'s rate, is no limiter: the floor filter (e) that also makes one HTTP call a request \
                 to the agent's `GET /healthz` and holds the request until it is answered, the least any filter pays to wait on a \
                 local service; (kl) minus (kf) is what meshlimit adds to that wait (its Wasm work, the agent's lease and the store's round trip). \
                 (rl), at (kl)'s rate and on the same header, is the per-request remote check: Envoy's `ratelimit` filter asking \
                 bench/rls, one Redis round trip a request; the headline divides (kl)'s added p50 by (rl)'s. (a) runs at each rate in the same round, just before the configurations \
                 compared with it; added = this configuration minus that (a) run.\n",
                rate = fmt_num(p.rate, 0),
                cold = fmt_num(p.cold_rate, 0),
                cold_why = if p.cold_rate < p.rate {
                    ", half of (d)'s saturation, below (h)'s rate: every request waits on the agent"
                } else {
                    ""
                },
                adm = fmt_num(p.admitted_limit as f64, 0),
                over = fmt_num(p.over_limit as f64, 0),
            );
        }
        None => return md + "Not run.\n",
    }
    md.push_str(
        "Latency of the admitted (2xx) requests only, from each request's scheduled send time \
         (a rejection is answered sooner than an admission and would flatter the percentiles).\n\n",
    );
    md.push_str(&tables::request_path_latency(r));
    md.push_str(
        "\nWhat each request cost, over the same runs (the open-loop warm-up second included): Envoy's CPU \
         from /proc; Redis lease-script calls (EVALSHA) from INFO commandstats per second of the run; the agent's lease \
         items for the rule (granted + denied, from its /metrics); the filter's lease calls, calls \
         started ahead of need and requests that waited on a call already in flight, from Envoy's \
         counters `meshlimit.lease_calls`, `meshlimit.lease_refills` and `meshlimit.lease_waits` \
         (n/a: this filter build does not define them).\n\n",
    );
    md.push_str(&tables::request_path_costs(r));
    md
}

fn rules_at_scale_section(r: &Results, opts: &Options) -> String {
    let mut md = String::from("\n## Rules at scale\n\n");
    if r.scale.is_empty() {
        return md + "Not run.\n";
    }
    let _ = writeln!(
        md,
        "meshlimit with {counts} rules loaded, each rule on its own path prefix and keyed on \
         `x-bench-key`. Each rules count has its own agent, and a fresh Envoy per run. Per round, two \
         wrk runs as in the throughput phase (req/s, Envoy CPU per request from /proc), back to back on \
         the same Envoy: one to `{path}`, which one rule covers (each request meets one rule among \
         many), one to `{none}`, which no rule covers (each request is looked up and taken by none); \
         then Envoy's VmRSS, and the agent's after the round's runs of its count (/proc/<pid>/status). \
         Ratios and differences are against the fewest rules in the same round.\n",
        counts = opts
            .scale_rules
            .iter()
            .map(|n| fmt_num(*n as f64, 0))
            .collect::<Vec<_>>()
            .join(" / "),
        path = scenario::SCALE_PATH,
        none = scenario::NO_RULE_PATH,
    );
    md.push_str(&tables::rules_at_scale(r));
    let _ = writeln!(
        md,
        "\nThen two open-loop runs of {secs} s to `{path}` at half of (a)'s saturation (or half of \
         this run's own, if lower): one steady, one during which the rules file the agent watches is \
         rewritten (one rule's limit raised: a new version) a quarter of the way in. The agent reads \
         the file every 500 ms and the filter syncs every second, so the new version is compiled inside \
         the measured time. The driver counts the filter VMs the agent shows on the old version just \
         before the rewrite (`meshlimit_filters_on_version`), then reads the agent's /metrics every \
         50 ms: propagation is from the agent showing the new version \
         (`meshlimit_rules_version_info`) to every one of those VMs reporting it, waited for up to 5 s. \
         A VM reports a new version as soon as it runs it, so the figure is the time every VM takes to \
         fetch, compile and run it, and the 50 ms reads are part of the load on the agent's CPU during the run.\n",
        path = scenario::SCALE_PATH,
        secs = opts.latency_seconds.max(4.0),
    );
    md.push_str(&tables::rules_reload(r));
    md
}
