//! The scenario's `virtual:` section: what only the virtual fleet models (its
//! network and the faults the seed places), as data. How the fleet draws
//! delays and places faults from it is `crate::vtime`'s.

use serde::Deserialize;

use super::Secs;

/// The scenario's `virtual` section: what only the virtual fleet models.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Model {
    pub network: Network,
    pub faults: FaultPlan,
}

/// A one-way delay: `floor_us` plus an exponential tail of mean `tail_us`
/// (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delay {
    pub floor_us: f64,
    pub tail_us: f64,
}

/// The network of the virtual fleet (the scenario's `network`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    /// Gateway to its agent, each way (same node: a loopback hop).
    pub gateway_agent: Delay,
    /// Agent to the store, each way (a hop across the cluster).
    pub agent_store: Delay,
    /// The part of gateway calls lost (never answered: the gateway's
    /// deadline ends them).
    pub loss: f64,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            gateway_agent: Delay {
                floor_us: 50.0,
                tail_us: 50.0,
            },
            agent_store: Delay {
                floor_us: 200.0,
                tail_us: 100.0,
            },
            loss: 0.0,
        }
    }
}

/// What the scenario asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultPlan {
    /// Agent crashes: each at a time and of an agent the seed draws, down
    /// for `agent_down`, then restarted.
    pub agent_crashes: usize,
    pub agent_down: Secs,
    /// Store outages, each at a time the seed draws, lasting `store_down`.
    pub store_outages: usize,
    pub store_down: Secs,
    /// Each gateway's clock is off by up to this much either way (drawn per
    /// gateway).
    pub clock_skew: Secs,
}
