//! The request-path tables: hot key on leases, cold keys, open loop, each beside
//! (a) at the same rate in the same round.

use std::fmt::Write;

use super::{failure_policy_share, fmt_spread, judged, label, ratio, verdict};
use crate::number::fmt_num;
use crate::records::{LeaseCounts, PathRun, Results, Spread};

/// Latency targets: (added p50, added p99, added p99.9) in µs, where one is set.
fn latency_targets(id: &str) -> (&'static str, [Option<f64>; 3]) {
    match id {
        "h" | "h3" => (
            "p99 ≤ 50 µs, p99.9 ≤ 200 µs",
            [None, Some(50.0), Some(200.0)],
        ),
        "k" | "kl" | "kc" => (
            "p50 ≤ 200 µs, p99 ≤ 1,000 µs",
            [Some(200.0), Some(1_000.0), None],
        ),
        _ => ("—", [None; 3]),
    }
}

type Pick = fn(&PathRun) -> f64;

const PERCENTILES: [Pick; 3] = [
    |p| p.latency.admitted_p50,
    |p| p.latency.admitted_p99,
    |p| p.latency.admitted_p999,
];

/// The distinct rates (a) ran at in the request-path phase, in the order run.
fn baseline_rates(r: &Results) -> Vec<f64> {
    let mut rates: Vec<f64> = Vec::new();
    for p in r.path_runs("a") {
        if !rates.iter().any(|x| (x - p.latency.rate).abs() < 0.5) {
            rates.push(p.latency.rate);
        }
    }
    rates
}

fn spread_at(
    r: &Results,
    id: &str,
    rate: Option<f64>,
    f: impl Fn(&PathRun) -> f64,
) -> Option<Spread> {
    Spread::of(
        r.path_runs(id)
            .filter(|p| rate.is_none_or(|x| (p.latency.rate - x).abs() < 0.5))
            .map(f),
    )
}

/// The rows: (a) at each of its rates, then (h), (h3), (k).
fn rows(r: &Results) -> Vec<(&'static str, Option<f64>)> {
    let mut rows: Vec<(&'static str, Option<f64>)> = baseline_rates(r)
        .into_iter()
        .map(|x| ("a", Some(x)))
        .collect();
    rows.extend(
        ["h", "h3", "k", "kl", "kc", "rl", "kf"]
            .into_iter()
            .filter(|id| r.path_runs(id).next().is_some())
            .map(|id| (id, None)),
    );
    rows
}

fn row_label(id: &str, rate: Option<f64>) -> String {
    match rate {
        Some(x) if id == "a" => format!("{} at {} req/s", label(id), fmt_num(x, 0)),
        _ => label(id),
    }
}

pub fn request_path_latency(r: &Results) -> String {
    if r.path.is_empty() {
        return "Not run.\n".into();
    }
    let mut out = String::from(
        "| configuration | rate req/s | p50 µs | p99 µs | p99.9 µs | added p50 | added p99 | added p99.9 | errors + non-2xx | target (added) | |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (id, rate) in rows(r) {
        let (target, limits) = latency_targets(id);
        let added: Vec<Option<Spread>> = PERCENTILES
            .iter()
            .map(|f| r.path_paired(id, |x, a| f(x) - f(a)))
            .collect();
        let met = limits.iter().zip(&added).filter_map(|(limit, s)| {
            let limit = (*limit)?;
            Some(s.map(|s| s.median <= limit))
        });
        let met: Vec<Option<bool>> = met.collect();
        let ok = if met.is_empty() || met.iter().any(Option::is_none) {
            None
        } else {
            Some(met.iter().all(|m| *m == Some(true)))
        };
        let cell = |s: &Option<Spread>| {
            if id == "a" {
                "—".to_string()
            } else {
                fmt_spread(*s, 0)
            }
        };
        let bad: u64 = r
            .path_runs(id)
            .filter(|p| rate.is_none_or(|x| (p.latency.rate - x).abs() < 0.5))
            .map(|p| p.latency.errors + p.latency.non_2xx)
            .sum();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {bad} | {target} | {} |",
            row_label(id, rate),
            fmt_spread(spread_at(r, id, rate, |p| p.latency.rate), 0),
            fmt_spread(spread_at(r, id, rate, PERCENTILES[0]), 0),
            fmt_spread(spread_at(r, id, rate, PERCENTILES[1]), 0),
            fmt_spread(spread_at(r, id, rate, PERCENTILES[2]), 0),
            cell(&added[0]),
            cell(&added[1]),
            cell(&added[2]),
            if id == "a" { "" } else { verdict(ok) },
        );
    }
    out
}

/// `id`'s admitted p50 in `round` minus (a)'s at the same rate in that round.
fn added_p50(r: &Results, id: &str, round: usize) -> Option<f64> {
    let p = r.path_runs(id).find(|p| p.latency.round == round)?;
    let a = r
        .path_runs("a")
        .find(|a| a.latency.round == round && (a.latency.rate - p.latency.rate).abs() < 0.5)?;
    Some(p.latency.admitted_p50 - a.latency.admitted_p50)
}

/// Per round, a cold key's added p50 (kl) ÷ the per-request remote check's
/// (rl), both open loop at the same rate, each against (a) at that rate in
/// that round.
pub fn cold_key_vs_remote_p50(r: &Results) -> Option<Spread> {
    let mut rounds: Vec<usize> = r.path_runs("kl").map(|p| p.latency.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    Spread::of(
        rounds
            .into_iter()
            .filter_map(|n| ratio(added_p50(r, "kl", n)?, added_p50(r, "rl", n)?)),
    )
}

/// The headline's open-loop figure: (kl) against the remote check (rl).
pub fn remote_check_headline(r: &Results) -> String {
    let rate = r
        .path_runs("rl")
        .next()
        .map_or("n/a".into(), |p| fmt_num(p.latency.rate, 0));
    let ratio = cold_key_vs_remote_p50(r);
    format!(
        "\n| figure (open loop, request path) | median [min–max] over rounds | target | met |\n|---|---|---|---|\n\
         | cold key added p50 (kl) ÷ per-request remote check's (rl), both at {rate} req/s | {} | ≤ 1 | {} |\n",
        fmt_spread(ratio, 2),
        judged(ratio, |v| v <= 1.0),
    )
}

/// Requests of a run, its open-loop warm-up included (the span every counter
/// was read over).
fn requests(p: &PathRun) -> f64 {
    p.latency.issued.max(1) as f64
}

fn per_thousand(r: &Results, id: &str, f: impl Fn(&PathRun) -> Option<u64>) -> String {
    fmt_spread(
        Spread::of(
            r.path_runs(id)
                .filter_map(|p| Some(f(p)? as f64 / requests(p) * 1e3)),
        ),
        1,
    )
}

fn lease(r: &Results, id: &str, f: fn(&LeaseCounts) -> Option<u64>) -> String {
    per_thousand(r, id, |p| f(&p.lease))
}

/// Requests per 1,000 of the measured seconds (the warm-up second left out)
/// that waited on a call in flight, by round.
fn measured_waits(r: &Results, id: &str) -> Option<Spread> {
    Spread::of(r.path_runs(id).filter_map(|p| {
        Some(p.measured_lease.waits? as f64 / p.latency.completed.max(1) as f64 * 1e3)
    }))
}

/// The headline's figure for the hot key at 1× and 3× its limit: no request
/// waits on an agent call once the first second is over.
pub fn hot_key_waits_headline(r: &Results) -> String {
    let mut out = String::from(
        "\n| figure (open loop, hot key) | waited on a call in flight per 1,000 requests after the first second, median [min–max] over rounds | target | met |\n|---|---|---|---|\n",
    );
    for (id, what) in [("h", "at 1× (all admitted)"), ("h3", "at 3× its limit")] {
        let waits = measured_waits(r, id);
        let _ = writeln!(
            out,
            "| ({id}) hot key {what} | {} | 0 | {} |",
            fmt_spread(waits, 1),
            judged(waits, |v| v == 0.0),
        );
    }
    out
}

pub fn request_path_costs(r: &Results) -> String {
    if r.path.is_empty() {
        return "Not run.\n".into();
    }
    let mut out = String::from(
        "| configuration | Envoy CPU µs/request (/proc) | added vs (a) | Redis script calls per second | target | | agent lease items per 1,000 requests | filter lease calls per 1,000 | started ahead of need per 1,000 | waited on a call in flight per 1,000 | of them after the first second, per 1,000 measured | decisions by failure policy |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let cpu_us = |p: &PathRun| p.envoy_cpu_s / requests(p) * 1e6;
    for (id, rate) in rows(r) {
        let scripts = spread_at(r, id, rate, |p| {
            p.redis.map_or(f64::NAN, |(s, _)| s as f64 / p.wall_s)
        });
        let (target, ok) = match id {
            "h" | "h3" => (
                "≤ 12 (1.2 × 1 agent ÷ 100 ms leases)",
                scripts.map(|s| s.median <= 12.0),
            ),
            "k" | "kl" | "kc" => ("— (one per new key)", None),
            _ => ("", None),
        };
        let dash = |text: String| if id == "a" { "—".to_string() } else { text };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {target} | {} | {} | {} | {} | {} | {} | {} |",
            row_label(id, rate),
            fmt_spread(spread_at(r, id, rate, cpu_us), 2),
            dash(fmt_spread(
                r.path_paired(id, |x, a| cpu_us(x) - cpu_us(a)),
                2
            )),
            dash(fmt_spread(scripts, 1)),
            if target.is_empty() {
                ""
            } else if scripts.is_some() {
                verdict(ok)
            } else {
                "n/a"
            },
            dash(per_thousand(r, id, |p| p.agent_leases)),
            dash(lease(r, id, |l| l.calls)),
            dash(lease(r, id, |l| l.refills)),
            dash(lease(r, id, |l| l.waits)),
            dash(
                if r.path_runs(id).any(|p| p.measured_lease.waits.is_some()) {
                    fmt_spread(measured_waits(r, id), 1)
                } else {
                    "n/a".into()
                }
            ),
            failure_policy_share(r.path_runs(id).flat_map(|p| p.decisions.iter())),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::fixtures::{cells, latency};
    use super::*;
    use crate::records::PathSettings;

    fn path(id: &'static str, round: usize, rate: f64, p: [f64; 3], lease: LeaseCounts) -> PathRun {
        let meshlimit = id != "a";
        PathRun {
            latency: latency(id, round, rate, p),
            envoy_cpu_s: if meshlimit { 0.5 } else { 0.4 },
            wall_s: 2.0,
            redis: meshlimit.then_some((20, 25)),
            agent_leases: meshlimit.then_some(30),
            lease,
            measured_lease: LeaseCounts {
                waits: lease.waits.map(|w| w / 5),
                ..lease
            },
            decisions: BTreeMap::from([
                (format!("bench.{id}.allowed"), 99),
                (format!("bench.{id}.failed_local"), 1),
            ]),
        }
    }

    #[test]
    fn request_path_figures_are_taken_against_a_at_the_same_rate() {
        let counted = LeaseCounts {
            calls: Some(50),
            refills: Some(20),
            waits: Some(5),
        };
        let mut r = Results {
            path_settings: Some(PathSettings {
                rate: 5_000.0,
                cold_rate: 800.0,
                admitted_limit: 20_000,
                over_limit: 1_667,
            }),
            ..Results::default()
        };
        for round in [1, 2] {
            r.path.push(path(
                "a",
                round,
                5_000.0,
                [100.0, 300.0, 900.0],
                LeaseCounts::default(),
            ));
            r.path
                .push(path("h", round, 5_000.0, [110.0, 330.0, 1_200.0], counted));
            r.path.push(path(
                "a",
                round,
                800.0,
                [90.0, 200.0, 400.0],
                LeaseCounts::default(),
            ));
            r.path.push(path(
                "k",
                round,
                800.0,
                [400.0, 900.0, 2_000.0],
                LeaseCounts::default(),
            ));
        }
        let table = request_path_latency(&r);
        let h = cells(&table, "| (h)");
        // added p50, p99, p99.9 against (a) at 5,000/s; p99.9 misses 200 µs.
        assert_eq!(h[6..9], ["10", "30", "300"], "{table}");
        assert_eq!(h[11], "**missed**", "{table}");
        let k = cells(&table, "| (k)");
        // Against (a) at 800/s, not at 5,000/s: 400 − 90 and 900 − 200.
        assert_eq!(k[6..8], ["310", "700"], "{table}");
        assert_eq!(k[11], "**missed**", "{table}");
        assert_eq!(cells(&table, "| (a) no filter at 800").len(), 13, "{table}");

        let costs = request_path_costs(&r);
        let h = cells(&costs, "| (h)");
        // 0.5 s of CPU over 10,000 requests = 50 µs; (a) 40 µs.
        assert_eq!(h[2..5], ["50.00", "10.00", "10.0"], "{costs}");
        assert_eq!(h[6], "met", "{costs}");
        // Per 1,000 of the 10,000 requests: agent items, calls, refills, waits.
        assert_eq!(h[7..11], ["3.0", "5.0", "2.0", "0.5"], "{costs}");
        // The measured seconds' one wait of 9,000 requests.
        assert_eq!(h[11], "0.1", "{costs}");
        assert_eq!(h[12], "1.00% of 200", "{costs}");
        // A filter without the lease counters: n/a, not zero.
        let k = cells(&costs, "| (k)");
        assert_eq!(k[8..12], ["n/a", "n/a", "n/a", "n/a"], "{costs}");
        // The hot key's headline: (h) waited after its first second, (h3) is
        // not in this run.
        let head = hot_key_waits_headline(&r);
        assert_eq!(
            cells(&head, "| (h)")[2..5],
            ["0.1", "0", "**missed**"],
            "{head}"
        );
        assert_eq!(cells(&head, "| (h3)")[2..5], ["n/a", "0", "n/a"], "{head}");
    }

    #[test]
    fn the_cold_key_is_judged_against_the_remote_check_round_by_round() {
        let mut r = Results::default();
        let none = LeaseCounts::default();
        // Added p50s (kl, rl): round 1 (300, 400), round 2 (375, 300).
        for (round, a, kl, rl) in [(1, 100.0, 400.0, 500.0), (2, 120.0, 495.0, 420.0)] {
            r.path.push(path("a", round, 1_000.0, [a, 0.0, 0.0], none));
            r.path
                .push(path("kl", round, 1_000.0, [kl, 0.0, 0.0], none));
            r.path
                .push(path("rl", round, 1_000.0, [rl, 0.0, 0.0], none));
            // (a) at another rate in the same round is not (kl)'s baseline.
            r.path
                .push(path("a", round, 5_000.0, [10.0, 0.0, 0.0], none));
        }
        let ratio = cold_key_vs_remote_p50(&r).unwrap();
        assert_eq!((ratio.min, ratio.max), (0.75, 1.25));
        let text = remote_check_headline(&r);
        let row = cells(&text, "| cold key added p50");
        assert_eq!(
            row[2..5],
            ["1.00 [0.75–1.25]", "≤ 1", "inconclusive"],
            "{text}"
        );
        assert!(row[1].ends_with("at 1,000 req/s"), "{text}");
        assert!(request_path_latency(&r).contains("| (rl) per-request remote check"));
    }
}
