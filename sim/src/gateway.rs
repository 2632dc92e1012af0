//! One simulated gateway (one Envoy worker's VM): its own shared data, its own
//! filter configuration, the rules, and a client to its agent. Each request runs
//! the filter's request path: the local pass (`meshlimit_filter::pipeline`:
//! denial cache, lease, refill mark), then the VM's lease calls
//! (`meshlimit_filter::flights`: batched, one per key in flight, requests
//! waiting on their key's call), sent when the worker's event loop next turns
//! as the filter's root context sends them, and the filter's back-off
//! (`meshlimit_filter::backoff`) after failed calls. Its decisions go to the
//! filter's decision log (`meshlimit_filter::declog`), whose batches it hands
//! to its agent every second as the filter's tick does, so the agents compute
//! the false-limit SLI from them as in production. So the simulator measures
//! the filter's own code, not a copy of it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use meshlimit_core::decision::decide;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::wire::LeaseAnswer;
use meshlimit_core::{Outcome, RequestInfo, RuleSet, Verdict};
use meshlimit_filter::allowance::Allowance;
use meshlimit_filter::backoff;
use meshlimit_filter::config::FilterConfig;
use meshlimit_filter::declog::DecisionLog;
use meshlimit_filter::flights::{Call, FlightStats, Flights};
use meshlimit_filter::host::Host;
use meshlimit_filter::pipeline::Evaluation;
use meshlimit_filter::testing::MemoryHost;

use crate::arrivals::ArrivalGen;
use crate::client::AgentClient;
use crate::record::{Decision, Pending, Recorder};

/// The keys requests carry, in the scenario's key header.
pub struct Keys {
    header: String,
    names: Vec<String>,
}

/// What every gateway's decision records need: the ids they name keys by
/// (the agents' secret) and the Unix time of the hosts' clock zero.
pub struct RecordSetup {
    pub key_ids: KeyIds,
    /// Unix ms at the host clock's zero: records carry Unix times.
    pub unix_ms_at_zero: u64,
}

/// One gateway.
pub struct Gateway {
    id: u16,
    host: MemoryHost,
    cfg: FilterConfig,
    rules: Rc<RuleSet>,
    keys: Rc<Keys>,
    client: AgentClient,
    rec: Rc<Recorder>,
    flights: RefCell<Flights<u64>>,
    /// Requests waiting on the VM's calls, by number.
    waiting: RefCell<HashMap<u64, Pending>>,
    next_id: Cell<u64>,
    /// The root context is already due to send the queued items.
    root_woken: Cell<bool>,
    inflight: Cell<usize>,
    /// The VM's decision records.
    declog: RefCell<DecisionLog>,
    records: Rc<RecordSetup>,
    /// Decision batches on their way to the agent.
    posting: Cell<usize>,
    /// The VM's allowance of cold starts (`cold_start: admit` rules).
    cold_starts: RefCell<Allowance>,
}

impl Keys {
    pub fn new(header: &str, count: usize) -> Keys {
        Keys {
            header: header.to_string(),
            names: (0..count).map(|i| format!("k{i}")).collect(),
        }
    }

    /// The request a client sends for `key`.
    pub fn request(&self, key: u32) -> RequestInfo {
        let value = self.names.get(key as usize).cloned().unwrap_or_default();
        RequestInfo::new("/", "GET", vec![(self.header.clone(), value)])
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

impl Gateway {
    pub fn new(
        id: u16,
        host: MemoryHost,
        cfg: FilterConfig,
        rules: Rc<RuleSet>,
        keys: Rc<Keys>,
        client: AgentClient,
        rec: Rc<Recorder>,
    ) -> Gateway {
        Gateway {
            id,
            host,
            cfg,
            rules,
            keys,
            client,
            rec,
            flights: RefCell::new(Flights::default()),
            waiting: RefCell::new(HashMap::new()),
            next_id: Cell::new(0),
            root_woken: Cell::new(false),
            inflight: Cell::new(0),
            declog: RefCell::new(DecisionLog::default()),
            records: Rc::new(RecordSetup {
                key_ids: KeyIds::placeholder(),
                unix_ms_at_zero: 0,
            }),
            posting: Cell::new(0),
            cold_starts: RefCell::default(),
        }
    }

    /// What the VM's lease calls did (calls, refills, waits).
    pub fn flight_stats(&self) -> FlightStats {
        self.flights.borrow().stats
    }

    /// Offers the planned arrivals at their times (open loop: a request waiting
    /// for the agent never delays the next arrival).
    pub async fn run(self: Rc<Self>, arrivals: ArrivalGen, start: tokio::time::Instant) {
        let offset = self
            .host
            .now_ns()
            .saturating_sub(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
        for a in arrivals {
            tokio::time::sleep_until(start + Duration::from_nanos(a.at_ns)).await;
            self.rec
                .lag(offset.saturating_add(a.at_ns), self.host.now_ns());
            self.arrive(a.key);
        }
    }

    /// The gateway, its decision records naming keys and times by `records`
    /// (by default: placeholder ids, times from the host clock's zero).
    pub fn with_records(mut self, records: Rc<RecordSetup>) -> Gateway {
        self.records = records;
        self
    }

    /// Hands the VM's decision records to the agent, in batches (the
    /// filter's tick).
    pub fn flush_decisions(self: &Rc<Self>) {
        let filter_id = format!("sim/gw{}", self.id);
        loop {
            let Some(mut batch) = self.declog.borrow_mut().take_batch(&filter_id) else {
                return;
            };
            for r in &mut batch.records {
                r.at_ms = r.at_ms.saturating_add(self.records.unix_ms_at_zero);
            }
            self.posting.set(self.posting.get() + 1);
            let gw = Rc::clone(self);
            tokio::task::spawn_local(async move {
                let _ = gw.client.decisions(&batch).await;
                gw.posting.set(gw.posting.get().saturating_sub(1));
            });
        }
    }

    /// Decision batches not yet answered.
    pub fn posting(&self) -> usize {
        self.posting.get()
    }

    /// Agent calls still waiting for an answer, plus requests still waiting
    /// on one (queued for the next call, or parked on a call out).
    pub fn inflight(&self) -> usize {
        self.inflight.get() + self.waiting.borrow().len()
    }

    /// One request for `key`, now.
    pub fn arrive(self: &Rc<Self>, key: u32) {
        let now = self.host.now_ns();
        let mut info = self.keys.request(key);
        // As the filter's HTTP context: the request's one clock read.
        info.now_ns = now;
        let Ok(Some(mut eval)) = Evaluation::new(Rc::clone(&self.rules), &info, &self.cfg) else {
            self.rec.unmatched();
            return;
        };
        let pending = self.rec.arrive(key, self.id, now);
        let step = {
            // As the filter's HTTP context (one `local_step`).
            let mut cold = self.cold_starts.borrow_mut();
            eval.local_step(&self.host, &self.cfg, Some(&mut *cold))
        };
        if step.backed_off {
            return self.finish(pending, &eval, true);
        }
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let admitted = self
            .flights
            .borrow_mut()
            .admit(&self.host, &self.cfg, id, eval);
        match admitted {
            Some(eval) => self.finish(pending, &eval, true),
            None => {
                self.waiting.borrow_mut().insert(id, pending);
            }
        }
        self.wake_root();
    }

    /// The filter's requests wake the root context through a queue, which runs
    /// when the worker's event loop next turns: everything queued by then goes
    /// out in one call.
    fn wake_root(self: &Rc<Self>) {
        if !self.flights.borrow().has_queued() || self.root_woken.replace(true) {
            return;
        }
        let gw = Rc::clone(self);
        tokio::task::spawn_local(async move {
            tokio::task::yield_now().await;
            gw.root_woken.set(false);
            gw.send_queued();
        });
    }

    /// The root context's sending: one agent call per batch.
    fn send_queued(self: &Rc<Self>) {
        loop {
            let batch = self.flights.borrow_mut().take_batch(self.rules.version());
            let Some((request, items)) = batch else {
                return;
            };
            self.inflight.set(self.inflight.get() + 1);
            let gw = Rc::clone(self);
            tokio::task::spawn_local(async move {
                let answers = match gw.client.lease(&request).await {
                    Ok(resp) => {
                        gw.rec.answers(&resp.items, gw.host.now_ns());
                        backoff::answered(&gw.host);
                        Some(resp.items)
                    }
                    Err(why) => {
                        gw.rec.failed(why, gw.host.now_ns());
                        backoff::failed(&gw.host, gw.cfg.agent_backoff);
                        None
                    }
                };
                gw.answered(items, answers);
                gw.inflight.set(gw.inflight.get().saturating_sub(1));
            });
        }
    }

    fn answered(
        self: &Rc<Self>,
        items: Vec<meshlimit_filter::pipeline::Item>,
        answers: Option<Vec<LeaseAnswer>>,
    ) {
        let decided =
            self.flights
                .borrow_mut()
                .answered(&self.host, &self.cfg, Call::Unsent(items), answers);
        for (id, eval) in decided {
            if let Some(pending) = self.waiting.borrow_mut().remove(&id) {
                self.finish(pending, &eval, false);
            }
        }
        // Requests a lost race left undecided wait on new calls.
        self.send_queued();
    }

    fn finish(&self, pending: Pending, eval: &Evaluation, local: bool) {
        let now = self.host.now_ns();
        self.declog
            .borrow_mut()
            .record(&self.records.key_ids, eval, None, None, now);
        let decision = decision_of(eval);
        self.rec
            .decide(pending, decision, local, self.host.now_ns());
    }
}

/// The request's fate as the client sees it, and whether a failure policy chose it.
fn decision_of(eval: &Evaluation) -> Decision {
    let results = eval.results();
    let by_failure = results
        .iter()
        .any(|r| matches!(r.failure, Some(Outcome::FailedOpen | Outcome::FailedLocal)));
    match (decide(&results), by_failure) {
        (Verdict::Allow { .. }, false) => Decision::Allowed,
        (Verdict::Allow { .. }, true) => Decision::FailAllowed,
        (Verdict::Deny { .. }, false) => Decision::Limited,
        (Verdict::Deny { .. }, true) => Decision::FailLimited,
        (Verdict::Unavailable { .. }, _) => Decision::Unavailable,
    }
}
