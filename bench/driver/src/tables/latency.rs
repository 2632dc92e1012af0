//! The open-loop latency table: percentiles and what each adds to (a).

use std::fmt::Write;

use super::{fmt_spread, label, verdict};
use crate::records::{Latency, Results, Spread};

fn latency_spread(r: &Results, id: &str, f: impl Fn(&Latency) -> f64) -> Option<Spread> {
    Spread::of(r.latencies(id).map(f))
}

fn latency_added(r: &Results, id: &str, f: impl Fn(&Latency) -> f64) -> Option<Spread> {
    Spread::of(r.latencies(id).filter_map(|l| {
        let a = r.latencies("a").find(|b| b.round == l.round)?;
        Some(f(l) - f(a))
    }))
}

pub fn latency(r: &Results) -> String {
    let mut out = String::from(
        "| configuration | rate req/s | p50 µs | p99 µs | p99.9 µs | added p50 | added p99 | added p99.9 | errors + non-2xx | target (added p99) | |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    // Other work on a shared machine shows first in the baseline's tail: when
    // (a)'s own p99 varies more than twofold across rounds, a few tens of µs
    // added cannot be told from noise.
    let noisy = latency_spread(r, "a", |l| l.p99).is_some_and(|s| s.max > 2.0 * s.min);
    for id in ["a", "b", "c", "d", "e", "f"] {
        let (target, limit) = match id {
            "c" => ("≤ 50 µs (local path)", Some(50.0)),
            "d" => ("≤ 1,000 µs (cold key)", Some(1_000.0)),
            _ => ("—", None),
        };
        let p99 = latency_added(r, id, |l| l.p99);
        let ok = limit.and_then(|lim| p99.map(|s| s.median <= lim));
        let added = |f: fn(&Latency) -> f64| {
            if id == "a" {
                "—".to_string()
            } else {
                fmt_spread(latency_added(r, id, f), 0)
            }
        };
        let bad: u64 = r.latencies(id).map(|l| l.errors + l.non_2xx).sum();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {bad} | {target} | {} |",
            label(id),
            rate_cell(r, id),
            fmt_spread(latency_spread(r, id, |l| l.p50), 0),
            fmt_spread(latency_spread(r, id, |l| l.p99), 0),
            fmt_spread(latency_spread(r, id, |l| l.p999), 0),
            added(|l| l.p50),
            added(|l| l.p99),
            added(|l| l.p999),
            match (limit, noisy) {
                (None, _) => "",
                (Some(_), _) if !same_rate(r, id) => "not comparable: ran at a lower rate than (a)",
                // Even against (a)'s worst round it adds more than the target.
                (Some(lim), true) if beyond_noise(r, id, lim) => "**missed**",
                (Some(_), true) => "inconclusive: (a)'s p99 varied over 2× across rounds",
                (Some(_), false) => verdict(ok),
            },
        );
    }
    out
}

/// The rate a configuration ran at, marked when it is not the common rate.
fn rate_cell(r: &Results, id: &str) -> String {
    let text = fmt_spread(latency_spread(r, id, |l| l.rate), 0);
    let common = r.latency_rate.unwrap_or(0.0);
    if r.latencies(id).any(|l| (l.rate - common).abs() > 0.5) {
        format!("{text} (half its own saturation, below the common rate)")
    } else {
        text
    }
}

/// True when every run of `id` ran at the common rate, as (a) did.
fn same_rate(r: &Results, id: &str) -> bool {
    let common = r.latency_rate.unwrap_or(0.0);
    r.latencies(id).all(|l| (l.rate - common).abs() <= 0.5)
}

/// True when `id`'s median p99 exceeds (a)'s highest p99 of any round by more
/// than `limit`: missed whatever the noise.
fn beyond_noise(r: &Results, id: &str, limit: f64) -> bool {
    let x = latency_spread(r, id, |l| l.p99);
    let a = latency_spread(r, "a", |l| l.p99);
    matches!((x, a), (Some(x), Some(a)) if x.median - a.max > limit)
}
