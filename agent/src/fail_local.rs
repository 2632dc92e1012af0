//! The node's fail-local ceiling while the store is unreachable. Several
//! filters (sidecars) may share one agent, so the ceiling lives here, once per
//! node: a bucket per key at the rule's limit × region share × safety factor
//! (`FAIL_LOCAL_SAFETY`, 2) ÷ live agents in the region. The filter's own
//! fail-local bucket (its slot's `fallback`) takes over only when the agent
//! itself is unreachable.

use std::collections::HashMap;
use std::sync::Mutex;

use meshlimit_core::policy::FAIL_LOCAL_SAFETY;
use meshlimit_core::{Bucket, DescriptorKey, Limit, Take};

pub struct FailLocal {
    buckets: Mutex<HashMap<DescriptorKey, Bucket>>,
    max_keys: usize,
}

/// At most `--max-keys`' default keys; past that, full buckets (equal to absent
/// ones) are dropped first, and if none is full the key is refused a fail-local bucket
/// (denied) rather than given a fresh bucket.
impl Default for FailLocal {
    fn default() -> Self {
        Self::new(crate::config::defaults::max_keys())
    }
}

impl FailLocal {
    /// Fail-local buckets for at most `max_keys` keys.
    pub fn new(max_keys: usize) -> Self {
        Self {
            buckets: Mutex::default(),
            max_keys: max_keys.max(1),
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.buckets.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes `cost` from `key`'s fail-local bucket under `limit` (already this
    /// node's slice of the rule). `demand_per_sec` is what the node was spending
    /// on the key from the store (its leases): a bucket made for a key that was
    /// being served starts with one request ([`head_start`]), so the ceiling
    /// holds from the first request instead of granting a burst on top of the
    /// leases already out. A cold key starts full.
    pub fn take(
        &self,
        key: &DescriptorKey,
        limit: &Limit,
        now_ns: u64,
        cost: u32,
        demand_per_sec: f64,
    ) -> Take {
        let Ok(mut map) = self.buckets.lock() else {
            return Take::Denied {
                retry_after_ns: 1_000_000_000,
            };
        };
        if !map.contains_key(key) && map.len() >= self.max_keys {
            map.retain(|_, b| !b.is_full(limit, now_ns));
            if map.len() >= self.max_keys {
                return Take::Denied {
                    retry_after_ns: 1_000_000_000,
                };
            }
        }
        map.entry(key.clone())
            .or_insert_with(|| Bucket::from_parts(head_start(limit, cost, demand_per_sec), now_ns))
            .take(limit, now_ns, cost, cost)
    }

    /// The store answered for `key` again: its fail-local bucket is dropped, so
    /// the next outage starts from the node's demand then, not a bucket that
    /// refilled meanwhile.
    pub(crate) fn forget(&self, key: &DescriptorKey) {
        if let Ok(mut map) = self.buckets.lock() {
            if !map.is_empty() {
                map.remove(key);
            }
        }
    }

    /// This node's slice of `limit` given the region's `share` and live agents.
    pub(crate) fn node_limit(limit: &Limit, share: f64, live_nodes: u32) -> Limit {
        limit.scaled(share.min(1.0) * FAIL_LOCAL_SAFETY / f64::from(live_nodes.max(1)))
    }
}

/// The tokens a new fail-local bucket holds: a cold key's full burst; a key the
/// node was spending (any demand) one request's worth, since the leases it
/// already holds are its head start and the ceiling's rate holds from the
/// first request of the outage. (The filter's own bucket starts the same way.)
pub(crate) fn head_start(limit: &Limit, cost: u32, demand_per_sec: f64) -> f64 {
    let burst = f64::from(limit.burst());
    if demand_per_sec > 0.0 || !demand_per_sec.is_finite() {
        f64::from(cost).min(burst.max(f64::from(cost)))
    } else {
        burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshlimit_core::NANOS_PER_SEC;
    use std::num::{NonZeroU32, NonZeroU64};

    #[test]
    fn each_node_admits_its_slice_of_twice_the_limit() {
        let limit = Limit::new(
            NonZeroU32::new(10).unwrap(),
            NonZeroU64::new(NANOS_PER_SEC).unwrap(),
            NonZeroU32::new(10).unwrap(),
        );
        let node = FailLocal::node_limit(&limit, 1.0, 4);
        assert_eq!((node.requests(), node.burst()), (5, 5));
        let f = FailLocal::default();
        let key = DescriptorKey::new("r", ["k"]);
        let admitted = (0..20)
            .filter(|_| matches!(f.take(&key, &node, 0, 1, 0.0), Take::Granted { .. }))
            .count();
        assert_eq!(admitted, 5);
    }

    #[test]
    fn at_most_max_keys_are_held_and_a_full_bucket_makes_room() {
        let limit = Limit::new(
            NonZeroU32::new(10).unwrap(),
            NonZeroU64::new(NANOS_PER_SEC).unwrap(),
            NonZeroU32::new(10).unwrap(),
        );
        let f = FailLocal::new(2);
        let key = |k: &str| DescriptorKey::new("r", [k]);
        let granted = |t: Take| matches!(t, Take::Granted { .. });
        assert!(granted(f.take(&key("a"), &limit, 0, 1, 0.0)));
        assert!(granted(f.take(&key("b"), &limit, 0, 1, 0.0)));
        assert_eq!(f.len(), 2);
        // Both in use: a third key is refused, not given a bucket.
        assert!(!granted(f.take(&key("c"), &limit, 0, 1, 0.0)));
        assert_eq!(f.len(), 2);
        // A held key still takes from its own bucket.
        assert!(granted(f.take(&key("a"), &limit, 0, 1, 0.0)));
        // Once the buckets have refilled (full: nothing to remember), they are
        // swept and the new key gets one.
        assert!(granted(f.take(&key("c"), &limit, NANOS_PER_SEC, 1, 0.0)));
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn a_key_the_node_was_spending_gets_no_head_start() {
        let limit = Limit::new(
            NonZeroU32::new(20).unwrap(),
            NonZeroU64::new(NANOS_PER_SEC).unwrap(),
            NonZeroU32::new(20).unwrap(),
        );
        let node = FailLocal::node_limit(&limit, 1.0, 1);
        let f = FailLocal::default();
        let key = DescriptorKey::new("r", ["hot"]);
        // 40/s demand on a 40-token bucket: one request now, then the rate.
        let now: Vec<bool> = (0..5)
            .map(|_| matches!(f.take(&key, &node, 0, 1, 40.0), Take::Granted { .. }))
            .collect();
        assert_eq!(now, [true, false, false, false, false]);
        // Over the first second: the head start plus the rate (40/s), no burst.
        let second = (1..=1000u64)
            .filter(|ms| {
                matches!(
                    f.take(&key, &node, ms * 1_000_000, 1, 40.0),
                    Take::Granted { .. }
                )
            })
            .count();
        assert_eq!(second, 40);
        // Any demand counts as in use: a quarter of the limit gets no more.
        assert_eq!(head_start(&node, 1, 10.0), 1.0);
        f.forget(&key);
        assert!(matches!(
            f.take(&key, &node, 0, 1, 0.0),
            Take::Granted { remaining: 39, .. }
        ));
    }
}
