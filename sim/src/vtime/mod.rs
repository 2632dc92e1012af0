//! The virtual fleet: the whole fleet in one thread and in virtual time,
//! driven by one seed. Gateways run the filter's own request path
//! ([`crate::gateway`], the same as the real-time harness's), agents run the
//! agent's own lease service (`meshlimit_agent::leases::LeaseService`, its
//! node pool, sizing and background refills), called in-process; the store is
//! core's bucket maths ([`world`]). Between them a network of delays and
//! losses drawn from the seed ([`net`]), and faults the seed places
//! ([`faults`]). The run is recorded, judged and measured as a real-time run
//! is (`record`, `judge`, `measure`, `verdict`).
//!
//! One seed is one run, bit for bit: time is tokio's paused clock, moved by
//! the driver alone ([`fleet`]); every random draw comes from the seed in an
//! order the events fix; nothing iterates a hash map to decide.

pub mod agents;
pub mod faults;
pub mod fleet;
pub mod net;
pub mod world;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use meshlimit_core::rules::parse_rules;
use meshlimit_filter::testing::MemoryHost;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::arrivals::{key_cdf, ArrivalGen};
use crate::drive::Recorded;
use crate::error::SimError;
use crate::gateway::{Gateway, Keys};
use crate::record::Recorder;
use crate::scenario::{Kind, Overrides, Plan, Store};
use crate::{measure, verdict, RunReport, Setup, TokenFlow};

use agents::AgentKit;

use fleet::{Calls, Fleet, VirtualLink};

use world::{lock, StoreState, World};

/// Unix time at a run's start, before the seed's offset (2024-01-01): the
/// store's windows are aligned to the Unix epoch, so where a run starts in
/// its windows is part of the run, drawn from the seed within an hour.
const UNIX_BASE_NS: u64 = 1_704_067_200_000_000_000;

/// The command that reproduces a run exactly.
pub fn command(scenario: &str, seed: u64, o: &Overrides) -> String {
    let mut cmd = format!("cargo run --release -p meshlimit-sim -- virtual --seed {seed}");
    if o.short {
        cmd.push_str(" --short");
    }
    for (flag, v) in [("--gateways", o.gateways), ("--agents", o.agents)] {
        if let Some(v) = v {
            cmd.push_str(&format!(" {flag} {v}"));
        }
    }
    if let Some(d) = o.duration {
        cmd.push_str(&format!(" --duration {d}"));
    }
    format!("{cmd} {scenario}")
}

/// Runs `plan` in virtual time with `seed`.
pub fn run(plan: &Plan, seed: u64) -> Result<RunReport, SimError> {
    let started = std::time::Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .event_interval(u32::MAX)
        .build()
        .map_err(|e| SimError::Run(format!("tokio runtime: {e}")))?;
    let (recorded, faults) = runtime.block_on(simulate(plan, seed))?;
    drop(runtime);
    let scripts = recorded.scripts_per_second.iter().flatten().sum();
    let figures = measure::figures(plan, &recorded, scripts, &crate::key_rates(plan));
    let s = &plan.scenario;
    let a = &recorded.log.agent;
    let setup = Setup {
        duration: s.duration.0,
        warmup: s.warmup.0,
        gateways: s.gateways,
        agents: s.agents,
        store: format!("virtual store, seed {seed}; faults: {}", faults.join(", ")),
        agent_args: s.agent_args.clone(),
        filter_timeout_ms: meshlimit_filter::config::millis(plan.filter.timeout),
        elapsed: started.elapsed().as_secs_f64(),
        unmatched: recorded.log.unmatched,
        failures: [a.timeouts, a.transport_errors, a.bad_status, a.bad_body],
        tokens: TokenFlow {
            to_gateways: a.lease_tokens.iter().map(|&t| u64::from(t)).sum(),
            dropped_at_agents: 0,
            admitted: figures.totals.admitted,
        },
        ..Setup::default()
    };
    Ok(RunReport {
        name: s.name.clone(),
        description: s.description.clone(),
        short: plan.short,
        checks: verdict::checks(plan, &figures),
        figures,
        setup,
    })
}

/// A random stream of its own for each part of the run.
fn stream(seed: u64, part: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ part.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

async fn simulate(plan: &Plan, seed: u64) -> Result<(Recorded, Vec<String>), SimError> {
    let s = &plan.scenario;
    s.virtual_fleet
        .network
        .validate()
        .map_err(|detail| SimError::Scenario {
            file: s.name.clone(),
            detail,
        })?;
    let unix_at_zero = UNIX_BASE_NS + stream(seed, 1).random_range(0..3_600_000_000_000);
    let nodes = match s.store {
        Store::Redis => 1,
        Store::Cluster(n) => n,
    };
    let store = StoreState::new(
        unix_at_zero,
        nodes,
        stream(seed, 2),
        s.virtual_fleet.network.agent_store,
    );
    let world = Arc::new(Mutex::new(World::new(store)));
    let keys = Rc::new(Keys::new(&s.traffic.key_header, s.traffic.keys));
    let rec = Rc::new(Recorder::new(crate::drive::judges(
        plan,
        &keys,
        unix_at_zero,
    )));
    let rules = parse_rules(&s.name, &s.rules).map_err(|e| SimError::Scenario {
        file: s.name.clone(),
        detail: e.into(),
    })?;
    let kit = AgentKit::new(rules, Arc::clone(&world), &s.agent_args, s.agents)?;
    let mut fleet = build(plan, seed, kit, &world, &keys, &rec)?;
    if s.kind == Kind::Race {
        race(plan, &fleet);
    }
    fleet.run().await;
    let stats: Vec<_> = fleet.gateways.iter().map(|g| g.flight_stats()).collect();
    let sum = |f: fn(&meshlimit_filter::flights::FlightStats) -> u64| stats.iter().map(f).sum();
    let scripts = lock(&world).store.scripts.clone();
    let recorded = Recorded {
        log: rec.take(),
        scripts_per_second: scripts,
        elapsed: 0.0,
        refills: sum(|s| s.refills),
        waits: sum(|s| s.waits),
        cold_starts: sum(|s| s.cold_starts),
        cold_starts_unpaid: sum(|s| s.cold_starts_unpaid),
    };
    Ok((recorded, fleet.faults.describe()))
}

fn build(
    plan: &Plan,
    seed: u64,
    kit: AgentKit,
    world: &Arc<Mutex<World>>,
    keys: &Rc<Keys>,
    rec: &Rc<Recorder>,
) -> Result<Fleet, SimError> {
    let s = &plan.scenario;
    let (g, a) = (s.gateways, s.agents);
    let timeout_ns = u64::try_from(plan.filter.timeout.as_nanos()).unwrap_or(u64::MAX);
    let net = s.virtual_fleet.network;
    let calls = Rc::new(RefCell::new(Calls::new(stream(seed, 3), net, timeout_ns)));
    let gateways = (0..g)
        .map(|i| {
            let link = VirtualLink {
                gateway: i,
                agent: i % a.max(1),
                calls: Rc::clone(&calls),
                world: Arc::clone(world),
            };
            Rc::new(Gateway::new(
                u16::try_from(i).unwrap_or(u16::MAX),
                MemoryHost::default(),
                plan.filter.clone(),
                Rc::clone(&plan.rules),
                Rc::clone(keys),
                Box::new(link),
                Rc::clone(rec),
            ))
        })
        .collect();
    let cdf = Rc::new(key_cdf(&s.traffic));
    let mut arrivals: Vec<ArrivalGen> = match s.kind {
        Kind::Load => (0..g)
            .map(|i| ArrivalGen::new(&s.traffic, i, g, s.duration.0, seed, Rc::clone(&cdf)))
            .collect(),
        Kind::Race => Vec::new(),
    };
    let next = arrivals.iter_mut().map(Iterator::next).collect();
    let end_ns = s.duration.ns();
    let mut faults_rng = stream(seed, 4);
    let faults = s.virtual_fleet.faults.place(&mut faults_rng, end_ns, a);
    let skews = s.virtual_fleet.faults.skews(&mut faults_rng, g);
    Ok(Fleet {
        world: Arc::clone(world),
        gateways,
        skews,
        arrivals,
        next,
        calls,
        agents: kit.start_all()?,
        kit,
        faults,
        end_ns,
        stop_ns: end_ns + timeout_ns + 2_000_000_000,
        synced: 0,
    })
}

/// The race: every gateway sends its share of the asks at once, for key 0.
fn race(plan: &Plan, fleet: &Fleet) {
    let gateways = &fleet.gateways;
    for i in 0..plan.scenario.traffic.race_asks {
        let g = i % gateways.len().max(1);
        if let Some(gw) = gateways.get(g) {
            gw.set_now(0, fleet.skews.get(g).copied().unwrap_or(0));
            gw.arrive(0);
        }
    }
}
