//! Throughput tables: admitted load, the headline ratios, attribution against
//! the floor, and the over-limit runs.

use std::fmt::Write;

use super::{added_us, admitted, cpu_us, failure_policy_share, fmt_spread, judged, label, ratio};
use crate::number::fmt_num;
use crate::records::{Results, Spread, Throughput};

pub fn throughput(r: &Results) -> String {
    let mut out = String::from(
        "| configuration | admitted req/s | ÷ (a) | ÷ (b) | ÷ (e) | Envoy CPU µs/request (/proc) | added CPU µs/request vs (a): 1/(req/s) − 1/(req/s of a) | same, from /proc | non-2xx | meshlimit decisions by failure policy |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for id in ["a", "b", "c", "d", "r", "e", "f"] {
        if id == "r" && r.runs(id).next().is_none() {
            continue;
        }
        let ratio = |base: &str| {
            if id == base {
                "1".to_string()
            } else {
                fmt_spread(r.paired(id, base, |x, b| admitted(x) / admitted(b)), 3)
            }
        };
        let added = if id == "a" {
            "—".to_string()
        } else {
            fmt_spread(r.paired(id, "a", added_us), 2)
        };
        let added_proc = if id == "a" {
            "—".to_string()
        } else {
            fmt_spread(r.paired(id, "a", |x, b| cpu_us(x) - cpu_us(b)), 2)
        };
        let non_2xx: u64 = r
            .runs(id)
            .map(|t| t.wrk.non_2xx + t.wrk.socket_errors)
            .sum();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {added_proc} | {} | {} |",
            label(id),
            fmt_spread(r.spread(id, |t| Some(admitted(t))), 0),
            ratio("a"),
            ratio("b"),
            ratio("e"),
            fmt_spread(r.spread(id, |t| Some(cpu_us(t))), 2),
            added,
            non_2xx,
            failure_share(r, id),
        );
    }
    out
}

/// The share of meshlimit's decisions taken by a failure policy (the agent did
/// not answer in time), over every run of `id`; empty for other filters.
fn failure_share(r: &Results, id: &str) -> String {
    failure_policy_share(r.runs(id).flat_map(|t| t.decisions.iter()))
}

/// A figure computed from per-request costs within one round.
type Figure = fn(&dyn Fn(&str) -> Option<f64>) -> Option<f64>;

/// A headline row: its name, how it is computed, decimals, target, and the
/// check of the target.
type Row = (
    &'static str,
    Figure,
    usize,
    &'static str,
    Option<fn(f64) -> bool>,
);

/// Per round, `figure` over a per-request cost `m` of each configuration.
fn per_round(r: &Results, m: fn(&Throughput) -> f64, figure: Figure) -> Option<Spread> {
    let mut rounds: Vec<usize> = r
        .throughput
        .iter()
        .map(|t| t.round)
        .filter(|n| *n > 0)
        .collect();
    rounds.sort_unstable();
    rounds.dedup();
    Spread::of(rounds.into_iter().filter_map(|round| {
        let get = |id: &str| r.runs(id).find(|t| t.round == round).map(m);
        figure(&get)
    }))
}

/// Envoy µs per admitted request as wrk saw it: 1/(req/s). Equal to its CPU per
/// request when its one worker is saturated and alone on its core.
fn rps_us(t: &Throughput) -> f64 {
    1e6 / admitted(t)
}

/// Every headline figure twice: from wrk's req/s (how docs/performance/method.md defines it),
/// and from Envoy's CPU per request in /proc, which other work on a shared
/// machine disturbs far less (it takes Envoy's core, not Envoy's CPU time).
pub fn headline(r: &Results) -> String {
    let mut out = String::from(
        "| figure | from req/s (wrk) | from Envoy CPU per request (/proc) | target (docs/performance/method.md) | met (req/s, /proc) |\n|---|---|---|---|---|\n",
    );
    let capacity = |x: &'static str, base: &'static str| -> Figure {
        match (x, base) {
            ("c", "e") => |g| Some(g("e")? / g("c")?),
            ("c", "a") => |g| Some(g("a")? / g("c")?),
            ("c", "b") => |g| Some(g("b")? / g("c")?),
            ("r", "a") => |g| Some(g("a")? / g("r")?),
            _ => |g| Some(g("a")? / g("d")?),
        }
    };
    let rows: Vec<Row> = vec![
        (
            "capacity c/e (hot key ÷ floor)",
            capacity("c", "e"),
            3,
            "≥ 0.95",
            Some(|v| v >= 0.95),
        ),
        (
            "capacity c/a (hot key ÷ no filter)",
            capacity("c", "a"),
            3,
            "— (Istio Wasm filters 0.80–0.89; (e) ≈ 0.86)",
            None,
        ),
        (
            "capacity c/b (hot key ÷ native local_ratelimit)",
            capacity("c", "b"),
            3,
            "— (native ≈ 1.0 of (a))",
            None,
        ),
        (
            "capacity d/a (cold keys ÷ no filter)",
            capacity("d", "a"),
            3,
            "—",
            None,
        ),
        (
            "capacity r/a (per-request remote check ÷ no filter)",
            capacity("r", "a"),
            3,
            "—",
            None,
        ),
        (
            "added Envoy CPU µs/request, (c)",
            |g| Some(g("c")? - g("a")?),
            2,
            "—",
            None,
        ),
        (
            "added Envoy CPU µs/request, (e) floor",
            |g| Some(g("e")? - g("a")?),
            2,
            "— (≈ 13 µs here)",
            None,
        ),
        (
            "added Envoy CPU µs/request, (d) per-request agent call",
            |g| Some(g("d")? - g("a")?),
            2,
            "—",
            None,
        ),
        (
            "added Envoy CPU µs/request, (r) per-request remote check",
            |g| Some(g("r")? - g("a")?),
            2,
            "—",
            None,
        ),
        (
            "cold keys' added Envoy CPU (d) ÷ per-request remote check's (r)",
            |g| ratio(g("d")? - g("a")?, g("r")? - g("a")?),
            2,
            "≤ 1",
            Some(|v| v <= 1.0),
        ),
        (
            "added CPU (c) ÷ added CPU (e)",
            |g| Some((g("c")? - g("a")?) / (g("e")? - g("a")?)),
            2,
            "≤ 1.1",
            Some(|v| v <= 1.1),
        ),
        (
            "added CPU (c) ÷ added CPU (d), a per-request agent call",
            |g| Some((g("c")? - g("a")?) / (g("d")? - g("a")?)),
            2,
            "≤ 0.33",
            Some(|v| v <= 1.0 / 3.0),
        ),
        (
            "one decision inside Envoy: µs/request (c) − (f)",
            |g| Some(g("c")? - g("f")?),
            2,
            "≤ 1 µs above the empty filter",
            Some(|v| v <= 1.0),
        ),
        (
            "the floor's get + CAS: µs/request (e) − (f)",
            |g| Some(g("e")? - g("f")?),
            2,
            "— (V8 call ≈ 0.09, shared data ≈ 0.48)",
            None,
        ),
    ];
    for (figure, f, decimals, target, check) in rows {
        let by_rps = per_round(r, rps_us, f);
        let by_proc = per_round(r, cpu_us, f);
        let met = match check {
            Some(ok) => format!("{}, {}", judged(by_rps, ok), judged(by_proc, ok)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "| {figure} | {} | {} | {target} | {met} |",
            fmt_spread(by_rps, decimals),
            fmt_spread(by_proc, decimals)
        );
    }
    out.push_str(
        "\nThe Envoys of (d) and (r) wait on a service (the agent; the rate limit service) and are not \
         saturated, so for them only the /proc column is Envoy's CPU; their req/s column is what the \
         whole path (service and Redis on the other core) sustains. Met: the whole min–max range meets \
         the target; missed: none of it does; inconclusive: the range straddles the target.\n",
    );
    out.push_str(&super::path::remote_check_headline(r));
    out.push_str(&super::path::hot_key_waits_headline(r));
    out
}

/// The floor plus one of meshlimit's per-request host interactions, each priced
/// against the floor, beside what (c) adds over the floor in total.
pub fn attribution(r: &Results) -> String {
    let mut out = String::from(
        "| configuration | admitted req/s | added CPU µs/request vs (e): 1/(req/s) | same, from /proc |\n|---|---|---|---|\n",
    );
    for id in ["e1", "e2", "e3", "e4", "c"] {
        if r.runs(id).next().is_none() {
            continue;
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            label(id),
            fmt_spread(r.spread(id, |t| Some(admitted(t))), 0),
            fmt_spread(r.paired(id, "e", added_us), 2),
            fmt_spread(r.paired(id, "e", |x, b| cpu_us(x) - cpu_us(b)), 2),
        );
    }
    out
}

pub fn over_limit(r: &Results) -> String {
    let Some(limit) = r.over_limit else {
        return "Not run.\n".into();
    };
    let mut out = format!(
        "Limit {} req/s (a third of (c)'s median admitted rate), for both.\n\n\
         | configuration | offered req/s | admitted req/s | offered ÷ limit | Envoy CPU µs/request | ÷ (b3) offered |\n|---|---|---|---|---|---|\n",
        fmt_num(limit as f64, 0)
    );
    for id in ["b3", "c3"] {
        let vs = if id == "b3" {
            "1".into()
        } else {
            fmt_spread(r.paired("c3", "b3", |x, b| x.wrk.rps / b.wrk.rps), 3)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {vs} | {} |",
            label(id),
            fmt_spread(r.spread(id, |t| Some(t.wrk.rps)), 0),
            fmt_spread(r.spread(id, |t| Some(admitted(t))), 0),
            fmt_spread(r.spread(id, |t| Some(t.wrk.rps / limit as f64)), 2),
            fmt_spread(r.spread(id, |t| Some(cpu_us(t))), 2),
            failure_share(r, id),
        );
    }
    out
}
