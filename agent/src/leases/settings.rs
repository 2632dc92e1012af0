//! The settings of lease handling: the lease policy's tunables
//! ([`meshlimit_core::policy::LeasePolicy`], which sizes leases and holds) and
//! the service's operational bounds.

use std::time::Duration;

use meshlimit_core::policy::LeasePolicy;

use crate::config::defaults;

/// `--max-keys`' default: the per-key tables' cap (see `meshlimit_store::memory` for
/// the memory it bounds). Defined in `config::defaults`.
pub const DEFAULT_MAX_KEYS: usize = defaults::MAX_KEYS as usize;

/// The tunables of lease sizing and handling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseSettings {
    /// Lease sizing and holds: `--lease-ttl-ms`, `--lease-target-ms`.
    pub policy: LeasePolicy,
    /// Lease requests served at once; more are shed.
    pub max_inflight: usize,
    /// Keys the node pool and the fail-local buckets each hold at most.
    pub max_keys: usize,
    /// The store's deadline: how long an ask waits on another ask's store call
    /// for its key, and how long a call is marked in flight at most.
    pub store_deadline: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            policy: LeasePolicy::default(),
            max_inflight: usize::try_from(defaults::MAX_INFLIGHT).unwrap_or(usize::MAX),
            max_keys: defaults::max_keys(),
            store_deadline: Duration::from_millis(defaults::STORE_DEADLINE_MS),
        }
    }
}
