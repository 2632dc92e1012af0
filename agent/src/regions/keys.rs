//! The Redis keys of the region exchange, all in a region's own Redis (its agents
//! write, every region's rebalancer reads). Keys per key-bucket carry the bucket in
//! a hash tag, so each is one slot of a Redis Cluster and every command or atomic
//! pipeline touches one slot; the buckets spread the exchange over the nodes.
//!
//! | key | type | written by | read by |
//! |---|---|---|---|
//! | `ml:rg:{b<NN>}:d:<period>` | hash key → tokens offered | the region's agents (HINCRBY, a few times a second) | its leader, which renames it to the sealed key |
//! | `ml:rg:{b<NN>}:m:<period>` | string: the period is sealed | the region's leader | agents: later demand goes to the next period |
//! | `ml:rg:{b<NN>}:x:<period>` | hash key → tokens offered (sealed) | the region's leader (RENAME) | every region's leader |
//! | `ml:rg:{b<NN>}:s` | hash key → `"<share> <global demand>"` | the region's leader (MULTI DEL, HSET, PEXPIRE) | the region's agents |
//! | `ml:rg:{meta}` | hash `sealed`, `period`, `leader` | the region's leader | agents (`period`), other leaders (`sealed`) |
//! | `ml:rg:{lock}` | string: the leader's id, with expiry | the election | the election |

use meshlimit_core::fingerprint::fingerprint;

/// Key buckets: enough to spread over the nodes of a cluster, few enough that a
/// tick's reads stay a handful of round trips run at once.
pub const BUCKETS: usize = 16;

/// The hash of the rebalancer's progress in a region.
pub const META: &str = "ml:rg:{meta}";
/// The lock electing the region's rebalancer.
pub const LOCK: &str = "ml:rg:{lock}";

/// `META` fields.
pub const SEALED: &str = "sealed";
pub const PERIOD: &str = "period";
pub const LEADER: &str = "leader";

/// The bucket of a descriptor key.
pub fn bucket(key: &str) -> usize {
    (fingerprint(key.as_bytes()) % BUCKETS as u64) as usize
}

/// Demand being written for `period`.
pub fn demand(bucket: usize, period: u64) -> String {
    format!("ml:rg:{{b{bucket:02}}}:d:{period}")
}

/// Set when `period` is sealed: later flushes for it go to the next period.
pub fn marker(bucket: usize, period: u64) -> String {
    format!("ml:rg:{{b{bucket:02}}}:m:{period}")
}

/// Demand sealed for `period`: what every region's rebalancer reads.
pub fn sealed(bucket: usize, period: u64) -> String {
    format!("ml:rg:{{b{bucket:02}}}:x:{period}")
}

/// The region's published shares.
pub fn shares(bucket: usize) -> String {
    format!("ml:rg:{{b{bucket:02}}}:s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::topology::slot;

    #[test]
    fn a_bucket_is_one_slot_and_buckets_spread() {
        let mut slots = Vec::new();
        for b in 0..BUCKETS {
            let s = slot(&shares(b));
            assert_eq!(s, slot(&demand(b, 7)));
            assert_eq!(s, slot(&sealed(b, 9)));
            assert_eq!(s, slot(&marker(b, 9)));
            slots.push(s);
        }
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), BUCKETS);
        // Three equal masters each own some buckets.
        for third in 0..3u16 {
            let range = (third * 5461)..((third + 1) * 5461);
            assert!(slots.iter().any(|s| range.contains(s)), "{slots:?}");
        }
    }

    #[test]
    fn a_key_always_lands_in_the_same_bucket() {
        assert_eq!(bucket("r|alice"), bucket("r|alice"));
        assert!(bucket("r|bob") < BUCKETS);
    }
}
