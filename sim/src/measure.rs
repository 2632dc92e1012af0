//! From the run's log to its figures: totals, admitted/limit over the steady
//! part, wrong decisions, per-second rows (all keys, and the busiest keys), lease
//! sizes and Redis script calls.

use std::collections::HashMap;

use crate::drive::Recorded;
use crate::record::{Decision, Event};
use crate::scenario::Plan;

/// How many of the busiest keys get their own per-second rows.
const TOP_KEYS: usize = 5;

/// One second of one key (or of all keys, `key == None`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Second {
    pub second: usize,
    pub key: Option<u32>,
    pub offered: u64,
    pub admitted: u64,
    pub limited: u64,
    pub unavailable: u64,
    pub failed_allowed: u64,
    pub failed_limited: u64,
    /// What an ideal limiter fed the same arrivals admits.
    pub ideal: u64,
    /// The rules' rate over the keys that had traffic this second.
    pub limit: f64,
    pub wrongly_limited: u64,
    pub wrongly_allowed: u64,
    /// Script calls on all Redis nodes (all-keys rows only).
    pub scripts: Option<u64>,
}

/// Totals over the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub requests: u64,
    pub admitted: u64,
    pub limited: u64,
    pub unavailable: u64,
    pub failed_allowed: u64,
    pub failed_limited: u64,
    pub local: u64,
    pub wrongly_limited: u64,
    /// Of them, rejected from the gateway's cached denial (no agent call);
    /// the rest were an agent's answer.
    pub wrongly_limited_cached: u64,
    pub wrongly_allowed: u64,
    pub held_back: u64,
}

/// The steady part (after the warmup).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Steady {
    pub seconds: f64,
    pub admitted: u64,
    pub ideal: u64,
    /// Admitted per second, and the limit's allowance per second.
    pub admitted_per_sec: f64,
    pub limit_per_sec: f64,
    /// admitted ÷ allowance.
    pub ratio: f64,
    /// The worst whole second above and below the allowance, as a fraction of it.
    pub max_over: f64,
    pub max_under: f64,
    /// Requests, agent calls ended, and wrong decisions, of the steady part.
    pub requests: u64,
    pub agent_calls: u64,
    pub wrongly_limited: u64,
    /// Of them, rejected from the gateway's cached denial.
    pub wrongly_limited_cached: u64,
    pub wrongly_allowed: u64,
}

/// A distribution: lease sizes the gateways received, or denial retry times.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sizes {
    pub count: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

/// Every figure of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub totals: Totals,
    pub steady: Steady,
    /// Tokens per grant, as the gateways received them.
    pub leases: Sizes,
    /// Retry times of the denials the agents sent (ms): how long a gateway
    /// rejects the key from its denial cache.
    pub denial_ms: Sizes,
    /// How late the harness offered each arrival (µs): its own cost.
    pub harness_lag_us: Sizes,
    pub agent_calls: u64,
    /// Agent-call items sent ahead of need, and requests that waited on a
    /// call in flight for their key (from the filter's own counts).
    pub refills: u64,
    pub waits: u64,
    /// Requests admitted by a cold start, and those no grant paid for.
    pub cold_starts: u64,
    pub cold_starts_unpaid: u64,
    pub agent_failures: u64,
    pub script_calls: u64,
    /// The busiest Redis node's script calls per second over the steady part
    /// (the shard holding the hot key).
    pub hottest_node_scripts_per_sec: f64,
    /// All nodes' script calls per second over the steady part.
    pub steady_scripts_per_sec: f64,
    pub seconds: Vec<Second>,
}

impl Figures {
    pub fn per_1000(&self, n: u64) -> f64 {
        if self.totals.requests == 0 {
            0.0
        } else {
            n as f64 * 1000.0 / self.totals.requests as f64
        }
    }

    /// Agent calls per 1,000 requests over the steady part (after the
    /// warmup): a key's cost once the nodes know its demand, without the
    /// cold start, where every gateway asks for each request.
    pub fn steady_calls_per_1000(&self) -> f64 {
        if self.steady.requests == 0 {
            0.0
        } else {
            self.steady.agent_calls as f64 * 1000.0 / self.steady.requests as f64
        }
    }

    pub fn fraction(&self, n: u64) -> f64 {
        if self.totals.requests == 0 {
            0.0
        } else {
            n as f64 / self.totals.requests as f64
        }
    }
}

/// Computes the figures of a recorded run; `script_calls` is the Redis delta.
pub fn figures(plan: &Plan, rec: &Recorded, script_calls: u64, limits: &[f64]) -> Figures {
    let events = &rec.log.events;
    let a = &rec.log.agent;
    let warmup_ns = plan.scenario.warmup.ns();
    let seconds = seconds(events, limits, &rec.scripts_per_second);
    let steady = steady(
        events,
        &a.call_ns,
        &seconds,
        warmup_ns,
        plan.scenario.duration.0,
    );
    Figures {
        totals: totals(events),
        steady,
        leases: sizes(a.lease_tokens.iter().map(|&t| u64::from(t)).collect()),
        denial_ms: sizes(a.deny_ms.clone()),
        harness_lag_us: sizes(rec.log.lag_us.clone()),
        agent_calls: a.calls,
        refills: rec.refills,
        waits: rec.waits,
        cold_starts: rec.cold_starts,
        cold_starts_unpaid: rec.cold_starts_unpaid,
        agent_failures: a.timeouts + a.transport_errors + a.bad_status + a.bad_body,
        script_calls,
        hottest_node_scripts_per_sec: steady_nodes(&rec.scripts_per_second, plan).0,
        steady_scripts_per_sec: steady_nodes(&rec.scripts_per_second, plan).1,
        seconds,
    }
}

fn is_admitted(e: &Event) -> bool {
    matches!(e.decision, Decision::Allowed | Decision::FailAllowed)
}

fn totals(events: &[Event]) -> Totals {
    let mut t = Totals::default();
    for e in events {
        t.requests += 1;
        t.local += u64::from(e.local);
        match e.decision {
            Decision::Allowed => t.admitted += 1,
            Decision::FailAllowed => t.failed_allowed += 1,
            Decision::Limited => t.limited += 1,
            Decision::Unavailable => t.unavailable += 1,
            Decision::FailLimited => t.failed_limited += 1,
        }
        if is_admitted(e) {
            t.wrongly_allowed += u64::from(e.wrong);
        } else {
            t.wrongly_limited += u64::from(e.wrong);
            t.wrongly_limited_cached += u64::from(e.wrong && e.local);
            t.held_back += u64::from(e.held_back);
        }
    }
    t
}

fn steady(
    events: &[Event],
    call_ns: &[u64],
    seconds: &[Second],
    warmup_ns: u64,
    duration: f64,
) -> Steady {
    let steady: Vec<&Event> = events
        .iter()
        .filter(|e| e.arrived_ns >= warmup_ns)
        .collect();
    let admitted = steady.iter().filter(|e| is_admitted(e)).count() as u64;
    let ideal = steady.iter().filter(|e| e.ideal_admit).count() as u64;
    let wrong = |admitted: bool| {
        steady
            .iter()
            .filter(|e| e.wrong && is_admitted(e) == admitted)
            .count() as u64
    };
    let span = (duration - warmup_ns as f64 / 1e9).max(1e-9);
    let first = (warmup_ns as f64 / 1e9).ceil() as usize;
    let whole = seconds
        .iter()
        .filter(|s| s.key.is_none() && s.second >= first && (s.second as f64) + 1.0 <= duration);
    let (mut max_over, mut max_under) = (0.0f64, 0.0f64);
    for s in whole.filter(|s| s.ideal > 0) {
        let dev = (s.admitted as f64 - s.ideal as f64) / s.ideal as f64;
        max_over = max_over.max(dev);
        max_under = max_under.max(-dev);
    }
    Steady {
        seconds: span,
        admitted,
        ideal,
        admitted_per_sec: admitted as f64 / span,
        limit_per_sec: ideal as f64 / span,
        ratio: if ideal == 0 {
            0.0
        } else {
            admitted as f64 / ideal as f64
        },
        max_over,
        max_under,
        requests: steady.len() as u64,
        agent_calls: call_ns.iter().filter(|&&t| t >= warmup_ns).count() as u64,
        wrongly_limited: wrong(false),
        wrongly_limited_cached: steady
            .iter()
            .filter(|e| e.wrong && e.local && !is_admitted(e))
            .count() as u64,
        wrongly_allowed: wrong(true),
    }
}

/// Per-second rows: all keys, then the busiest keys.
fn seconds(events: &[Event], limits: &[f64], scripts: &[Vec<u64>]) -> Vec<Second> {
    let mut volume: HashMap<u32, u64> = HashMap::new();
    for e in events {
        *volume.entry(e.key).or_default() += 1;
    }
    let mut busiest: Vec<(u32, u64)> = volume.into_iter().collect();
    busiest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top: Vec<u32> = busiest.iter().take(TOP_KEYS).map(|(k, _)| *k).collect();
    let mut rows: HashMap<(usize, Option<u32>), Second> = HashMap::new();
    let mut active: HashMap<usize, std::collections::HashSet<u32>> = HashMap::new();
    for e in events {
        let s = (e.arrived_ns / 1_000_000_000) as usize;
        active.entry(s).or_default().insert(e.key);
        add(rows.entry((s, None)).or_default(), e);
        if top.contains(&e.key) {
            add(rows.entry((s, Some(e.key))).or_default(), e);
        }
    }
    let limit_of = |k: u32| limits.get(k as usize).copied().unwrap_or(0.0);
    let mut out: Vec<Second> = rows
        .into_iter()
        .map(|((second, key), mut row)| {
            row.second = second;
            row.key = key;
            row.limit = match key {
                Some(k) => limit_of(k),
                None => active
                    .get(&second)
                    .map_or(0.0, |keys| keys.iter().map(|k| limit_of(*k)).sum()),
            };
            if key.is_none() {
                row.scripts = scripts.get(second).map(|n| n.iter().sum());
            }
            row
        })
        .collect();
    out.sort_by_key(|s| (s.second, s.key.is_some(), s.key));
    out
}

fn add(row: &mut Second, e: &Event) {
    row.offered += 1;
    row.ideal += u64::from(e.ideal_admit);
    match e.decision {
        Decision::Allowed => row.admitted += 1,
        Decision::FailAllowed => {
            row.admitted += 1;
            row.failed_allowed += 1;
        }
        Decision::Limited => row.limited += 1,
        Decision::Unavailable => row.unavailable += 1,
        Decision::FailLimited => {
            row.limited += 1;
            row.failed_limited += 1;
        }
    }
    if is_admitted(e) {
        row.wrongly_allowed += u64::from(e.wrong);
    } else {
        row.wrongly_limited += u64::from(e.wrong);
    }
}

fn sizes(mut values: Vec<u64>) -> Sizes {
    if values.is_empty() {
        return Sizes::default();
    }
    values.sort_unstable();
    let at = |q: f64| {
        let i = ((values.len() - 1) as f64 * q).round() as usize;
        values.get(i).copied().unwrap_or(0)
    };
    Sizes {
        count: values.len() as u64,
        mean: values.iter().sum::<u64>() as f64 / values.len() as f64,
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        max: values.last().copied().unwrap_or(0),
    }
}

/// Mean script calls per second over the steady seconds: the busiest node's,
/// and all nodes' together.
fn steady_nodes(scripts: &[Vec<u64>], plan: &Plan) -> (f64, f64) {
    let first = plan.scenario.warmup.0.ceil() as usize;
    let last = (plan.scenario.duration.0.floor() as usize).min(scripts.len());
    let steady = scripts.get(first..last).unwrap_or(&[]);
    if steady.is_empty() {
        return (0.0, 0.0);
    }
    let nodes = steady.iter().map(Vec::len).max().unwrap_or(0);
    let per_node: Vec<u64> = (0..nodes)
        .map(|n| steady.iter().map(|s| s.get(n).copied().unwrap_or(0)).sum())
        .collect();
    let seconds = steady.len() as f64;
    let busiest = per_node.iter().copied().max().unwrap_or(0) as f64;
    (
        busiest / seconds,
        per_node.iter().sum::<u64>() as f64 / seconds,
    )
}

#[cfg(test)]
mod tests;
