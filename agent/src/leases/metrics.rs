//! Metrics of the lease path and the store behind it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshlimit_core::secret::{KeyId, KeyIds};
use meshlimit_store::redis::RedirectKind;
use prometheus::{Histogram, IntCounterVec, IntGauge, IntGaugeVec};

use crate::metrics::top_keys::TopKeys;
use crate::metrics::{inc, Factory, MetricsError, Registry};
use crate::trial::metrics::TrialMetrics;

/// Store latency buckets: 50 µs (an in-memory take) to 100 ms (a sick Redis).
const LATENCY_BUCKETS: [f64; 11] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
];
/// Scripts per Redis pipeline: every filter's misses of one batching window.
const PIPELINE_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
/// Items per store call; at most `MAX_LEASE_ITEMS` (64).
const BATCH_BUCKETS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// The lease path's metrics; denials are also counted by key for a rules
/// change's trial (`trial`).
pub struct LeaseMetrics {
    answers: AnswerMetrics,
    store: StoreMetrics,
    topology: TopologyMetrics,
    pool: PoolMetrics,
    top_rejected: IntGaugeVec,
    top_keys: Mutex<TopKeys>,
    /// How labels name customer keys: by the deployment's keyed hash.
    key_ids: KeyIds,
    trial: Arc<TrialMetrics>,
}

/// The answers given to the filters, by rule or reason.
struct AnswerMetrics {
    granted: IntCounterVec,
    tokens: IntCounterVec,
    denials: IntCounterVec,
    unavailable: IntCounterVec,
}

/// The store's calls and Redis pipelines: results, sizes and times.
struct StoreMetrics {
    requests: IntCounterVec,
    latency: Histogram,
    batch_size: Histogram,
    pipeline_size: Histogram,
    pipeline_latency: Histogram,
}

/// The Redis Cluster's nodes as the store sees them.
struct TopologyMetrics {
    events: IntCounterVec,
    redirects: IntCounterVec,
    nodes_down: IntGauge,
    node_down_ms: prometheus::IntCounter,
}

/// The node pool, and the region's live agents it is sized by.
struct PoolMetrics {
    dropped: IntCounterVec,
    handed_back: IntCounterVec,
    calls: IntCounterVec,
    live_nodes: IntGauge,
}

impl LeaseMetrics {
    /// Registers the lease path's metrics in `registry`; `key_ids` name keys
    /// in labels, and denials of rules on trial go to `trial` too.
    pub fn new(
        registry: &Registry,
        key_ids: KeyIds,
        trial: Arc<TrialMetrics>,
    ) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        Ok(Self {
            answers: AnswerMetrics::new(&f)?,
            store: StoreMetrics::new(&f)?,
            topology: TopologyMetrics::new(&f)?,
            pool: PoolMetrics::new(&f)?,
            top_rejected: f.gauges(
                "meshlimit_top_rejected_keys",
                "The ten keys the agent denied most (Space-Saving counts, upper bounds): \
                 the one metric that names keys, ten at a time.",
                &["rank", "rule", "key"],
            )?,
            top_keys: Mutex::default(),
            key_ids,
            trial,
        })
    }
}

impl AnswerMetrics {
    fn new(f: &Factory) -> Result<Self, MetricsError> {
        Ok(Self {
            granted: f.counters(
                "meshlimit_leases_granted_total",
                "Leases granted, by rule.",
                &["rule"],
            )?,
            tokens: f.counters(
                "meshlimit_lease_tokens_granted_total",
                "Tokens handed out in leases, by rule.",
                &["rule"],
            )?,
            denials: f.counters(
                "meshlimit_lease_denials_total",
                "Lease items denied (over the limit), by rule.",
                &["rule"],
            )?,
            unavailable: f.counters(
                "meshlimit_lease_unavailable_total",
                "Lease items answered `unavailable`, by reason.",
                &["reason"],
            )?,
        })
    }
}

impl StoreMetrics {
    fn new(f: &Factory) -> Result<Self, MetricsError> {
        Ok(Self {
            requests: f.counters(
                "meshlimit_store_requests_total",
                "Store operations (one per lease item), by result.",
                &["result"],
            )?,
            latency: f.histogram(
                "meshlimit_store_latency_seconds",
                "Time of one store call (one batch).",
                &LATENCY_BUCKETS,
            )?,
            batch_size: f.histogram(
                "meshlimit_store_batch_size",
                "Items per store call.",
                &BATCH_BUCKETS,
            )?,
            pipeline_size: f.histogram(
                "meshlimit_store_pipeline_size",
                "Lease scripts per Redis pipeline (one round trip to one node).",
                &PIPELINE_BUCKETS,
            )?,
            pipeline_latency: f.histogram(
                "meshlimit_store_pipeline_seconds",
                "Time of one Redis pipeline, including its batching window.",
                &LATENCY_BUCKETS,
            )?,
        })
    }
}

impl TopologyMetrics {
    fn new(f: &Factory) -> Result<Self, MetricsError> {
        let redirects = f.counters(
            "meshlimit_store_redirects_total",
            "Store calls sent once more to the Redis Cluster node a redirect named, by \
             kind: `moved` (the hash slot lives there now; the slot map is read again) or \
             `ask` (the hash slot is migrating and the key is already there). A call \
             redirected twice takes the failure policy.",
            &["kind"],
        )?;
        // Both series from the start, so a rate over a reshard has its zero.
        for kind in [RedirectKind::Moved, RedirectKind::Ask] {
            inc(&redirects, &[kind.as_str()], 0);
        }
        Ok(Self {
            events: f.counters(
                "meshlimit_store_topology_events_total",
                "Redis Cluster events seen by the store: slot_map_changed, node_down, node_up, node_replaced.",
                &["event"],
            )?,
            redirects,
            nodes_down: f.gauge(
                "meshlimit_store_nodes_down",
                "Redis nodes marked down now (their keys take the failure policy).",
            )?,
            node_down_ms: f.counter(
                "meshlimit_store_node_down_milliseconds_total",
                "Time Redis nodes spent down, counted when each comes back or is replaced.",
            )?,
        })
    }
}

impl PoolMetrics {
    fn new(f: &Factory) -> Result<Self, MetricsError> {
        Ok(Self {
            dropped: f.counters(
                "meshlimit_lease_tokens_dropped_total",
                "Pooled lease tokens that expired unspent (dropped, never hoarded), by rule.",
                &["rule"],
            )?,
            handed_back: f.counters(
                "meshlimit_pool_handed_back_tokens_total",
                "Pooled lease tokens the agent handed back to the store as it stopped, by \
                 result: `ok` (the bucket took them), `capped` (the bucket was full to its \
                 burst), `timeout`, `error`, `shed` (not handed back: they expire with their \
                 lease). The stopping agent also logs these figures.",
                &["result"],
            )?,
            calls: f.counters(
                "meshlimit_pool_calls_total",
                "Node-pool events by kind: `refill` (a store call started in the background \
                 when the pool fell below its refill mark; the ask was served from what was \
                 left), `wait` (an ask that waited on the store call in flight for its key \
                 instead of making its own), `denied` (an ask denied at the node from its \
                 cached store denial or its hold after a grant that drained the store's \
                 bucket, without a store call).",
                &["kind"],
            )?,
            live_nodes: f.gauge(
                "meshlimit_live_nodes",
                "Agents alive in the region, from their heartbeats in the store (0: unknown).",
            )?,
        })
    }
}

impl LeaseMetrics {
    /// The id a label shows for `key`.
    pub(crate) fn key_id(&self, key: &meshlimit_core::DescriptorKey) -> KeyId {
        self.key_ids.id(key)
    }

    /// The keyed hash that names keys.
    pub(crate) fn key_ids(&self) -> &KeyIds {
        &self.key_ids
    }

    pub(crate) fn lease_granted(&self, rule: &str, tokens: u32) {
        inc(&self.answers.granted, &[rule], 1);
        inc(&self.answers.tokens, &[rule], u64::from(tokens));
    }

    /// A denial for `key` of `rule` (also counted among the most rejected keys,
    /// which name the key by its id, never in clear).
    pub(crate) fn lease_denied(&self, rule: &str, key: &meshlimit_core::DescriptorKey) {
        inc(&self.answers.denials, &[rule], 1);
        let id = self.key_id(key).to_string();
        if let Ok(mut top) = self.top_keys.lock() {
            top.record(rule, &id, 1);
        }
        self.trial.denied(rule, &id);
    }

    /// An item answered `unavailable`; `reason` is a fixed word.
    pub(crate) fn lease_unavailable(&self, reason: &str) {
        inc(&self.answers.unavailable, &[reason], 1);
    }

    /// A Redis Cluster event (`event` is a fixed word).
    pub(crate) fn store_topology(&self, event: &str, down_for: Option<Duration>) {
        inc(&self.topology.events, &[event], 1);
        match (event, down_for) {
            ("node_down", _) => self.topology.nodes_down.inc(),
            (_, Some(d)) => {
                self.topology.nodes_down.dec();
                self.topology
                    .node_down_ms
                    .inc_by(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            }
            _ => {}
        }
    }

    /// A call sent once more where a MOVED or ASK named (`kind` is a fixed word).
    pub(crate) fn store_redirect(&self, kind: &str) {
        inc(&self.topology.redirects, &[kind], 1);
    }

    /// One store call of `items` items that took `latency`.
    pub(crate) fn store_call(&self, items: usize, latency: Duration) {
        self.store.batch_size.observe(items as f64);
        self.store.latency.observe(latency.as_secs_f64());
    }

    /// One Redis pipeline of `size` scripts that took `latency`.
    pub(crate) fn store_pipeline(&self, size: usize, latency: Duration) {
        self.store.pipeline_size.observe(size as f64);
        self.store.pipeline_latency.observe(latency.as_secs_f64());
    }

    /// A background refill of the pool started.
    pub(crate) fn pool_refill(&self) {
        inc(&self.pool.calls, &["refill"], 1);
    }

    /// `asks` waited on the store call in flight for their key.
    pub(crate) fn pool_waits(&self, asks: usize) {
        inc(&self.pool.calls, &["wait"], asks as u64);
    }

    /// `tokens` of the node pool handed back to the store as the agent
    /// stopped, with `result` (a fixed word).
    pub(crate) fn pool_handed_back(&self, result: &str, tokens: u64) {
        inc(&self.pool.handed_back, &[result], tokens);
    }

    /// An ask denied from the node's cached denial or hold (no store call).
    pub(crate) fn pool_denied(&self) {
        inc(&self.pool.calls, &["denied"], 1);
    }

    /// `tokens` pooled for `rule` expired unspent.
    pub(crate) fn tokens_dropped(&self, rule: &str, tokens: u32) {
        inc(&self.pool.dropped, &[rule], u64::from(tokens));
    }

    /// Re-exports the ten most rejected keys (old ranks are cleared first), and
    /// those of the rules on trial.
    pub(crate) fn refresh_top_keys(&self) {
        self.trial.refresh_keys();
        let top = match self.top_keys.lock() {
            Ok(t) => t.top(),
            Err(_) => return,
        };
        self.top_rejected.reset();
        for (rank, (rule, key, count)) in top.iter().enumerate() {
            let rank = (rank + 1).to_string();
            if let Ok(g) = self
                .top_rejected
                .get_metric_with_label_values(&[&rank, rule, key])
            {
                g.set(i64::try_from(*count).unwrap_or(i64::MAX));
            }
        }
    }

    /// The region's live agents, from the heartbeats.
    pub(crate) fn live_nodes(&self, n: u32) {
        self.pool.live_nodes.set(i64::from(n));
    }

    /// `n` store operations ended with `result` (ok, error, timeout, shed).
    pub(crate) fn store_results(&self, result: &str, n: u64) {
        inc(&self.store.requests, &[result], n);
    }
}
