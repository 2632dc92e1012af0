//! `bench/results/latest.md`: the machine line, how the run was made, every
//! figure with its baseline, ratio and target, and the commands to rerun it.

use std::fmt::Write;

use crate::machine::Machine;
use crate::options::Options;
use crate::records::Results;
use crate::{scenario, tables};

pub fn render(r: &Results, opts: &Options, machine: &Machine) -> String {
    let mut md = String::new();
    let _ = write!(
        md,
        "# meshlimit benchmarks: latest run\n\n\
         Written by `make bench{smoke}` (bench/driver); raw figures in [latest.csv](latest.csv). \
         What is measured and against what: [docs/measurements.md](../../docs/measurements.md); how to read this: [bench/README.md](../README.md).\n\n\
         - **Machine:** {machine_line}\n\
         - **Run:** {date}, commit {commit}; throughput {rounds} interleaved rounds × {secs} s per configuration \
         (wrk, 1 thread, {conns} connections, after 1 s of warm-up); latency {lrounds} rounds × {lsecs} s \
         (meshlimit-loadgen, open loop, 64 connections, after 1 s of warm-up)\n\
         - **Pinning:** Envoy (`--concurrency 1`: one worker) on CPU {ecpu}; wrk and meshlimit-loadgen on CPU {lcpu}; \
         the agent and redis-server on CPU {acpu}\n\
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
        r.latency_rate
            .map_or("n/a".into(), |x| tables::fmt_num(x, 0))
    );
    md.push_str(&tables::latency(r));
    md.push_str("\n## Agent CPU and Redis commands\n\n");
    md.push_str(
        "Agent CPU from /proc/<pid>/stat over each measured run; Redis calls from INFO commandstats \
         (script calls: EVALSHA, EVAL and their _RO and FCALL forms). n/a: the agent ran on its memory store.\n\n",
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
    md.push_str(
        "- (b3), (c3): (b) and (c) with the limit at a third of (c)'s admitted rate\n\n\
         Every configuration is sent one request header (`x-bench-key: hot`; (d) a unique `x-bench-cold` per \
         request from a wrk Lua script or `--unique-header`; (c3) `x-bench-limited: hot`). \
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
