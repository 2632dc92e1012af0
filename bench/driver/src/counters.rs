//! Counters read around a run: the agent's Prometheus text, meshlimit's
//! lease-call counters in Envoy's admin stats, a process's resident memory.

use std::collections::BTreeMap;

use crate::error::{BenchError, Context, Result};
use crate::phases::MESHLIMIT_STATS;
use crate::records::LeaseCounts;

/// The sum of the samples of `metric` whose labels hold `label` (`rule="x"`),
/// or of every sample of it when `label` is empty; `None` when there is none.
pub fn prometheus_sum(text: &str, metric: &str, label: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        if name != metric || !labels_hold(labels, label) {
            continue;
        }
        if let Ok(v) = value.trim().parse::<f64>() {
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

/// Whether a sample's label text (`a="x",b="y"}`) holds `label` (`b="y"`).
fn labels_hold(labels: &str, label: &str) -> bool {
    label.is_empty()
        || labels
            .trim_end_matches('}')
            .split(',')
            .any(|l| l.trim() == label)
}

/// The value of label `name` on the first nonzero sample of `metric` (an info
/// gauge such as `meshlimit_rules_version_info{version="…"} 1`).
pub fn prometheus_label(text: &str, metric: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let labels = series.strip_prefix(metric)?.strip_prefix('{')?;
        if value.trim().parse::<f64>().ok()? == 0.0 {
            return None;
        }
        let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
        let rest = &labels[start..];
        Some(rest[..rest.find('"')?].to_string())
    })
}

/// Filter VMs the agent last heard report rules `version`
/// (`meshlimit_filters_on_version`); 0 when none does.
pub fn vms_on_version(text: &str, version: &str) -> u64 {
    let label = format!("version=\"{version}\"");
    prometheus_sum(text, "meshlimit_filters_on_version", &label).map_or(0, |n| n.max(0.0) as u64)
}

/// Lease items the agent answered for `rule` (granted or denied) between two
/// readings of its /metrics.
pub fn agent_lease_items(before: &str, after: &str, rule: &str) -> Option<u64> {
    let label = format!("rule=\"{rule}\"");
    let items = |text: &str| {
        let granted = prometheus_sum(text, "meshlimit_leases_granted_total", &label);
        let denied = prometheus_sum(text, "meshlimit_lease_denials_total", &label);
        match (granted, denied) {
            (None, None) => None,
            (g, d) => Some(g.unwrap_or(0.0) + d.unwrap_or(0.0)),
        }
    };
    let after = items(after)?;
    Some((after - items(before).unwrap_or(0.0)).max(0.0) as u64)
}

/// The filter's lease counters between two readings of Envoy's meshlimit
/// stats; a counter this filter build does not define stays `None`.
pub fn lease_counts(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> LeaseCounts {
    let delta = |name: &str| {
        let key = format!("{MESHLIMIT_STATS}{name}");
        let a = after.get(&key)?;
        Some(a.saturating_sub(before.get(&key).copied().unwrap_or(0)))
    };
    LeaseCounts {
        calls: delta("lease_calls"),
        refills: delta("lease_refills"),
        waits: delta("lease_waits"),
    }
}

/// `VmRSS` of a `/proc/<pid>/status` text, in KiB.
pub fn vm_rss_kib(status: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        l.strip_prefix("VmRSS:")?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}

/// A running process's resident memory, in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).context(&path)?;
    vm_rss_kib(&status).ok_or_else(|| BenchError::new(format!("{path}: no VmRSS line")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "\
# HELP meshlimit_leases_granted_total Leases granted, by rule.
# TYPE meshlimit_leases_granted_total counter
meshlimit_leases_granted_total{rule=\"bench-lease\"} 120
meshlimit_leases_granted_total{rule=\"bench-lease-3x\"} 7
meshlimit_lease_denials_total{rule=\"bench-lease-3x\"} 30
meshlimit_rules_version_info{version=\"old\"} 0
meshlimit_rules_version_info{version=\"9f2c\"} 1
meshlimit_filters_on_version{version=\"9f2c\"} 2
";

    #[test]
    fn reads_prometheus_samples_by_label() {
        let sum = |m: &str, l: &str| prometheus_sum(METRICS, m, l);
        assert_eq!(
            sum("meshlimit_leases_granted_total", "rule=\"bench-lease\""),
            Some(120.0)
        );
        assert_eq!(sum("meshlimit_leases_granted_total", ""), Some(127.0));
        assert_eq!(sum("meshlimit_leases_granted_total", "rule=\"x\""), None);
        // A metric whose name only starts with the one asked for is another.
        assert_eq!(sum("meshlimit_leases_granted", ""), None);
        assert_eq!(
            prometheus_label(METRICS, "meshlimit_rules_version_info", "version"),
            Some("9f2c".into())
        );
        assert_eq!(
            prometheus_label(METRICS, "meshlimit_absent", "version"),
            None
        );
        assert_eq!(vms_on_version(METRICS, "9f2c"), 2);
        assert_eq!(vms_on_version(METRICS, "old"), 0);
        assert_eq!(vms_on_version(METRICS, "9f2"), 0);
    }

    #[test]
    fn counts_the_agents_lease_items_for_a_rule() {
        let before = "meshlimit_leases_granted_total{rule=\"bench-lease-3x\"} 2\n";
        assert_eq!(
            agent_lease_items(before, METRICS, "bench-lease-3x"),
            Some(35)
        );
        assert_eq!(agent_lease_items("", METRICS, "bench-lease"), Some(120));
        assert_eq!(agent_lease_items("", METRICS, "bench-new"), None);
    }

    #[test]
    fn lease_counters_are_absent_until_the_filter_defines_them() {
        let stats = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs
                .iter()
                .map(|(k, v)| (format!("wasmcustom.meshlimit.{k}"), *v))
                .collect()
        };
        let old = stats(&[("rule.bench-lease.allowed", 10)]);
        assert_eq!(lease_counts(&old, &old), LeaseCounts::default());
        let before = stats(&[("lease_calls", 5), ("lease_waits", 1)]);
        let after = stats(&[
            ("lease_calls", 25),
            ("lease_waits", 4),
            ("lease_refills", 9),
        ]);
        assert_eq!(
            lease_counts(&before, &after),
            LeaseCounts {
                calls: Some(20),
                refills: Some(9),
                waits: Some(3)
            }
        );
    }

    #[test]
    fn reads_vm_rss() {
        let status = "Name:\tenvoy\nVmPeak:\t  900000 kB\nVmRSS:\t   61234 kB\nThreads:\t12\n";
        assert_eq!(vm_rss_kib(status), Some(61_234));
        assert_eq!(vm_rss_kib("Name:\tx\n"), None);
        assert!(rss_kib(std::process::id()).is_ok_and(|kib| kib > 0));
    }
}
