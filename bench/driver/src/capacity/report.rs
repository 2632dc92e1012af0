//! The two files: the figures with how each was measured (Markdown) and the
//! same figures for the capacity model's script (JSON, medians).

use std::fmt::Write as _;
use std::process::Command;

use meshlimit_core::Algorithm;
use serde_json::{json, Value};

use crate::load::{COLD_KEYS, SHAPES};
use crate::measure::{LoadRun, Measured};
use crate::Options;

/// Where the run ran.
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub redis: String,
    pub commit: String,
    pub load_start: String,
    pub load_end: String,
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .current_dir(meshlimit_tests::repo_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
            .map_or_else(|| "unknown".into(), |(_, v)| v.trim().to_string());
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            redis: output("redis-server", &["--version"]),
            commit: output("git", &["rev-parse", "--short=12", "HEAD"]),
            load_start: load_average(),
            load_end: String::new(),
        }
    }

    /// With the load average at the end of the run.
    pub fn finished(self) -> Machine {
        Machine {
            load_end: load_average(),
            ..self
        }
    }
}

/// Median, min and max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn spread(mut v: Vec<f64>) -> Spread {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    let at = |i: usize| v.get(i).copied().unwrap_or(f64::NAN);
    let n = v.len();
    let median = match n % 2 {
        1 => at(n / 2),
        _ if n > 0 => (at(n / 2 - 1) + at(n / 2)) / 2.0,
        _ => f64::NAN,
    };
    Spread {
        median,
        min: at(0),
        max: at(n.saturating_sub(1)),
    }
}

/// Each figure of the load runs, per shape.
fn per_shape(m: &Measured, shape: &str, f: fn(&LoadRun) -> f64) -> Spread {
    spread(
        m.loads
            .iter()
            .filter(|r| r.shape.name == shape)
            .map(f)
            .collect(),
    )
}

fn calls_per_cpu_s(r: &LoadRun) -> f64 {
    r.redis.script_calls as f64 / r.redis.cpu_s
}

/// Items answered per Redis CPU-second (the store sends one script call per
/// item, so this and [`calls_per_cpu_s`] differ only by the calls in flight
/// when a run starts and ends).
fn items_per_cpu_s(r: &LoadRun) -> f64 {
    (r.sent.items - r.sent.failed) as f64 / r.redis.cpu_s
}

fn in_per_item(r: &LoadRun) -> f64 {
    r.redis.net_in as f64 / r.redis.script_calls as f64
}

fn out_per_item(r: &LoadRun) -> f64 {
    r.redis.net_out as f64 / r.redis.script_calls as f64
}

/// The byte figures over every load run of every shape.
fn all_runs(m: &Measured, f: fn(&LoadRun) -> f64) -> Spread {
    spread(m.loads.iter().map(f).collect())
}

fn bucket_bytes(m: &Measured, algorithm: Algorithm) -> Spread {
    spread(
        m.memory
            .iter()
            .filter(|r| r.algorithm == algorithm)
            .map(|r| r.bytes as f64 / r.keys.max(1) as f64)
            .collect(),
    )
}

/// The filter's figures: (fixed, per slot, slots).
fn filter_bytes(m: &Measured) -> (u64, f64, u64) {
    let many = &m.filter["many_keys"];
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let fixed = n(&many["linear_memory"]) + n(&many["other_shared_bytes"]);
    let per_slot = n(&many["slot_bytes"]) as f64 / n(&many["slots_used"]).max(1) as f64;
    (fixed, per_slot, n(&m.filter["slots"]))
}

fn region_per_key(m: &Measured) -> f64 {
    (m.region.thousand as f64 - m.region.one as f64) / 999.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn json(m: &Measured) -> Result<String, serde_json::Error> {
    let per = |f: fn(&LoadRun) -> f64| {
        let mut o = serde_json::Map::new();
        for s in SHAPES {
            o.insert(
                s.name.into(),
                json!(per_shape(m, s.name, f).median.round() as u64),
            );
        }
        Value::Object(o)
    };
    let (fixed, per_slot, slots) = filter_bytes(m);
    let value = json!({
        "redis_items_per_cpu_second": per(items_per_cpu_s),
        "redis_calls_per_cpu_second": per(calls_per_cpu_s),
        "redis_bytes_per_item": {
            "in": round1(all_runs(m, in_per_item).median),
            "out": round1(all_runs(m, out_per_item).median),
        },
        "redis_bytes_per_bucket": {
            "token_bucket": bucket_bytes(m, Algorithm::TokenBucket).median.round() as i64,
            "sliding_window": bucket_bytes(m, Algorithm::SlidingWindow).median.round() as i64,
        },
        "filter_bytes": {"fixed": fixed, "per_slot": per_slot.round() as u64, "slots": slots},
        "region_bytes_per_key": round1(region_per_key(m)),
        "region_messages_per_second": m.region.per_second,
        "command": "make capacity-inputs",
    });
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

/// `n` with a comma every three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn range(s: Spread, digits: usize) -> String {
    format!("{:.d$} ({:.d$}–{:.d$})", s.median, s.min, s.max, d = digits)
}

pub fn markdown(m: &Measured, machine: &Machine, opts: &Options) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "# Capacity model inputs, measured\n\n\
Written by `make capacity-inputs` (`target/release/meshlimit-capacity`; bench/README.md, \
\"Capacity inputs\"). Every figure is the median of {rounds} rounds, with min–max; \
`capacity-inputs.json` holds the medians.\n\n\
Machine: {cpus} CPUs ({model}), {redis}, commit {commit}. The machine was shared: other \
builds ran during the run (load average {start} at the start, {end} at the end). The \
per-CPU-second figures divide by the CPU time Redis itself reports (`INFO cpu`: \
`used_cpu_user` + `used_cpu_sys`): other processes that only take turns on the CPUs slow \
the run without moving them, but one that shares Redis's core while it runs (caches, the \
other hyperthread) makes each item cost Redis more, and shows as low rounds below: the \
highest rounds are closest to what an idle machine gives, the median is what this one gave.\n",
        rounds = opts.rounds,
        cpus = machine.cpus,
        model = machine.cpu_model,
        redis = machine.redis,
        commit = machine.commit,
        start = machine.load_start,
        end = machine.load_end,
    );
    redis_section(&mut out, m, opts);
    memory_section(&mut out, m, opts);
    filter_section(&mut out, m);
    region_section(&mut out, m);
    out
}

fn redis_section(out: &mut String, m: &Measured, opts: &Options) {
    let _ = write!(
        out,
        "\n## Redis: lease-script work, bytes per item\n\n\
One redis-server on loopback (the test harness's, no persistence), driven by the store \
crate's own client (`RedisStore`: the agent's batcher, no batch window, at most 256 items a \
pipeline, each item one `EVALSHA` of the lease script) through `Buckets::acquire`, for \
{secs} s per shape per round, the shapes interleaved. Shapes: `single`, one item a call, \
each on the next of {cold} distinct keys (a key new to its round); `batch16`, 16 items a \
call on distinct keys likewise; `hot`, one item a call, all on one key. Items are granted \
(a limit far above the rate, leases of up to 10 tokens). Read around each run: `INFO cpu`, \
`INFO commandstats` (`cmdstat_evalsha` + `cmdstat_eval` calls: script calls) and `INFO \
stats` (`total_net_input_bytes`, `total_net_output_bytes`, less one `INFO`'s own).\n\n\
| shape | tasks | items per Redis CPU-s | script calls per Redis CPU-s | items per pipeline | bytes in per item | bytes out per item | Redis CPU s per run | Redis busy (CPU s ÷ wall s) | items failed |\n\
|---|---|---|---|---|---|---|---|---|---|\n",
        secs = opts.seconds,
        cold = thousands(COLD_KEYS),
    );
    for shape in SHAPES {
        let s = |f: fn(&LoadRun) -> f64| per_shape(m, shape.name, f);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            shape.name,
            shape.tasks,
            range(s(items_per_cpu_s), 0),
            range(s(calls_per_cpu_s), 0),
            range(
                s(|r| r.sent.items as f64 / r.sent.pipelines.max(1) as f64),
                1
            ),
            range(s(in_per_item), 1),
            range(s(out_per_item), 1),
            range(s(|r| r.redis.cpu_s), 2),
            range(s(|r| r.redis.cpu_s / r.sent.wall_s), 2),
            m.loads
                .iter()
                .filter(|r| r.shape.name == shape.name)
                .map(|r| r.sent.failed)
                .sum::<u64>(),
        );
    }
    out.push_str("\nItems per Redis CPU-second, round by round:\n\n");
    for shape in SHAPES {
        let rounds: Vec<String> = m
            .loads
            .iter()
            .filter(|r| r.shape.name == shape.name)
            .map(|r| format!("{:.0}", items_per_cpu_s(r)))
            .collect();
        let _ = writeln!(out, "- {}: {}", shape.name, rounds.join(", "));
    }
    let _ = write!(
        out,
        "\nEach script call carries one item, so items and calls per CPU-second differ only by \
the calls in flight at a run's edges. Bytes per item in the JSON: the median over every \
run of every shape, in {} and out {}.\n",
        range(all_runs(m, in_per_item), 1),
        range(all_runs(m, out_per_item), 1),
    );
}

fn memory_section(out: &mut String, m: &Measured, opts: &Options) {
    let _ = write!(
        out,
        "\n## Redis: memory per bucket\n\n\
`FLUSHALL`, then `INFO memory` `used_memory` and `DBSIZE` before and after creating {n} \
buckets of one rule (one acquire each, distinct keys, 16 a call), the difference divided \
by the keys `DBSIZE` gained. The rule allows one request an hour, so every bucket lives an \
hour (the TTL the lease script sets) and none expires during the measurement. Bucket keys \
are `ml:{{<key id>}}:per-user` (32 hex digits of key id; the rule name is in every key, so a \
longer one costs its extra bytes per bucket).\n\n\
| algorithm | bytes per bucket | keys created per round | acquires failed |\n|---|---|---|---|\n",
        n = thousands(opts.buckets),
    );
    for algorithm in [Algorithm::TokenBucket, Algorithm::SlidingWindow] {
        let keys = spread(
            m.memory
                .iter()
                .filter(|r| r.algorithm == algorithm)
                .map(|r| r.keys as f64)
                .collect(),
        );
        let failed: u64 = m
            .memory
            .iter()
            .filter(|r| r.algorithm == algorithm)
            .map(|r| r.sent.failed)
            .sum();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {failed} |",
            algorithm.name(),
            range(bucket_bytes(m, algorithm), 1),
            range(keys, 0),
        );
    }
}

fn filter_section(out: &mut String, m: &Measured) {
    let (fixed, per_slot, slots) = filter_bytes(m);
    let n = |at: &str, field: &str| thousands(m.filter[at][field].as_u64().unwrap_or(0));
    let _ = write!(
        out,
        "\n## Filter memory\n\n\
Measured by `meshlimit-wasm-cost --memory`: the release filter module run in the wasmi \
interpreter as one Envoy worker's VM (`{{}}` configuration: {slots} slots), sent one key, \
then {keys} distinct keys in all, each admitted on its own lease. After each it reads the \
module's Wasm linear memory and the shared-data entries the slots use (`meshlimit.slot.<n>`: \
key and value bytes).\n\n\
| after | Wasm linear memory | slots used | slots' key + value bytes | other shared data bytes |\n\
|---|---|---|---|---|\n\
| 1 key | {l1} | {u1} | {b1} | {o1} |\n\
| {keys} keys | {l2} | {u2} | {b2} | {o2} |\n\n\
Per slot: {per_slot:.1} bytes (the slots' bytes ÷ slots used, after {keys} keys). Fixed: \
{fixed} bytes (linear memory + other shared data, after {keys} keys). Linear memory is per \
VM (Envoy runs one VM per worker thread); the slots are shared data, one set per Envoy. \
Envoy's own bookkeeping per shared-data entry (its hash map node, the strings' headers, the \
CAS counter) is not in these bytes.\n",
        keys = n("many_keys", "keys"),
        l1 = n("one_key", "linear_memory"),
        u1 = n("one_key", "slots_used"),
        b1 = n("one_key", "slot_bytes"),
        o1 = n("one_key", "other_shared_bytes"),
        l2 = n("many_keys", "linear_memory"),
        u2 = n("many_keys", "slots_used"),
        b2 = n("many_keys", "slot_bytes"),
        o2 = n("many_keys", "other_shared_bytes"),
        fixed = thousands(fixed),
        slots = thousands(slots),
    );
}

fn region_section(out: &mut String, m: &Measured) {
    let _ = write!(
        out,
        "\n## Region exchange\n\n\
Each agent flushes the demand it counted for `scope: global` keys into its region's Redis \
{per:.0} times a second (`FLUSH_EVERY` in agent/src/regions/cache.rs); a region's \
rebalancer reads the peer regions' sealed demand once a period (a second). The bytes of one \
flush are those the agent's own encoder produces (`regions::flush_bytes`: every partition's \
pipeline, packed as sent), for keys named as the agent names them (`<rule>|<key id>`, \
rule `per-user`), deterministic: one flush with 1 key is {one} bytes, with 1,000 keys \
{thousand} bytes, so {per_key:.1} bytes a key. Each partition's pipeline carries the flush \
script's text once; 1,000 keys fill all 16 partitions.\n",
        per = m.region.per_second,
        one = thousands(m.region.one as u64),
        thousand = thousands(m.region.thousand as u64),
        per_key = region_per_key(m),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_the_extremes_of_the_finite_values() {
        let s = spread(vec![3.0, 1.0, f64::NAN, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(spread(vec![4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert!(spread(vec![]).median.is_nan());
    }

    #[test]
    fn thousands_are_marked_with_commas() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(16_384), "16,384");
        assert_eq!(thousands(1_245_433), "1,245,433");
    }
}
