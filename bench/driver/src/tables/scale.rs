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
mod tests {
    use super::super::fixtures::{cells, latency};
    use super::*;
    use crate::records::Propagation;
    use crate::wrk::WrkResult;

    /// Five seconds of wrk at `rps`, Envoy spending `cpu_us` on each request.
    fn load(rps: f64, cpu_us: f64) -> ScaleLoad {
        let requests = (rps * 5.0) as u64;
        ScaleLoad {
            wrk: WrkResult {
                requests,
                seconds: 5.0,
                rps,
                non_2xx: 0,
                socket_errors: 0,
            },
            envoy_cpu_s: cpu_us * requests as f64 / 1e6,
        }
    }

    /// One rules count's runs: req/s with one rule and with none applying,
    /// Envoy's and the agent's RSS in MiB, p99 steady and with a reload, and
    /// the reload's propagation in each of two rounds (`None`: one VM of two
    /// never reported it).
    struct Figures {
        rules: usize,
        rps: [f64; 2],
        rss_mib: [u64; 2],
        p99: [f64; 2],
        propagation: [Option<f64>; 2],
    }

    const FIGURES: [Figures; 3] = [
        Figures {
            rules: 10,
            rps: [20_000.0, 25_000.0],
            rss_mib: [50, 20],
            p99: [200.0, 250.0],
            propagation: [Some(1.2), Some(1.4)],
        },
        Figures {
            rules: 1_000,
            rps: [19_800.0, 25_000.0],
            rss_mib: [52, 30],
            p99: [200.0, 300.0],
            propagation: [Some(1.1), None],
        },
        Figures {
            rules: 20_000,
            rps: [18_000.0, 24_000.0],
            rss_mib: [90, 220],
            p99: [210.0, 5_210.0],
            propagation: [Some(1.5), Some(2.5)],
        },
    ];

    fn results() -> Results {
        let mut r = Results::default();
        for round in [1, 2] {
            for f in &FIGURES {
                let seconds = f.propagation[round - 1];
                r.scale.push(ScaleRun {
                    rules: f.rules,
                    round,
                    matched: load(f.rps[0], 1e6 / f.rps[0]),
                    unmatched: load(f.rps[1], 1e6 / f.rps[1]),
                    rss_kib: Some(f.rss_mib[0] * 1024),
                    agent_rss_kib: Some(f.rss_mib[1] * 1024),
                    steady: latency("n", round, 5_000.0, [50.0, f.p99[0], 900.0]),
                    reload: latency("n", round, 5_000.0, [50.0, f.p99[1], 900.0]),
                    propagation: Propagation {
                        vms: 2,
                        reached: if seconds.is_some() { 2 } else { 1 },
                        seconds,
                    },
                });
            }
        }
        r
    }

    #[test]
    fn throughput_and_memory_compare_with_the_fewest_rules_in_the_same_round() {
        let r = results();
        let table = rules_at_scale(&r);
        let big = cells(&table, "| 20,000");
        assert_eq!(big.len(), 19, "{table}");
        // One rule applies: 18,000 ÷ 20,000, and 1e6/18,000 − 1e6/20,000 µs.
        assert_eq!(
            big[2..8],
            ["18,000", "0.900", "≥ 0.95", "**missed**", "55.56", "5.56"],
            "{table}"
        );
        // No rule applies: 24,000 ÷ 25,000.
        assert_eq!(
            big[8..14],
            ["24,000", "0.960", "≥ 0.95", "met", "41.67", "1.67"],
            "{table}"
        );
        // Envoy 90 MiB, 40 more than 10 rules; the agent 220 MiB, 200 more.
        assert_eq!(big[14..18], ["90.0", "40.0", "220.0", "200.0"], "{table}");
        let small = cells(&table, "| 10 ");
        assert_eq!(
            [&small[3], &small[4], &small[9], &small[15], &small[17]],
            ["—", "", "—", "—", "—"],
            "{table}"
        );
        // Only the largest count has the target.
        assert_eq!(cells(&table, "| 1,000")[4], "", "{table}");
        assert_eq!(rules_at_scale(&Results::default()), "Not run.\n");
    }

    #[test]
    fn a_reload_is_met_when_every_vm_reaches_it_within_the_bound_in_every_run() {
        let r = results();
        let table = rules_reload(&r);
        let row = |starts: &str| cells(&table, starts);
        // Every VM, both runs, the slowest after 1.4 s.
        assert_eq!(
            row("| 10 ")[7..11],
            [
                "2 of 2",
                "1.30 [1.20–1.40]",
                "≤ 2 s (one 1 s sync interval + 1 s)",
                "met"
            ],
            "{table}"
        );
        // One run left a VM behind.
        assert_eq!(row("| 1,000")[7..9], ["1 of 2", "1.10"], "{table}");
        assert_eq!(row("| 1,000")[10], "**missed**", "{table}");
        // Every VM, but one run took 2.5 s; the reload adds 5,000 µs at p99.
        assert_eq!(row("| 20,000")[5], "5,000", "{table}");
        assert_eq!(
            row("| 20,000")[7..9],
            ["2 of 2", "2.00 [1.50–2.50]"],
            "{table}"
        );
        assert_eq!(row("| 20,000")[10], "**missed**", "{table}");
        assert_eq!(rules_reload(&Results::default()), "Not run.\n");
    }
}
