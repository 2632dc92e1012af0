//! The virtual fleet's driver: it pops the world's events in time order and
//! hands each to its gateway, agent or the store; the agents' tasks run to
//! rest at the instant that woke them before time moves on.
//!
//! Time. Virtual time is the world's clock, in nanoseconds. The runtime is
//! current-thread with tokio's clock paused, and only the driver moves that
//! (`tokio::time::advance`): level with virtual time before an event that
//! reaches the agents' tasks (a call at an agent, a store answer, the
//! pools' sweep, a fault), lazily otherwise, since a gateway's or the
//! store's step reads no tokio clock. Tokio's timers (the agents' own: a
//! hold's end, a wait's deadline, the store deadline) count whole
//! milliseconds; while any task is alive the clock also stops at every
//! millisecond, so those timers fire at theirs, in order with the events.
//! "At rest": the driver is the runtime's `block_on` future and yields; with
//! the runtime's event interval at its maximum, a yielded `block_on` future
//! runs again only once no task is ready.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use meshlimit_core::wire::{DecisionsRequest, LeaseRequest};
use meshlimit_filter::pipeline::Item;
use rand::rngs::SmallRng;
use rand::Rng;

use super::agents::{Agent, AgentKit};
use super::faults::Faults;
use super::world::{lock, Event, World};
use crate::arrivals::{ArrivalGen, Planned};
use crate::gateway::{Gateway, Link};
use crate::record::CallFailure;
use crate::scenario::virtual_model::Network;

/// Lease calls between gateways and agents, shared with the gateways' links.
pub struct Calls {
    next: u64,
    pending: BTreeMap<u64, Call>,
    rng: SmallRng,
    net: Network,
    timeout_ns: u64,
}

struct Call {
    gateway: usize,
    agent: usize,
    /// The request, until it reaches the agent (none for a lost call).
    request: Option<LeaseRequest>,
    /// The call's items, until the gateway has its end.
    items: Option<Vec<Item>>,
    back_ns: u64,
}

impl Calls {
    pub fn new(rng: SmallRng, net: Network, timeout_ns: u64) -> Calls {
        Calls {
            next: 0,
            pending: BTreeMap::new(),
            rng,
            net,
            timeout_ns,
        }
    }

    /// Forgets a call once both its ends are done.
    fn tidy(&mut self, call: u64) {
        if self
            .pending
            .get(&call)
            .is_some_and(|c| c.request.is_none() && c.items.is_none())
        {
            self.pending.remove(&call);
        }
    }
}

/// A virtual gateway's link to its agent.
pub struct VirtualLink {
    pub gateway: usize,
    pub agent: usize,
    pub calls: Rc<RefCell<Calls>>,
    pub world: Arc<Mutex<World>>,
}

impl Link for VirtualLink {
    fn wake(&self, _: &Rc<Gateway>) {
        lock(&self.world).after(
            0,
            Event::Wake {
                gateway: self.gateway,
            },
        );
    }

    fn lease(&self, _: &Rc<Gateway>, request: LeaseRequest, items: Vec<Item>) {
        let mut calls = self.calls.borrow_mut();
        let c = &mut *calls;
        let out = c.net.gateway_agent.draw(&mut c.rng);
        let back_ns = c.net.gateway_agent.draw(&mut c.rng);
        let lost = c.net.loss > 0.0 && c.rng.random::<f64>() < c.net.loss;
        c.next += 1;
        let call = c.next;
        c.pending.insert(
            call,
            Call {
                gateway: self.gateway,
                agent: self.agent,
                request: (!lost).then_some(request),
                items: Some(items),
                back_ns,
            },
        );
        let mut world = lock(&self.world);
        if !lost {
            world.after(out, Event::AtAgent { call });
        }
        world.deadline(c.timeout_ns, call);
    }

    /// The agents' false-limit SLI is not modelled: records are dropped.
    fn decisions(&self, _: &Rc<Gateway>, _: DecisionsRequest) {}
}

/// The fleet and its schedule.
pub struct Fleet {
    pub world: Arc<Mutex<World>>,
    pub gateways: Vec<Rc<Gateway>>,
    /// Each gateway's clock skew (ns, signed).
    pub skews: Vec<i64>,
    pub arrivals: Vec<ArrivalGen>,
    pub next: Vec<Option<Planned>>,
    pub calls: Rc<RefCell<Calls>>,
    pub agents: Vec<Agent>,
    pub kit: AgentKit,
    pub faults: Faults,
    /// Arrivals end here; the run ends when the calls have, or at `stop_ns`.
    pub end_ns: u64,
    pub stop_ns: u64,
    /// How far tokio's clock has been moved (ns since the run's start).
    pub synced: u64,
}

const SECOND: u64 = 1_000_000_000;
const MILLI: u64 = 1_000_000;

impl Fleet {
    /// Runs the schedule to its end.
    pub async fn run(&mut self) {
        self.schedule_start();
        loop {
            let now = self.now();
            if now >= self.stop_ns || (now >= self.end_ns && self.idle()) {
                return;
            }
            let next = lock(&self.world).next_at();
            let target = match next {
                Some(at) => at.min(self.stop_ns),
                None if alive_tasks() > 0 => now + MILLI,
                None => return,
            };
            // Live tasks' timers fire at whole milliseconds: the clock stops
            // at each one crossed, and what they wake runs there.
            let boundary = (self.synced / MILLI + 1) * MILLI;
            if boundary <= target && alive_tasks() > 0 {
                self.sync(boundary).await;
                settle().await;
                continue;
            }
            lock(&self.world).now = target;
            loop {
                let event = lock(&self.world).pop_due(target);
                let Some(event) = event else { break };
                let touches_tasks = matches!(
                    event,
                    Event::AtAgent { .. }
                        | Event::StoreReply { .. }
                        | Event::Tick
                        | Event::Fault { .. }
                );
                if touches_tasks {
                    self.sync(target).await;
                }
                self.handle(event, target);
                if touches_tasks {
                    settle().await;
                }
            }
        }
    }

    /// Virtual time now.
    fn now(&self) -> u64 {
        lock(&self.world).now
    }

    /// Brings tokio's clock level with virtual time `to` (the agents' code
    /// reads it), firing the timers due by then.
    async fn sync(&mut self, to: u64) {
        {
            let mut world = lock(&self.world);
            world.now = world.now.max(to);
        }
        if to > self.synced {
            tokio::time::advance(std::time::Duration::from_nanos(to - self.synced)).await;
            self.synced = to;
        }
    }

    /// No gateway waits on a call.
    fn idle(&self) -> bool {
        self.gateways.iter().all(|g| g.inflight() == 0)
    }

    fn schedule_start(&mut self) {
        let mut world = lock(&self.world);
        for (g, next) in self.next.iter().enumerate() {
            if let Some(p) = next {
                world.at(p.at_ns, Event::Arrive { gateway: g });
            }
        }
        world.at(SECOND, Event::Tick);
        self.faults.schedule(&mut world);
    }

    fn handle(&mut self, event: Event, now: u64) {
        match event {
            Event::Arrive { gateway } => self.arrive(gateway, now),
            Event::Wake { gateway } => {
                if let Some(gw) = self.gateway(gateway, now) {
                    gw.root_turn();
                }
            }
            Event::AtAgent { call } => self.at_agent(call),
            Event::Answer { call, result } => self.answer(call, Some(result), now),
            Event::Expire { call } => self.answer(call, None, now),
            Event::StoreTake { job } => lock(&self.world).store_take(job),
            Event::StoreReply { job } => lock(&self.world).store_reply(job),
            Event::Tick => self.tick(now),
            Event::Fault { index, start } => self.fault(index, start),
        }
    }

    /// The gateway, its clock set to `now` (plus its skew).
    fn gateway(&self, g: usize, now: u64) -> Option<Rc<Gateway>> {
        let gw = self.gateways.get(g)?;
        gw.set_now(now, self.skews.get(g).copied().unwrap_or(0));
        Some(Rc::clone(gw))
    }

    fn arrive(&mut self, g: usize, now: u64) {
        let planned = self.next.get_mut(g).and_then(Option::take);
        if let (Some(p), Some(gw)) = (planned, self.gateway(g, now)) {
            gw.arrive(p.key);
        }
        let next = self.arrivals.get_mut(g).and_then(Iterator::next);
        if let Some(p) = next {
            lock(&self.world).at(p.at_ns, Event::Arrive { gateway: g });
        }
        if let Some(slot) = self.next.get_mut(g) {
            *slot = next;
        }
    }

    /// A call reaches its agent: the agent's own lease code answers it (a
    /// crashed agent refuses the connection).
    fn at_agent(&mut self, call: u64) {
        let (request, agent, back) = {
            let mut calls = self.calls.borrow_mut();
            let Some(c) = calls.pending.get_mut(&call) else {
                return;
            };
            let taken = (c.request.take(), c.agent, c.back_ns);
            calls.tidy(call);
            taken
        };
        let Some(request) = request else { return };
        let world = Arc::clone(&self.world);
        let service = self.agents.get(agent).and_then(|a| a.service.clone());
        let Some(service) = service else {
            let result = Err(CallFailure::Transport);
            lock(&world).after(back, Event::Answer { call, result });
            return;
        };
        tokio::spawn(async move {
            let resp = service.lease(&request).await;
            let result = Ok(resp);
            lock(&world).after(back, Event::Answer { call, result });
        });
    }

    /// A call's end at its gateway: the answer, or its deadline (`None`).
    fn answer(
        &mut self,
        call: u64,
        result: Option<Result<meshlimit_core::wire::LeaseResponse, CallFailure>>,
        now: u64,
    ) {
        let (items, gateway) = {
            let mut calls = self.calls.borrow_mut();
            let Some(c) = calls.pending.get_mut(&call) else {
                return;
            };
            let taken = (c.items.take(), c.gateway);
            calls.tidy(call);
            taken
        };
        if let (Some(items), Some(gw)) = (items, self.gateway(gateway, now)) {
            gw.completed(items, result.unwrap_or(Err(CallFailure::Timeout)));
        }
    }

    /// Once a second: the gateways' decision records go, the agents' pools
    /// are swept (the agent's `POOL_SWEEP_EVERY`).
    fn tick(&mut self, now: u64) {
        for g in 0..self.gateways.len() {
            if let Some(gw) = self.gateway(g, now) {
                gw.flush_decisions();
            }
        }
        for a in &self.agents {
            if let Some(s) = &a.service {
                s.sweep_pools();
            }
        }
        if now + SECOND < self.end_ns {
            lock(&self.world).after(SECOND, Event::Tick);
        }
    }

    fn fault(&mut self, index: usize, start: bool) {
        let Fleet {
            faults,
            agents,
            kit,
            world,
            ..
        } = self;
        faults.apply(index, start, agents, kit, world);
    }
}

/// Tasks alive in the runtime (their timers may be due).
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Lets every task ready now run (see the module docs).
async fn settle() {
    tokio::task::yield_now().await;
}
