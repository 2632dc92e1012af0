//! The rules-at-scale tables: throughput, Envoy CPU and memory per rules count,
//! to a path one rule covers and to one none does; then latency under a rules
//! reload and how the reload reached the filter VMs. Every comparison is with
//! the fewest rules in the same round.

use std::fmt::Write;

use super::{fmt_spread, verdict};
use crate::number::fmt_num;
use crate::records::{Results, ScaleLoad, ScaleRun, Spread};

/// The throughput target at scale: the largest rules count ÷ the smallest, for
/// requests one rule applies to and requests none does.
const SCALE_TARGET: f64 = 0.95;

/// The propagation bound: one filter sync interval (1 s) plus a second.
const PROPAGATION_BOUND_S: f64 = 2.0;

type Load = fn(&ScaleRun) -> &ScaleLoad;

/// The rules counts run, fewest first.
fn counts(r: &Results) -> Vec<usize> {
    let mut counts: Vec<usize> = r.scale.iter().map(|s| s.rules).collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

fn runs(r: &Results, n: usize) -> impl Iterator<Item = &ScaleRun> {
    r.scale.iter().filter(move |s| s.rules == n)
}

fn of(r: &Results, n: usize, f: impl Fn(&ScaleRun) -> Option<f64>) -> Option<Spread> {
    Spread::of(runs(r, n).filter_map(f))
}

/// `text`, or a dash in the row of the fewest rules (the baseline itself).
fn vs_base(n: usize, base: usize, text: String) -> String {
    if n == base {
        "—".to_string()
    } else {
        text
    }
}

/// admitted req/s, ÷ base, target, verdict, CPU µs/request, added vs base.
fn load_cells(r: &Results, n: usize, base: usize, largest: usize, load: Load) -> String {
    let ratio = r.scale_paired(n, |x, b| {
        Some(load(x).admitted_rps() / load(b).admitted_rps())
    });
    let (target, ok) = if n == largest && n != base {
        (
            format!("≥ {SCALE_TARGET}"),
            verdict(ratio.map(|s| s.median >= SCALE_TARGET)),
        )
    } else {
        (String::new(), "")
    };
    format!(
        "{} | {} | {target} | {ok} | {} | {}",
        fmt_spread(of(r, n, |s| Some(load(s).admitted_rps())), 0),
        vs_base(n, base, fmt_spread(ratio, 3)),
        fmt_spread(of(r, n, |s| Some(load(s).cpu_us())), 2),
        vs_base(
            n,
            base,
            fmt_spread(
                r.scale_paired(n, |x, b| Some(load(x).cpu_us() - load(b).cpu_us())),
                2
            )
        ),
    )
}

/// Resident memory in MiB and its difference from the base, from `kib`.
fn rss_cells(r: &Results, n: usize, base: usize, kib: fn(&ScaleRun) -> Option<u64>) -> String {
    let mib = |s: &ScaleRun| kib(s).map(|k| k as f64 / 1024.0);
    format!(
        "{} | {}",
        fmt_spread(of(r, n, mib), 1),
        vs_base(
            n,
            base,
            fmt_spread(r.scale_paired(n, |x, b| Some(mib(x)? - mib(b)?)), 1)
        ),
    )
}

pub fn rules_at_scale(r: &Results) -> String {
    let counts = counts(r);
    let (Some(&base), Some(&largest)) = (counts.first(), counts.last()) else {
        return "Not run.\n".into();
    };
    let b = fmt_num(base as f64, 0);
    let load_header = format!(
        "admitted req/s | ÷ {b} rules | target | | Envoy CPU µs/request (/proc) | added vs {b} rules"
    );
    let mut out = format!(
        "| rules loaded | one rule applies: {load_header} | no rule applies: {load_header} | Envoy RSS MiB | added vs {b} rules | agent RSS MiB | added vs {b} rules |\n|{}\n",
        "---|".repeat(17)
    );
    for &n in &counts {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            fmt_num(n as f64, 0),
            load_cells(r, n, base, largest, |s| &s.matched),
            load_cells(r, n, base, largest, |s| &s.unmatched),
            rss_cells(r, n, base, |s| s.rss_kib),
            rss_cells(r, n, base, |s| s.agent_rss_kib),
        );
    }
    out
}

pub fn rules_reload(r: &Results) -> String {
    let counts = counts(r);
    if counts.is_empty() {
        return "Not run.\n".into();
    }
    let mut out = format!(
        "| rules loaded | open-loop rate req/s | p99 µs, steady | p99 µs, reload during the run | added by the reload | max µs, reload | reload reached every VM (n of runs) | propagation s (agent load → last VM) | target | |\n|{}\n",
        "---|".repeat(10)
    );
    for &n in &counts {
        let all = runs(r, n).count();
        let every = runs(r, n).filter(|s| s.propagation.every_vm()).count();
        let seconds = of(r, n, |s| s.propagation.seconds);
        // Within the bound in every run: every VM reached, the slowest in time.
        let ok = every == all && seconds.is_some_and(|s| s.max <= PROPAGATION_BOUND_S);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {every} of {all} | {} | ≤ {PROPAGATION_BOUND_S} s (one 1 s sync interval + 1 s) | {} |",
            fmt_num(n as f64, 0),
            fmt_spread(of(r, n, |s| Some(s.steady.rate)), 0),
            fmt_spread(of(r, n, |s| Some(s.steady.p99)), 0),
            fmt_spread(of(r, n, |s| Some(s.reload.p99)), 0),
            fmt_spread(of(r, n, |s| Some(s.reload.p99 - s.steady.p99)), 0),
            fmt_spread(of(r, n, |s| Some(s.reload.max)), 0),
            fmt_spread(seconds, 2),
            verdict(Some(ok)),
        );
    }
    out
}

#[cfg(test)]
mod tests;
