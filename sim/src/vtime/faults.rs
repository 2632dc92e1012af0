//! Faults of the virtual fleet, as the scenario's `virtual.faults` asks and
//! the seed places them: agents that crash and restart (a restarted agent has
//! empty pools, as a new process), store outages (the store refuses
//! connections), and gateways whose clocks are off.

use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::Rng;

use super::agents::{Agent, AgentKit};
use super::world::{lock, Event, World};
use crate::scenario::virtual_model::FaultPlan;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    AgentDown(usize),
    StoreDown,
}

/// The faults placed for one run.
#[derive(Debug, Default)]
pub struct Faults {
    placed: Vec<(u64, u64, Kind)>,
}

impl FaultPlan {
    /// Places the faults within the run's `end_ns` (each starts in its middle
    /// 80%), for `agents` agents.
    pub fn place(&self, rng: &mut SmallRng, end_ns: u64, agents: usize) -> Faults {
        let mut placed = Vec::new();
        let at = |rng: &mut SmallRng| {
            let span = end_ns as f64 * 0.8;
            (end_ns as f64 * 0.1 + rng.random::<f64>() * span) as u64
        };
        for _ in 0..self.agent_crashes {
            let start = at(rng);
            let agent = rng.random_range(0..agents.max(1));
            let end = start.saturating_add(self.agent_down.ns());
            placed.push((start, end, Kind::AgentDown(agent)));
        }
        for _ in 0..self.store_outages {
            let start = at(rng);
            placed.push((
                start,
                start.saturating_add(self.store_down.ns()),
                Kind::StoreDown,
            ));
        }
        Faults { placed }
    }

    /// Each gateway's clock skew (ns).
    pub fn skews(&self, rng: &mut SmallRng, gateways: usize) -> Vec<i64> {
        let most = self.clock_skew.ns() as f64;
        (0..gateways)
            .map(|_| {
                if most > 0.0 {
                    ((rng.random::<f64>() * 2.0 - 1.0) * most) as i64
                } else {
                    0
                }
            })
            .collect()
    }
}

impl Faults {
    /// Queues each fault's start and end.
    pub fn schedule(&self, world: &mut World) {
        for (index, (start, end, _)) in self.placed.iter().enumerate() {
            world.at(*start, Event::Fault { index, start: true });
            world.at(
                *end,
                Event::Fault {
                    index,
                    start: false,
                },
            );
        }
    }

    /// A fault starts or ends.
    pub fn apply(
        &self,
        index: usize,
        start: bool,
        agents: &mut [Agent],
        kit: &AgentKit,
        world: &Arc<Mutex<World>>,
    ) {
        let Some((_, _, kind)) = self.placed.get(index) else {
            return;
        };
        match *kind {
            Kind::AgentDown(a) => {
                let live = u32::try_from(agents.len()).unwrap_or(u32::MAX);
                if let Some(agent) = agents.get_mut(a) {
                    // A restart that fails to build leaves the agent down.
                    agent.service = if start { None } else { kit.start(live).ok() };
                }
            }
            Kind::StoreDown => lock(world).store.down = start,
        }
    }

    /// What was placed, for the report: (start s, end s, what).
    pub fn describe(&self) -> Vec<String> {
        self.placed
            .iter()
            .map(|(s, e, k)| {
                let what = match k {
                    Kind::AgentDown(a) => format!("agent {a} down"),
                    Kind::StoreDown => "store refuses connections".to_string(),
                };
                format!("{what} {:.3}–{:.3} s", *s as f64 / 1e9, *e as f64 / 1e9)
            })
            .collect()
    }
}
