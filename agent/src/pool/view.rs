//! What the node pool shows an operator (`GET /v1/explain`): a key's tokens,
//! hold, store call and demand, read without changing them.

use meshlimit_core::DescriptorKey;

use super::Pools;

/// What the node pool holds for one key.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PoolView {
    /// Tokens the pool holds for the node's filters.
    pub tokens: u32,
    /// Until they expire.
    pub expires_in_ms: u64,
    /// The pool's hold (a denial, or the wait after a drained grant).
    pub denied_for_ms: u64,
    /// A store call for the key is out.
    pub call_in_flight: bool,
    /// The node's demand for the key, tokens a second.
    pub demand_per_sec: f64,
}

impl Pools {
    /// What the pool holds for the keys `matches` picks (an operator's view,
    /// `GET /v1/explain`; scans every shard).
    pub fn view(&self, now_ns: u64, matches: impl Fn(&DescriptorKey) -> bool) -> Vec<PoolView> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let Ok(map) = shard.lock() else { continue };
            out.extend(map.iter().filter(|(k, _)| matches(k)).map(|(_, e)| {
                let lease = e.key.lease();
                PoolView {
                    tokens: lease.usable(now_ns),
                    expires_in_ms: lease.expires_ns.saturating_sub(now_ns).div_ceil(1_000_000),
                    denied_for_ms: lease
                        .denied_until_ns()
                        .saturating_sub(now_ns)
                        .div_ceil(1_000_000),
                    call_in_flight: lease.in_flight(now_ns),
                    demand_per_sec: lease.demand_per_sec(now_ns),
                }
            }));
        }
        out
    }
}
