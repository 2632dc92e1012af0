//! What one VM's root context and its HTTP contexts share. Each VM runs on one
//! worker thread, so `Rc<RefCell<…>>` is enough; what workers share goes through
//! proxy-wasm shared data instead.

use std::cell::RefCell;
use std::rc::Rc;

use meshlimit_core::decision::HeldQuota;
use meshlimit_core::{RequestInfo, RuleSet};

use crate::allowance::Allowance;
use crate::config::FilterConfig;
use crate::counts::Counts;
use crate::decided::IdCache;
use crate::declog::DecisionLog;
use crate::fields::QuotaFields;
use crate::flights::Flights;
use crate::slices::Slices;
use crate::usage::UsageAnswers;

pub type Shared = Rc<RefCell<VmState>>;

/// Shared-data key of the last good rules (any VM's), so a new VM starts with
/// them even while the agent is unreachable.
pub const RULES_KEY: &str = "meshlimit.rules";
/// Shared-data key: misses skip the agent until this time (ns, little endian).
pub const AGENT_DOWN_KEY: &str = "meshlimit.agent_down_until";
/// Shared-data key: failed agent calls in a row (u32, little endian).
pub const AGENT_FAILURES_KEY: &str = "meshlimit.agent_failures";
/// Failed calls in a row after which misses skip the agent for a while.
pub const AGENT_FAILURES_TO_BACK_OFF: u32 = 3;
/// Shared-data key: when the agent last answered a lease call (ns, little endian).
pub const AGENT_OK_KEY: &str = "meshlimit.agent_ok_at";
/// An agent that answered within this long is alive: failed calls meanwhile do
/// not make every key skip it.
pub const AGENT_ALIVE_NS: u64 = 200_000_000;
/// Shared-data key: a counter giving each VM a distinct number.
pub const VM_SEQ_KEY: &str = "meshlimit.vm_seq";

/// The quota the allowed response of a request that waited on the VM's lease
/// calls reports, set by the root context that finished it.
pub type QuotaCell = Rc<RefCell<Option<HeldQuota>>>;

#[derive(Default)]
pub struct VmState {
    pub config: Rc<FilterConfig>,
    pub rules: Option<Rc<RuleSet>>,
    pub counts: Counts,
    /// Decision records waiting for the root context's next flush.
    pub declog: DecisionLog,
    /// The VM's lease calls, sent by the root context; requests waiting on
    /// them are named by their context id.
    pub flights: Flights<u32>,
    /// What the root context needs to finish a waiting request.
    pub waiting: crate::fast_map::FastMap<u32, Waiting>,
    /// The shared queue that wakes the root context to send queued items
    /// (`None`: the host has no queues; each request calls for itself).
    pub call_queue: Option<u32>,
    /// A wake-up is already queued.
    pub wake_queued: bool,
    /// The worker's allowance of cold starts.
    pub cold_starts: Allowance,
    /// The worker's usage answers, bounded and counted.
    pub usage: UsageAnswers,
    /// The ids of keys decided lately (by `config.key_ids`).
    pub key_ids: IdCache,
    /// This worker's slices of its hot keys' leases (by `config.slot_hasher`'s
    /// fingerprints).
    pub slices: Slices,
    /// The allowed responses' quota field values.
    pub quota_fields: QuotaFields,
    /// The latest date of the agent's last answer this VM saw in shared
    /// data (`crate::backoff::answered`).
    pub agent_ok_seen: u64,
    /// The buffer each request's access-log value is written into
    /// (`crate::decided::Decided::with_value`).
    pub decided_value: String,
    /// The buffer each lease call's body is written into (the host copies
    /// it when the call is made): `Root::send_queued`.
    pub call_body: String,
}

impl VmState {
    /// Puts `config` in force (ids cached and slices taken under the one
    /// before are dropped).
    pub fn set_config(&mut self, config: FilterConfig) {
        self.config = Rc::new(config);
        self.key_ids = IdCache::default();
        self.slices = Slices::default();
    }
}

/// A request paused for the agent, as the root context finishes it.
pub struct Waiting {
    pub quota: QuotaCell,
    /// The request as the rules saw it (the decision log reads its request
    /// id), held here: nothing else holds it, so it is not given an
    /// allocation of its own.
    pub info: RequestInfo,
}
