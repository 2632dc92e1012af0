//! The run's log: every request with its arrival, decision and judgement, the
//! lease answers the gateways saw, and the agent calls that failed. One thread
//! writes it (the gateways share a single-threaded runtime), so a `RefCell` does.

use std::cell::RefCell;

use meshlimit_core::wire::LeaseAnswer;

use crate::judge::Judge;

/// How a request was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admitted by the limiter.
    Allowed,
    /// 429 from the limiter.
    Limited,
    /// 503: the agent could not answer and the rule fails closed.
    Unavailable,
    /// Admitted by a failure policy (`open`, or `local` with tokens).
    FailAllowed,
    /// 429 from the fail-local bucket.
    FailLimited,
}

/// One request.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub arrived_ns: u64,
    pub decided_ns: u64,
    pub key: u32,
    pub gateway: u16,
    pub decision: Decision,
    /// Decided from the gateway's local state, without an agent call.
    pub local: bool,
    /// An ideal limiter fed every arrival admits it.
    pub ideal_admit: bool,
    /// Wrongly limited (if rejected) or wrongly allowed (if admitted).
    pub wrong: bool,
    /// Rejected while unspent allowance existed (diagnostic).
    pub held_back: bool,
}

/// Why an agent call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFailure {
    Timeout,
    Transport,
    Status,
    Body,
}

/// Counts of what the gateways saw from the agents.
#[derive(Debug, Clone, Default)]
pub struct AgentCounts {
    pub calls: u64,
    pub grants: u64,
    pub denials: u64,
    pub unavailable: u64,
    pub timeouts: u64,
    pub transport_errors: u64,
    pub bad_status: u64,
    pub bad_body: u64,
    /// Tokens of each grant, as the filter received them.
    pub lease_tokens: Vec<u32>,
    /// The retry time of each denial (ms): how long the gateway caches it.
    pub deny_ms: Vec<u64>,
    /// When each call ended (answered or failed), on the gateways' clock.
    pub call_ns: Vec<u64>,
}

/// Everything recorded during a run.
#[derive(Debug, Default)]
pub struct Log {
    pub events: Vec<Event>,
    pub agent: AgentCounts,
    /// Requests no rule applied to (a scenario mistake; reported).
    pub unmatched: u64,
    /// How late each arrival was offered after its planned time (µs): the
    /// harness's own cost, so a miss can be told from a slow simulator.
    pub lag_us: Vec<u64>,
}

/// A request between its arrival and its decision.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub arrived_ns: u64,
    pub key: u32,
    pub gateway: u16,
    pub ideal_admit: bool,
}

/// The shared recorder.
pub struct Recorder {
    judges: RefCell<Vec<Option<Judge>>>,
    log: RefCell<Log>,
}

impl Recorder {
    /// A recorder for keys whose judges (limit and cost) are known; `None` for a
    /// key no rule applies to.
    pub fn new(judges: Vec<Option<Judge>>) -> Recorder {
        Recorder {
            judges: RefCell::new(judges),
            log: RefCell::new(Log::default()),
        }
    }

    /// An arrival planned for `planned_ns` is offered at `now_ns`.
    pub fn lag(&self, planned_ns: u64, now_ns: u64) {
        self.log
            .borrow_mut()
            .lag_us
            .push(now_ns.saturating_sub(planned_ns) / 1_000);
    }

    /// A request arrives (call in arrival order).
    pub fn arrive(&self, key: u32, gateway: u16, now_ns: u64) -> Pending {
        let mut judges = self.judges.borrow_mut();
        let ideal_admit = judges
            .get_mut(key as usize)
            .and_then(Option::as_mut)
            .is_some_and(|j| j.arrive(now_ns));
        Pending {
            arrived_ns: now_ns,
            key,
            gateway,
            ideal_admit,
        }
    }

    /// The request is decided (call in decision order).
    pub fn decide(&self, p: Pending, decision: Decision, local: bool, now_ns: u64) {
        let admitted = matches!(decision, Decision::Allowed | Decision::FailAllowed);
        let (wrong, held_back) = {
            let mut judges = self.judges.borrow_mut();
            match judges.get_mut(p.key as usize).and_then(Option::as_mut) {
                Some(j) if admitted => (j.admitted(p.arrived_ns, now_ns), false),
                Some(j) => (j.rejected(p.arrived_ns, p.ideal_admit), j.held_back(now_ns)),
                None => (false, false),
            }
        };
        self.log.borrow_mut().events.push(Event {
            arrived_ns: p.arrived_ns,
            decided_ns: now_ns,
            key: p.key,
            gateway: p.gateway,
            decision,
            local,
            ideal_admit: p.ideal_admit,
            wrong,
            held_back,
        });
    }

    pub fn unmatched(&self) {
        self.log.borrow_mut().unmatched += 1;
    }

    /// The agent answered a call, at `now_ns`.
    pub fn answers(&self, answers: &[LeaseAnswer], now_ns: u64) {
        let mut log = self.log.borrow_mut();
        let a = &mut log.agent;
        a.calls += 1;
        a.call_ns.push(now_ns);
        for answer in answers {
            match answer {
                LeaseAnswer::Grant { tokens, .. } => {
                    a.grants += 1;
                    a.lease_tokens.push(*tokens);
                }
                LeaseAnswer::Deny { retry_after_ms, .. } => {
                    a.denials += 1;
                    a.deny_ms.push(*retry_after_ms);
                }
                LeaseAnswer::Unavailable { .. } => a.unavailable += 1,
            }
        }
    }

    /// An agent call failed, at `now_ns`.
    pub fn failed(&self, why: CallFailure, now_ns: u64) {
        let mut log = self.log.borrow_mut();
        let a = &mut log.agent;
        a.calls += 1;
        a.call_ns.push(now_ns);
        match why {
            CallFailure::Timeout => a.timeouts += 1,
            CallFailure::Transport => a.transport_errors += 1,
            CallFailure::Status => a.bad_status += 1,
            CallFailure::Body => a.bad_body += 1,
        }
    }

    /// Calls `f` on the events recorded from index `from` on; returns the index
    /// to continue from (for the progress line).
    pub fn scan(&self, from: usize, mut f: impl FnMut(&Event)) -> usize {
        let log = self.log.borrow();
        log.events.iter().skip(from).for_each(&mut f);
        log.events.len()
    }

    /// The log, once the run is over.
    pub fn take(&self) -> Log {
        std::mem::take(&mut self.log.borrow_mut())
    }
}
