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
//!
//! How calls travel and when the root context runs is the gateway's [`Link`]:
//! real HTTP on the real-time harness's `LocalSet` ([`HttpLink`]), or the
//! virtual fleet's event queue (`crate::vtime`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use meshlimit_core::decision::decide;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::wire::{DecisionsRequest, LeaseAnswer, LeaseRequest, LeaseResponse};
use meshlimit_core::{Outcome, RequestInfo, RuleSet, Verdict};
use meshlimit_filter::allowance::Allowance;
use meshlimit_filter::backoff;
use meshlimit_filter::config::FilterConfig;
use meshlimit_filter::declog::DecisionLog;
use meshlimit_filter::flights::{Call, FlightStats, Flights};
use meshlimit_filter::host::Host;
use meshlimit_filter::pipeline::{Evaluation, Item};
use meshlimit_filter::testing::MemoryHost;

use crate::arrivals::ArrivalGen;
use crate::client::AgentClient;
use crate::record::{CallFailure, Decision, Pending, Recorder};

/// How a gateway's calls reach its agent and when its root context runs.
pub trait Link {
    /// The root context is due: run [`Gateway::root_turn`] when the worker's
    /// event loop next turns.
    fn wake(&self, gw: &Rc<Gateway>);
    /// Sends one lease call; its end comes back through [`Gateway::completed`].
    fn lease(&self, gw: &Rc<Gateway>, request: LeaseRequest, items: Vec<Item>);
    /// Hands one batch of decision records to the agent.
    fn decisions(&self, gw: &Rc<Gateway>, batch: DecisionsRequest);
}

/// The real-time harness's link: HTTP to an agent process, tasks on the
/// current `LocalSet`.
pub struct HttpLink(Rc<AgentClient>);

impl HttpLink {
    pub fn new(client: AgentClient) -> HttpLink {
        HttpLink(Rc::new(client))
    }
}

impl Link for HttpLink {
    fn wake(&self, gw: &Rc<Gateway>) {
        let gw = Rc::clone(gw);
        tokio::task::spawn_local(async move {
            tokio::task::yield_now().await;
            gw.root_turn();
        });
    }

    fn lease(&self, gw: &Rc<Gateway>, request: LeaseRequest, items: Vec<Item>) {
        let (gw, client) = (Rc::clone(gw), Rc::clone(&self.0));
        tokio::task::spawn_local(async move {
            let result = client.lease(&request).await;
            gw.completed(items, result);
        });
    }

    fn decisions(&self, gw: &Rc<Gateway>, batch: DecisionsRequest) {
        let (gw, client) = (Rc::clone(gw), Rc::clone(&self.0));
        gw.posting.set(gw.posting.get() + 1);
        tokio::task::spawn_local(async move {
            let _ = client.decisions(&batch).await;
            gw.posting.set(gw.posting.get().saturating_sub(1));
        });
    }
}

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
    link: Box<dyn Link>,
    rec: Rc<Recorder>,
    /// The true time, when the host's clock is set by hand and may be skewed
    /// from it (the virtual fleet): records carry the true time.
    truth: Cell<Option<u64>>,
    flights: RefCell<Flights<u64>>,
    /// Requests waiting on the VM's calls, by number.
    waiting: RefCell<HashMap<u64, Pending>>,
    next_id: Cell<u64>,
    /// The root context is already due to send the queued items.
    root_woken: Cell<bool>,
    /// The date of the agent's last answer this VM saw (`backoff::answered`).
    agent_ok_seen: Cell<u64>,
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
        link: Box<dyn Link>,
        rec: Rc<Recorder>,
    ) -> Gateway {
        Gateway {
            id,
            host,
            cfg,
            rules,
            keys,
            link,
            rec,
            truth: Cell::new(None),
            flights: RefCell::new(Flights::default()),
            waiting: RefCell::new(HashMap::new()),
            next_id: Cell::new(0),
            root_woken: Cell::new(false),
            agent_ok_seen: Cell::new(0),
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
        for a in arrivals {
            tokio::time::sleep_until(start + Duration::from_nanos(a.at_ns)).await;
            // On the schedule's clock (monotonic), not the host's (wall).
            let offered_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.rec.lag(a.at_ns, offered_ns);
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
            self.link.decisions(self, batch);
        }
    }

    /// Sets the host's clock to `now_ns` of true time plus `skew_ns` (the
    /// virtual fleet, before each event of this gateway).
    pub fn set_now(&self, now_ns: u64, skew_ns: i64) {
        self.truth.set(Some(now_ns));
        self.host.set_now(now_ns.saturating_add_signed(skew_ns));
    }

    /// The time records carry: the true time where it is set apart.
    fn record_ns(&self) -> u64 {
        self.truth.get().unwrap_or_else(|| self.host.now_ns())
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
        let pending = self.rec.arrive(key, self.id, self.record_ns());
        let step = {
            // As the filter's HTTP context (one `local_step`).
            let mut cold = self.cold_starts.borrow_mut();
            let flights = self.flights.borrow();
            let busy = |fp| flights.is_busy(fp);
            eval.local_step(&self.host, &self.cfg, Some(&mut *cold), Some(&busy))
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
        self.link.wake(self);
    }

    /// The root context runs: it sends what is queued.
    pub fn root_turn(self: &Rc<Self>) {
        self.root_woken.set(false);
        self.send_queued();
    }

    /// The root context's sending: one agent call per batch.
    fn send_queued(self: &Rc<Self>) {
        loop {
            let batch = self.flights.borrow_mut().take_batch(self.rules.version());
            let Some((request, items)) = batch else {
                return;
            };
            self.inflight.set(self.inflight.get() + 1);
            self.link.lease(self, request, items);
        }
    }

    /// A lease call sent by [`Link::lease`] ended: its answer, or why there is none.
    pub fn completed(
        self: &Rc<Self>,
        items: Vec<Item>,
        result: Result<LeaseResponse, CallFailure>,
    ) {
        let answers = match result {
            Ok(resp) => {
                self.rec.answers(&resp.items, self.record_ns());
                let mut seen = self.agent_ok_seen.get();
                backoff::answered(&self.host, &mut seen);
                self.agent_ok_seen.set(seen);
                Some(resp.items)
            }
            Err(why) => {
                self.rec.failed(why, self.record_ns());
                backoff::failed(&self.host, self.cfg.agent_backoff);
                None
            }
        };
        self.answered(items, answers);
        self.inflight.set(self.inflight.get().saturating_sub(1));
    }

    fn answered(self: &Rc<Self>, items: Vec<Item>, answers: Option<Vec<LeaseAnswer>>) {
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
            .record(&self.records.key_ids, eval, None, || None, now);
        let decision = decision_of(eval);
        self.rec.decide(pending, decision, local, self.record_ns());
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
