//! Metrics of the region exchange. Shares are aggregated per rule, plus the
//! region's share of the `TOP_KEYS` keys with the most demand over all regions
//! (the one bounded place a customer key appears as a label); the rebalancer's
//! results and duration; the leader; whether each region could be read.

use std::sync::Mutex;
use std::time::Duration;

use meshlimit_core::DescriptorKey;
use prometheus::{GaugeVec, Histogram, IntCounterVec, IntGauge, IntGaugeVec};

use crate::metrics::{inc, lock, set, Factory, MetricsError, Registry};
use crate::regions::table::ShareTable;

/// Keys shown with their share.
pub(crate) const TOP_KEYS: usize = 10;

/// From a sealed read to a publication: a few round trips to every region.
const REBALANCE_BUCKETS: [f64; 9] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// The region exchange's metrics (registered whether regions are on or not,
/// so that their series exist in every agent).
pub struct RegionMetrics {
    shares: ShareMetrics,
    exchange: ExchangeMetrics,
    election: ElectionMetrics,
    shown: Mutex<Shown>,
}

/// The shares in force: per rule, for the top keys, and how fresh they are.
struct ShareMetrics {
    share: GaugeVec,
    share_keys: IntGaugeVec,
    share_mean: GaugeVec,
    period: IntGauge,
    age: GaugeVec,
    adopted_at: GaugeVec,
}

/// What this agent reads and writes of the exchange, and its rebalances.
struct ExchangeMetrics {
    refreshes: IntCounterVec,
    flushes: IntCounterVec,
    rebalances: IntCounterVec,
    rebalance_seconds: Histogram,
}

/// The region's rebalancer, and the regions it could read.
struct ElectionMetrics {
    leader: IntGauge,
    leader_info: IntGaugeVec,
    peer_up: IntGaugeVec,
}

/// Label values currently shown, to remove them once they leave.
#[derive(Default)]
struct Shown {
    /// `(rule, key)` of `meshlimit_region_share`.
    keys: Vec<(String, String)>,
    /// Rules of the per-rule summaries.
    rules: Vec<String>,
    leader: Option<String>,
}

impl ShareMetrics {
    fn new(f: &Factory) -> Result<Self, MetricsError> {
        Ok(Self {
            share: f.ratios(
                "meshlimit_region_share",
                "This region's share of a global limit, for the keys with the most demand.",
                &["rule", "key"],
            )?,
            share_keys: f.gauges(
                "meshlimit_region_share_keys",
                "Keys of a global rule with a published share in this region.",
                &["rule"],
            )?,
            share_mean: f.ratios(
                "meshlimit_region_share_mean",
                "This region's mean share over the keys of a global rule with a published share.",
                &["rule"],
            )?,
            period: f.gauge(
                "meshlimit_region_shares_period",
                "The period (Unix second) whose demand the cached shares follow.",
            )?,
            age: f.ratios(
                "meshlimit_region_shares_age_seconds",
                "How old the demand behind the cached shares is (about 1 s when healthy).",
                &[],
            )?,
            adopted_at: f.ratios(
                "meshlimit_region_shares_refreshed_timestamp_seconds",
                "When this agent last put newly published shares in force (Unix time).",
                &[],
            )?,
        })
    }
}

impl ExchangeMetrics {
    fn new(f: &Factory) -> Result<Self, MetricsError> {
        Ok(Self {
            refreshes: f.counters(
                "meshlimit_region_share_refreshes_total",
                "Reads of the region's published shares, by result (ok, unchanged, error).",
                &["result"],
            )?,
            flushes: f.counters(
                "meshlimit_region_demand_flushes_total",
                "Demand batches written to the region's Redis, by result.",
                &["result"],
            )?,
            rebalances: f.counters(
                "meshlimit_region_rebalances_total",
                "Rebalances run by this agent as leader, by result (ok, stale: a region unreadable, error).",
                &["result"],
            )?,
            rebalance_seconds: f.histogram(
                "meshlimit_region_rebalance_duration_seconds",
                "Time of one rebalance: seal, read every region, publish.",
                &REBALANCE_BUCKETS,
            )?,
        })
    }
}

impl ElectionMetrics {
    fn new(f: &Factory) -> Result<Self, MetricsError> {
        Ok(Self {
            leader: f.gauge(
                "meshlimit_region_leader",
                "1 while this agent is its region's rebalancer.",
            )?,
            leader_info: f.gauges(
                "meshlimit_region_leader_info",
                "The region's rebalancer as this agent last read it (1).",
                &["leader"],
            )?,
            peer_up: f.gauges(
                "meshlimit_region_up",
                "1 if the last rebalance could read the region's sealed demand (set by the leader).",
                &["region"],
            )?,
        })
    }
}

impl RegionMetrics {
    /// Registers the region exchange's metrics in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        Ok(Self {
            shares: ShareMetrics::new(&f)?,
            exchange: ExchangeMetrics::new(&f)?,
            election: ElectionMetrics::new(&f)?,
            shown: Mutex::default(),
        })
    }

    /// This agent's standing in the election, and the holder it read.
    pub(crate) fn region_leader(&self, is_leader: bool, holder: Option<&str>) {
        let m = self;
        m.election.leader.set(i64::from(is_leader));
        let mut shown = lock(&m.shown);
        if shown.leader.as_deref() != holder {
            if let Some(old) = shown.leader.take() {
                let _ = m.election.leader_info.remove_label_values(&[&old]);
            }
            if let Some(h) = holder {
                if let Ok(g) = m.election.leader_info.get_metric_with_label_values(&[h]) {
                    g.set(1);
                }
            }
            shown.leader = holder.map(str::to_string);
        }
    }

    /// Whether the leader could read `region` this period.
    pub(crate) fn region_peer(&self, region: &str, up: bool) {
        if let Ok(g) = self
            .election
            .peer_up
            .get_metric_with_label_values(&[region])
        {
            g.set(i64::from(up));
        }
    }

    /// A rebalance ended with `result` (ok, stale, error) after `took`.
    pub(crate) fn region_rebalance(&self, result: &str, took: Duration) {
        inc(&self.exchange.rebalances, &[result], 1);
        self.exchange.rebalance_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn region_flush(&self, ok: bool) {
        inc(
            &self.exchange.flushes,
            &[if ok { "ok" } else { "error" }],
            1,
        );
    }

    /// A shares refresh ended with `result`; `ok` means new shares are in force
    /// from `now_ms`.
    pub(crate) fn region_refresh(&self, result: &str, now_ms: u64) {
        inc(&self.exchange.refreshes, &[result], 1);
        if result == "ok" {
            set(&self.shares.adopted_at, &[], now_ms as f64 / 1_000.0);
        }
    }

    /// Shows the cached shares: per rule, and for the top keys.
    pub(crate) fn region_shares(&self, table: &ShareTable, now_ms: u64) {
        let m = self;
        if let Some(p) = table.period {
            m.shares.period.set(i64::try_from(p).unwrap_or(i64::MAX));
            set(&m.shares.age, &[], now_ms as f64 / 1_000.0 - (p + 1) as f64);
        }
        let mut shown = lock(&m.shown);
        let by_rule = table.by_rule();
        for old in shown.rules.iter().filter(|r| !by_rule.contains_key(*r)) {
            let _ = m.shares.share_keys.remove_label_values(&[old]);
            let _ = m.shares.share_mean.remove_label_values(&[old]);
        }
        for (rule, s) in &by_rule {
            if let Ok(g) = m.shares.share_keys.get_metric_with_label_values(&[rule]) {
                g.set(i64::try_from(s.keys).unwrap_or(i64::MAX));
            }
            set(&m.shares.share_mean, &[rule], s.mean_share);
        }
        shown.rules = by_rule.into_keys().collect();
        let top: Vec<(String, String, f64)> = table
            .top(TOP_KEYS)
            .into_iter()
            .map(|(key, e)| (rule_of(key), key.to_string(), e.share))
            .collect();
        for (rule, key) in &shown.keys {
            if !top.iter().any(|(r, k, _)| r == rule && k == key) {
                let _ = m.shares.share.remove_label_values(&[rule, key]);
            }
        }
        for (rule, key, share) in &top {
            set(&m.shares.share, &[rule, key], *share);
        }
        shown.keys = top.into_iter().map(|(r, k, _)| (r, k)).collect();
    }
}

fn rule_of(key: &str) -> String {
    DescriptorKey::from_wire(key.to_string()).rule().to_string()
}
