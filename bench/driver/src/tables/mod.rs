//! The report's tables. Each figure is shown as median [min–max] over rounds,
//! beside its baseline from the same run and the target from docs/performance/method.md.

mod costs;
mod latency;
mod path;
mod scale;
mod throughput;

use crate::number::fmt_num;
use crate::records::{Spread, Throughput};
use crate::scenario;

pub use costs::{agent, micro};
pub use latency::latency;
pub use path::{request_path_costs, request_path_latency};
pub use scale::{rules_at_scale, rules_reload};
pub use throughput::{attribution, headline, over_limit, throughput};

/// Requests a run admitted per second.
pub(super) fn admitted(t: &Throughput) -> f64 {
    t.wrk.admitted_rps()
}

/// Envoy CPU microseconds per request, from /proc.
pub(super) fn cpu_us(t: &Throughput) -> f64 {
    t.envoy_cpu_s / t.wrk.requests.max(1) as f64 * 1e6
}

/// 1/(req/s of x) − 1/(req/s of base), in microseconds: the added Envoy CPU per
/// request of a saturated single-worker Envoy.
pub(super) fn added_us(x: &Throughput, base: &Throughput) -> f64 {
    (1.0 / admitted(x) - 1.0 / admitted(base)) * 1e6
}

pub fn fmt_spread(s: Option<Spread>, decimals: usize) -> String {
    match s {
        Some(s) if s.min == s.max => fmt_num(s.median, decimals),
        Some(s) => format!(
            "{} [{}–{}]",
            fmt_num(s.median, decimals),
            fmt_num(s.min, decimals),
            fmt_num(s.max, decimals)
        ),
        None => "n/a".into(),
    }
}

/// The share of meshlimit's decisions (`<rule>.<outcome>` counts) a failure
/// policy took, with their number; empty when there were none.
pub(super) fn failure_policy_share<'a>(
    decisions: impl Iterator<Item = (&'a String, &'a u64)>,
) -> String {
    let (mut failed, mut all) = (0u64, 0u64);
    for (name, n) in decisions {
        all += n;
        if name.contains(".failed_") {
            failed += n;
        }
    }
    if all == 0 {
        return String::new();
    }
    format!(
        "{:.2}% of {}",
        failed as f64 / all as f64 * 100.0,
        fmt_num(all as f64, 0)
    )
}

/// A target judged over a figure's whole range: met when min and max both
/// meet it, missed when neither does, inconclusive when the range straddles it.
pub(super) fn judged(s: Option<Spread>, ok: fn(f64) -> bool) -> &'static str {
    match s.map(|s| (ok(s.min), ok(s.max))) {
        None => "n/a",
        Some((true, true)) => "met",
        Some((false, false)) => "**missed**",
        Some(_) => "inconclusive",
    }
}

/// `num` ÷ `den`, when `den` is above zero: an added cost at or below zero is
/// noise, and a ratio over it means nothing.
pub(super) fn ratio(num: f64, den: f64) -> Option<f64> {
    (den > 0.0).then(|| num / den)
}

pub(super) fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "n/a",
    }
}

pub(super) fn label(id: &str) -> String {
    let all = scenario::throughput_round()
        .into_iter()
        .chain(scenario::over_limit(0))
        .chain(scenario::request_path());
    all.into_iter()
        .find(|s| s.id == id)
        .map_or_else(|| id.to_string(), |s| format!("({id}) {}", s.label))
}

/// What the tables' unit tests build their runs from and read them with.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_inconclusive_when_the_range_straddles_it() {
        let s = |median, min, max| Some(Spread { median, min, max });
        let at_most_one: fn(f64) -> bool = |v| v <= 1.0;
        assert_eq!(judged(s(0.8, 0.7, 0.9), at_most_one), "met");
        assert_eq!(judged(s(1.2, 1.1, 1.3), at_most_one), "**missed**");
        assert_eq!(judged(s(0.9, 0.8, 1.2), at_most_one), "inconclusive");
        assert_eq!(judged(s(1.1, 0.9, 1.2), at_most_one), "inconclusive");
        assert_eq!(judged(None, at_most_one), "n/a");
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, -2.0), None);
        assert_eq!(ratio(1.0, 4.0), Some(0.25));
    }
}

#[cfg(test)]
mod fixtures {
    use crate::records::Latency;

    pub fn latency(id: &'static str, round: usize, rate: f64, p: [f64; 3]) -> Latency {
        Latency {
            scenario: id,
            round,
            rate,
            p50: p[0],
            p99: p[1],
            p999: p[2],
            max: p[2] * 2.0,
            admitted_p50: p[0],
            admitted_p99: p[1],
            admitted_p999: p[2],
            completed: 9_000,
            issued: 10_000,
            errors: 0,
            non_2xx: 0,
        }
    }

    pub fn cells(table: &str, starts: &str) -> Vec<String> {
        let line = table
            .lines()
            .find(|l| l.starts_with(starts))
            .unwrap_or_default();
        line.split('|').map(|c| c.trim().to_string()).collect()
    }
}
