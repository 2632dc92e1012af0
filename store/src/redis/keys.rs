//! Every Redis key the agent reads or writes, named here and nowhere else: the
//! token buckets and the agents' heartbeat of the lease store, and the region
//! exchange ([`region`]). Every key carries a hash tag (`{…}`), so each command,
//! script or atomic pipeline touches one hash slot of a Redis Cluster. No key holds a
//! customer key in clear: keys are named by their key id (`core::secret`).
//!
//! The `ml:{fleet}:…` keys are control state (`super::super::control`): every
//! value carries a MAC under the deployment secret and is read back only
//! within a size cap. Agents write the trial start and the versions; only
//! operators' tools (`meshlimit override`) write the override and a
//! trial's end or hold. Redis ACLs that keep the two apart: docs/operations/redis-acl.md.
//!
//! | key | type | written by |
//! |---|---|---|
//! | `ml:{<key id>}:<rule>` | hash `t` (tokens), `u` (µs of the server's `TIME`); a window rule's `w` (window index), `c` (count), `p` (previous window's count) | the lease script |
//! | `ml:{agents}` | sorted set, agent id → ms of its last heartbeat | the heartbeat script; `ZREM` by an agent as it stops |
//! | `ml:{fleet}:override` | string, sealed (`<MAC> <JSON>`): JSON `{"mode":"shadow"\|"pin","set_by":…,"at":…}` (`"version"` too for pin); absent when off | `meshlimit override` (the override script) |
//! | `ml:{fleet}:trial:<version>` | hash `start_ms` (the server's `TIME`), `period_ms`, `plan` (JSON), `plan_mac`, `mac`; `ended_ms`, `held`, `control_mac` | the trial script (the first agent to install the version: HSETNX), `override end-trial\|hold-trial` (the trial control script) |
//! | `ml:{fleet}:trial` | string, sealed: the version whose trial started last | the trial script; read by `override end-trial\|hold-trial` |
//! | `ml:{fleet}:rules` | hash `current`, `previous`: the rules versions served now and before; `mac` | every agent installing a version over another (the versions script); read by `override pin` |
//! | `ml:{fleet}:audit` | list, newest first, of sealed JSON `{"at_ms":…,"by":…,"what":…}`: the last 1,000 changes to the keys above | every script that changes one of them; read by `override history` |
//! | `ml:rg:…` | the region exchange | see [`region`] |
//!
//! The test harness (`tests/src/lib.rs`, `redis_bucket_key`, `exchange_key`)
//! builds the same names on its own, from the outside: the end-to-end tests that
//! look into Redis then guard the format itself, which operators' tooling and
//! `meshlimit key-id` depend on.

use meshlimit_core::secret::KeyIds;
use meshlimit_core::DescriptorKey;

/// The Redis key of a token bucket: `ml:{<id>}:<rule>`, where the id is the key's
/// keyed hash (never the key in clear: Redis key names show up in `KEYS`,
/// `MONITOR`, slow logs and backups). The id is the hash tag, so a key's bucket
/// is one hash slot of a cluster, spread evenly whatever the key's text; the rule name
/// follows so an operator can tell buckets apart, and `meshlimit key-id`
/// maps a known customer key to its bucket.
pub fn bucket(ids: &KeyIds, key: &DescriptorKey) -> String {
    bucket_of_id(&ids.id(key).to_string(), key.rule())
}

/// [`bucket`] from the key's id (what an operator has in hand).
pub(crate) fn bucket_of_id(key_id: &str, rule: &str) -> String {
    format!("ml:{{{key_id}}}:{rule}")
}

/// The sorted set of the region's live agents (one hash slot, whatever the cluster).
pub(crate) const AGENTS: &str = "ml:{agents}";

/// The fleet override every agent of the region reads (one hash slot, whatever
/// the cluster): absent when off.
pub(crate) const FLEET_OVERRIDE: &str = "ml:{fleet}:override";

/// The version whose trial started last (what `override end-trial` ends).
pub(crate) const LAST_TRIAL: &str = "ml:{fleet}:trial";

/// The rules versions the region's agents serve now and served before.
pub(crate) const RULES_VERSIONS: &str = "ml:{fleet}:rules";

/// The audit history of the keys above (the last [`crate::control::AUDIT_KEEP`]
/// changes), newest first.
pub(crate) const AUDIT: &str = "ml:{fleet}:audit";

/// The trial of rules `version` (a content hash, 16 hex digits: no customer
/// data), in the fleet's hash slot.
pub(crate) fn trial(version: &str) -> String {
    format!("ml:{{fleet}}:trial:{version}")
}

/// The Redis keys of the region exchange, all in a region's own Redis (its agents
/// write, every region's rebalancer reads). Keys per partition of the exchange carry the
/// partition (`b<NN>`, for the 16 partitions) in a hash tag, so each is one hash slot of a Redis Cluster and every command or
/// atomic pipeline touches one hash slot; the partitions spread the exchange over
/// the nodes.
///
/// | key | type | written by | read by |
/// |---|---|---|---|
/// | `ml:rg:{b<NN>}:d:<period>` | hash key → tokens offered | the region's agents (HINCRBY, a few times a second) | its leader, which renames it to the sealed key |
/// | `ml:rg:{b<NN>}:m:<period>` | string: the period is sealed | the region's leader | agents: later demand goes to the next period |
/// | `ml:rg:{b<NN>}:x:<period>` | hash key → tokens offered (sealed) | the region's leader (RENAME) | every region's leader |
/// | `ml:rg:{b<NN>}:s` | hash key → `"<share> <global demand>"` | the region's leader (MULTI DEL, HSET, PEXPIRE) | the region's agents |
/// | `ml:rg:{meta}` | hash `sealed`, `period`, `leader` | the region's leader | agents (`period`), other leaders (`sealed`) |
/// | `ml:rg:{lock}` | string: the leader's id, with expiry | the election | the election |
///
/// The hash fields naming a key in these hashes are [`region::exchange_key`].
pub mod region {
    use meshlimit_core::fingerprint::fingerprint;
    use meshlimit_core::secret::KeyIds;
    use meshlimit_core::DescriptorKey;

    /// Partitions of the exchange's keys: enough to spread over the nodes of a cluster, few enough that
    /// a tick's reads stay a handful of round trips run at once.
    pub const PARTITIONS: usize = 16;

    /// The hash of the rebalancer's progress in a region.
    pub const META: &str = "ml:rg:{meta}";
    /// The lock electing the region's rebalancer.
    pub const LOCK: &str = "ml:rg:{lock}";

    /// `META` fields.
    pub const SEALED: &str = "sealed";
    pub const PERIOD: &str = "period";
    pub const LEADER: &str = "leader";

    /// How the region exchange names a key in its hashes: the rule, then the
    /// key's id (the same in every region of a deployment, which shares one
    /// secret; never the key in clear, since peers' Redis and their operators
    /// see these).
    pub fn exchange_key(ids: &KeyIds, key: &DescriptorKey) -> String {
        format!("{}|{}", key.rule(), ids.id(key))
    }

    /// The partition of an exchange key.
    pub fn partition(key: &str) -> usize {
        (fingerprint(key.as_bytes()) % PARTITIONS as u64) as usize
    }

    /// Demand being written for `period`.
    pub fn demand(partition: usize, period: u64) -> String {
        format!("ml:rg:{{b{partition:02}}}:d:{period}")
    }

    /// Set when `period` is sealed: later flushes for it go to the next period.
    pub fn marker(partition: usize, period: u64) -> String {
        format!("ml:rg:{{b{partition:02}}}:m:{period}")
    }

    /// Demand sealed for `period`: what every region's rebalancer reads.
    pub fn sealed(partition: usize, period: u64) -> String {
        format!("ml:rg:{{b{partition:02}}}:x:{period}")
    }

    /// The region's published shares.
    pub fn shares(partition: usize) -> String {
        format!("ml:rg:{{b{partition:02}}}:s")
    }
}

#[cfg(test)]
mod tests {
    use super::region::{self, PARTITIONS};
    use super::*;
    use crate::redis::topology::hash_slot;

    #[test]
    fn bucket_keys_cannot_choose_their_hash_slot() {
        let ids = KeyIds::placeholder();
        let a = bucket(&ids, &DescriptorKey::new("r", ["{x}"]));
        let b = bucket(&ids, &DescriptorKey::new("r", ["{y}"]));
        assert_ne!(hash_slot(&a), hash_slot(&b));
        // `ml:{<32 hex of the key id>}:<rule>`, never the key's own text.
        let id = ids.id(&DescriptorKey::new("r", ["{x}"]));
        assert_eq!(a, format!("ml:{{{id}}}:r"));
        assert!(!a.contains("{x}"));
    }

    #[test]
    fn the_fleet_keys_share_one_hash_slot() {
        let slot = hash_slot(FLEET_OVERRIDE);
        assert_eq!(hash_slot(LAST_TRIAL), slot);
        assert_eq!(hash_slot(RULES_VERSIONS), slot);
        assert_eq!(hash_slot(AUDIT), slot);
        assert_eq!(hash_slot(&trial("0123456789abcdef")), slot);
        assert_eq!(
            trial("0123456789abcdef"),
            "ml:{fleet}:trial:0123456789abcdef"
        );
    }

    #[test]
    fn the_redis_acls_name_the_keys_built_here() {
        let doc = include_str!("../../../docs/operations/redis-acl.md");
        let acl = doc.split("```").nth(1).unwrap();
        for key in [FLEET_OVERRIDE, LAST_TRIAL, RULES_VERSIONS, AUDIT, AGENTS] {
            assert!(
                acl.contains(&format!("~{key} ")) || acl.contains(&format!("~{key}\n")),
                "{key}"
            );
        }
        assert!(acl.contains(&format!("~{}", trial("*"))));
        assert!(acl.contains(&format!("~{}", bucket_of_id(&"[0-9a-f]".repeat(32), "*"))));
        assert!(region::demand(0, 1).starts_with("ml:rg:") && acl.contains("~ml:rg:*"));
    }

    #[test]
    fn an_exchange_key_is_the_rule_and_the_key_id() {
        let ids = KeyIds::placeholder();
        let key = DescriptorKey::new("g", ["alice"]);
        let name = region::exchange_key(&ids, &key);
        assert_eq!(name, format!("g|{}", ids.id(&key)));
        assert!(!name.contains("alice"));
    }

    #[test]
    fn a_region_partition_is_one_hash_slot_and_partitions_spread() {
        let mut hash_slots = Vec::new();
        for b in 0..PARTITIONS {
            let s = hash_slot(&region::shares(b));
            assert_eq!(s, hash_slot(&region::demand(b, 7)));
            assert_eq!(s, hash_slot(&region::sealed(b, 9)));
            assert_eq!(s, hash_slot(&region::marker(b, 9)));
            hash_slots.push(s);
        }
        hash_slots.sort_unstable();
        hash_slots.dedup();
        assert_eq!(hash_slots.len(), PARTITIONS);
        // Three equal masters each own some partitions.
        for third in 0..3u16 {
            let range = (third * 5461)..((third + 1) * 5461);
            assert!(
                hash_slots.iter().any(|s| range.contains(s)),
                "{hash_slots:?}"
            );
        }
    }

    #[test]
    fn a_key_always_lands_in_the_same_region_partition() {
        assert_eq!(region::partition("r|alice"), region::partition("r|alice"));
        assert!(region::partition("r|bob") < PARTITIONS);
    }
}
