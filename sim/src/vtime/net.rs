//! The virtual network: one-way delays drawn from the seed (a floor plus an
//! exponential tail), and calls lost outright.

use rand::rngs::SmallRng;
use rand::Rng;
use serde::Deserialize;

/// A one-way delay: `floor_us` plus an exponential tail of mean `tail_us`
/// (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delay {
    pub floor_us: f64,
    pub tail_us: f64,
}

impl Delay {
    /// One delay, in nanoseconds.
    pub fn draw(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.random::<f64>();
        let tail = -(1.0 - u).ln() * self.tail_us.max(0.0);
        ((self.floor_us.max(0.0) + tail) * 1_000.0) as u64
    }

    fn is_valid(&self) -> bool {
        self.floor_us.is_finite()
            && self.floor_us >= 0.0
            && self.tail_us.is_finite()
            && self.tail_us >= 0.0
    }
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

impl Network {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.gateway_agent.is_valid() && self.agent_store.is_valid()) {
            return Err("network: delays must be finite and not negative".into());
        }
        if !(0.0..=1.0).contains(&self.loss) {
            return Err("network.loss must be within [0, 1]".into());
        }
        Ok(())
    }
}
