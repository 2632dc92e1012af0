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
