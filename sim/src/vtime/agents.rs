//! The virtual fleet's agents: the agent's own `LeaseService` (its node pool,
//! lease sizing, store calls, background refills) over the shared virtual
//! store, called in-process. The lease settings come from the scenario's agent
//! arguments, read as `meshlimit-agent run` reads them; the flags that do not
//! shape leases have nothing to act on here and are refused.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshlimit_agent::leases::LeaseMetrics;
use meshlimit_agent::leases::LeaseService;
use meshlimit_agent::trial::metrics::TrialMetrics;
use meshlimit_agent::{CurrentRules, LeaseSettings};
use meshlimit_core::policy::ms_to_ns;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::RuleSet;

use super::world::{SimStore, World};
use crate::error::SimError;
use crate::stack::AGENT_DEFAULTS;

/// One agent: its service while it runs (`None` while crashed).
pub struct Agent {
    pub service: Option<Arc<LeaseService>>,
}

/// How the agents are built (and rebuilt after a crash).
pub struct AgentKit {
    rules: Arc<RuleSet>,
    world: Arc<Mutex<World>>,
    pub settings: LeaseSettings,
    agents: u32,
}

impl AgentKit {
    pub fn new(
        rules: RuleSet,
        world: Arc<Mutex<World>>,
        args: &[String],
        agents: usize,
    ) -> Result<AgentKit, SimError> {
        Ok(AgentKit {
            rules: Arc::new(rules),
            world,
            settings: lease_settings(args)?,
            agents: u32::try_from(agents).unwrap_or(u32::MAX),
        })
    }

    /// A fresh agent process: empty pools, the rules loaded, `live` agents
    /// alive in the region (as its heartbeat tells it).
    pub fn start(&self, live: u32) -> Result<Arc<LeaseService>, SimError> {
        // Each agent has a registry of its own, as each agent process does.
        let registry = meshlimit_agent::metrics::Registry::new();
        let metrics = TrialMetrics::new(&registry)
            .and_then(|trial| LeaseMetrics::new(&registry, KeyIds::placeholder(), Arc::new(trial)))
            .map_err(|e| SimError::Run(format!("metrics: {e}")))?;
        let rules = Arc::new(CurrentRules::empty());
        rules.install(Arc::clone(&self.rules));
        let store = SimStore::new(Arc::clone(&self.world), self.settings.store_deadline);
        let service = LeaseService::new(
            rules,
            Arc::new(store),
            Arc::new(metrics),
            self.settings,
            None,
        );
        service.live_nodes_handle().store(live, Ordering::Relaxed);
        Ok(service)
    }

    /// Every agent, started.
    pub fn start_all(&self) -> Result<Vec<Agent>, SimError> {
        (0..self.agents)
            .map(|_| {
                Ok(Agent {
                    service: Some(self.start(self.agents)?),
                })
            })
            .collect()
    }
}

/// The lease settings the agent arguments give (the harness's defaults
/// first, as `stack` passes them to real agents).
pub fn lease_settings(args: &[String]) -> Result<LeaseSettings, SimError> {
    let mut s = LeaseSettings::default();
    let defaults = AGENT_DEFAULTS
        .iter()
        .flat_map(|(f, v)| [f.to_string(), v.to_string()]);
    let all: Vec<String> = defaults.chain(args.iter().cloned()).collect();
    let mut it = all.iter();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (flag.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| bad(flag, "needs a value"))
        };
        let ms = |v: String| -> Result<u64, SimError> {
            v.parse::<u64>()
                .map_err(|_| bad(flag, "is a whole number of milliseconds"))
        };
        match flag {
            "--lease-ttl-ms" => s.policy.ttl_ns = ms_to_ns(ms(value()?)?),
            "--lease-target-ms" => s.policy.period_ns = ms_to_ns(ms(value()?)?),
            "--store-deadline-ms" => s.store_deadline = Duration::from_millis(ms(value()?)?),
            "--max-inflight" => {
                s.max_inflight = value()?.parse().map_err(|_| bad(flag, "is a count"))?
            }
            // Logs go nowhere in the virtual fleet.
            "--log" => {
                value()?;
            }
            other => {
                return Err(bad(
                    other,
                    "does not shape leases: not modelled in virtual time",
                ))
            }
        }
    }
    Ok(s)
}

fn bad(flag: &str, why: &str) -> SimError {
    SimError::Run(format!("agent argument {flag} {why}"))
}
