//! The virtual network: one-way delays drawn from the seed (a floor plus an
//! exponential tail), and calls lost outright.

use rand::rngs::SmallRng;
use rand::Rng;

use crate::error::ScenarioError;
use crate::scenario::virtual_model::{Delay, Network};

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

impl Network {
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if !(self.gateway_agent.is_valid() && self.agent_store.is_valid()) {
            return Err(ScenarioError::Delays);
        }
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(ScenarioError::Loss);
        }
        Ok(())
    }
}
