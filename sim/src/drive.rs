//! Runs the gateways: one single-threaded tokio runtime, one task per gateway
//! offering its planned arrivals, agent calls as tasks of their own, a progress
//! and sampling task, then a bounded wait for the calls still in flight.

use std::rc::Rc;
use std::time::{Duration, Instant};

use meshlimit_filter::testing::{unix_ns, MemoryHost};
use tokio::task::LocalSet;

use crate::arrivals::{key_cdf, ArrivalGen};
use crate::client::AgentClient;
use crate::error::SimError;
use crate::gateway::{Gateway, HttpLink, Keys, RecordSetup};
use crate::judge::Judge;
use crate::progress::Progress;
use crate::record::{Log, Recorder};
use crate::scenario::{Kind, Plan};
use crate::stack::Stack;

/// What the run recorded, and Redis's script calls sampled about every second.
pub struct Recorded {
    pub log: Log,
    /// Script calls per node in each second of the run.
    pub scripts_per_second: Vec<Vec<u64>>,
    /// How long the run took, wall clock (seconds).
    pub elapsed: f64,
    /// The gateways' lease calls: refills started ahead of need, and requests
    /// that waited on a call already in flight for their key.
    pub refills: u64,
    pub waits: u64,
    /// Requests admitted by a cold start (`cold_start: admit`), and those no
    /// grant paid for.
    pub cold_starts: u64,
    pub cold_starts_unpaid: u64,
}

/// Runs the plan's traffic against the stack's agents.
pub fn simulate(plan: &Plan, stack: &Stack, show_progress: bool) -> Result<Recorded, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SimError::Run(format!("tokio runtime: {e}")))?;
    LocalSet::new().block_on(&runtime, drive(plan, stack, show_progress))
}

/// How often a gateway hands its decision records to its agent (the filter's
/// default `sync_interval_ms`).
const DECISIONS_EVERY: Duration = Duration::from_secs(1);

async fn drive(plan: &Plan, stack: &Stack, show_progress: bool) -> Result<Recorded, SimError> {
    let s = &plan.scenario;
    let keys = Rc::new(Keys::new(&s.traffic.key_header, s.traffic.keys));
    // The gateways' clocks, and so the judge's, read the wall clock from
    // `unix_at_epoch`, as the store's `TIME` does; the arrivals are scheduled
    // on the monotonic clock from `epoch`.
    let epoch = Instant::now();
    let unix_at_epoch = unix_ns();
    let rec = Rc::new(Recorder::new(judges(plan, &keys, unix_at_epoch)));
    let gateways = gateways(plan, stack, &keys, &rec, unix_at_epoch)?;
    let started = tokio::time::Instant::from_std(epoch);
    let mut progress = Progress::new(plan, stack, show_progress);
    match s.kind {
        crate::scenario::Kind::Load => {
            let cdf = Rc::new(key_cdf(&s.traffic));
            for (i, gw) in gateways.iter().enumerate() {
                let arrivals = ArrivalGen::new(
                    &s.traffic,
                    i,
                    gateways.len(),
                    s.duration.0,
                    s.seed,
                    Rc::clone(&cdf),
                );
                tokio::task::spawn_local(Rc::clone(gw).run(arrivals, started));
            }
            let end = started + Duration::from_secs_f64(s.duration.0);
            let mut flushed = tokio::time::Instant::now();
            // Ctrl-C ends the run with an error, so the stack is stopped on the
            // way out rather than left running.
            let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
            while tokio::time::Instant::now() < end {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = &mut interrupt => return Err(SimError::Run("interrupted".into())),
                }
                progress.tick(&rec, epoch.elapsed().as_secs_f64());
                if flushed.elapsed() >= DECISIONS_EVERY {
                    flushed = tokio::time::Instant::now();
                    gateways.iter().for_each(Gateway::flush_decisions);
                }
            }
        }
        Kind::Race => race(plan, &gateways),
    }
    let drain = plan.filter.timeout + Duration::from_secs(2);
    let drained = started.elapsed() + drain;
    while gateways.iter().any(|g| g.inflight() > 0) && started.elapsed() < drained {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gateways.iter().for_each(Gateway::flush_decisions);
    while gateways.iter().any(|g| g.posting() > 0) && started.elapsed() < drained + drain {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    progress.tick(&rec, epoch.elapsed().as_secs_f64());
    let scripts_per_second = progress.finish();
    let stats: Vec<_> = gateways.iter().map(|g| g.flight_stats()).collect();
    let sum = |f: fn(&meshlimit_filter::flights::FlightStats) -> u64| stats.iter().map(f).sum();
    let (refills, waits) = (sum(|s| s.refills), sum(|s| s.waits));
    let (cold_starts, cold_starts_unpaid) = (sum(|s| s.cold_starts), sum(|s| s.cold_starts_unpaid));
    Ok(Recorded {
        log: rec.take(),
        scripts_per_second,
        elapsed: epoch.elapsed().as_secs_f64(),
        refills,
        waits,
        cold_starts,
        cold_starts_unpaid,
    })
}

/// The race: every gateway sends its share of the asks at once, for key 0.
fn race(plan: &Plan, gateways: &[Rc<Gateway>]) {
    let asks = plan.scenario.traffic.race_asks;
    for i in 0..asks {
        if let Some(gw) = gateways.get(i % gateways.len()) {
            gw.arrive(0);
        }
    }
}

/// Each key's judge: the limit and cost of the strictest rule that applies, its
/// clock's zero at `unix_at_epoch` (windows are aligned to the Unix epoch).
pub(crate) fn judges(plan: &Plan, keys: &Keys, unix_at_epoch: u64) -> Vec<Option<Judge>> {
    (0..keys.len())
        .map(|k| {
            let info = keys.request(u32::try_from(k).unwrap_or(u32::MAX));
            let applicable = plan.rules.applicable(&info).unwrap_or_default();
            applicable
                .first()
                .map(|a| Judge::new(a.limit, a.rule.cost.get()).aligned(unix_at_epoch))
        })
        .collect()
}

fn gateways(
    plan: &Plan,
    stack: &Stack,
    keys: &Rc<Keys>,
    rec: &Rc<Recorder>,
    unix_at_epoch: u64,
) -> Result<Vec<Rc<Gateway>>, SimError> {
    let ports = stack.agent_ports();
    let timeout = plan.filter.timeout;
    let secret = meshlimit_core::secret::Secret::new(meshlimit_tests::TEST_SECRET.as_bytes())
        .map_err(|e| SimError::Run(format!("the agents' secret: {e}")))?;
    let records = Rc::new(RecordSetup {
        key_ids: secret.key_ids(),
        unix_ms_at_zero: unix_at_epoch / 1_000_000,
    });
    (0..plan.scenario.gateways)
        .map(|g| {
            let port = ports.get(g % ports.len().max(1)).copied().unwrap_or(0);
            let client = AgentClient::new(port, timeout)?;
            Ok(Rc::new(
                Gateway::new(
                    u16::try_from(g).unwrap_or(u16::MAX),
                    MemoryHost::wall_since(unix_at_epoch),
                    plan.filter.clone(),
                    Rc::clone(&plan.rules),
                    Rc::clone(keys),
                    Box::new(HttpLink::new(client)),
                    Rc::clone(rec),
                )
                .with_records(Rc::clone(&records)),
            ))
        })
        .collect()
}
