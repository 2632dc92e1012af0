//! Every default of the agent's settings, defined here once (the lease
//! policy's in `meshlimit_core::policy`, shared with the simulator). The flags of
//! `meshlimit-agent run` take their defaults from these (so `--help` shows
//! them), and the types built without flags (`ServerLimits::default`, the
//! memory store's and the fail-local buckets' key caps) take the same values.
//! Each is explained on its flag ([`super::RunArgs`]).

use meshlimit_core::policy;

use super::LogFormat;

/// `--listen`: the filters' API, `/metrics` and the probes.
pub(crate) const LISTEN: &str = "127.0.0.1:8081";
/// `--store`: the embedded store.
pub(crate) const STORE: &str = "memory";
/// `--region`.
pub(crate) const REGION: &str = "local";
/// `--lease-ttl-ms`.
pub(crate) const LEASE_TTL_MS: u64 = policy::DEFAULT_LEASE_TTL_MS;
/// `--lease-target-ms`.
pub(crate) const LEASE_TARGET_MS: u64 = policy::DEFAULT_LEASE_TARGET_MS;
/// `--rules-poll-ms`.
pub(crate) const RULES_POLL_MS: u64 = 500;
/// `--override-poll-ms`: every agent applies a fleet override within about a second.
pub(crate) const OVERRIDE_POLL_MS: u64 = 1_000;
/// `--max-inflight`.
pub(crate) const MAX_INFLIGHT: u32 = 1024;
/// `--store-deadline-ms`: below the filter's 5 ms lease timeout.
pub const STORE_DEADLINE_MS: u64 = 3;
/// `--max-batch`.
pub(crate) const MAX_BATCH: u32 = 256;
/// `--log`.
pub(crate) const LOG: &str = "info";
/// `--log-format`.
pub(crate) const LOG_FORMAT: LogFormat = LogFormat::Text;
/// `--region-floor`.
pub(crate) const REGION_FLOOR: f64 = meshlimit_core::policy::DEFAULT_REGION_FLOOR;
/// `--region-timeout-ms`.
pub(crate) const REGION_TIMEOUT_MS: u64 = 250;
/// `--max-keys`: each per-key table's cap, the memory store's default (see
/// `meshlimit_store::memory` for the memory it bounds).
pub(crate) const MAX_KEYS: u32 = meshlimit_store::memory::DEFAULT_MAX_KEYS;
/// `--max-connections`: as many as `--max-inflight` (see `ServerLimits`).
pub(crate) const MAX_CONNECTIONS: u32 = MAX_INFLIGHT;
/// `--header-timeout-ms`.
pub(crate) const HEADER_TIMEOUT_MS: u64 = 5_000;
/// `--shutdown-delay-ms`: none (the Kubernetes manifest sets its own).
pub(crate) const SHUTDOWN_DELAY_MS: u64 = 0;

/// [`MAX_KEYS`] as a size.
pub(crate) fn max_keys() -> usize {
    usize::try_from(MAX_KEYS).unwrap_or(usize::MAX)
}
/// `--decision-log-max-bytes`: 100 MiB a file.
pub(crate) const DECISION_LOG_MAX_BYTES: u64 = 100 * 1024 * 1024;
/// `--decision-log-files`: the current file and four rotated ones.
pub(crate) const DECISION_LOG_FILES: u32 = 5;
