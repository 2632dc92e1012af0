//! The root context: plugin configuration, and the once-a-second sync with the
//! agent that fetches rules (only when their version changed) and reports this
//! VM's decisions. A VM that cannot reach the agent keeps its last good rules.

use std::rc::Rc;

use log::{debug, info, warn};
use meshlimit_core::rules::lines::RulesLoad;
use meshlimit_core::secret::{Secret, SECRET_ENV};
use meshlimit_core::wire::{
    lease_request_json_into, read_lease_response, LeaseAnswer, SyncRequest, SyncResponse,
    DECISIONS_PATH, LEASE_PATH, SYNC_PATH, WIRE_VERSION,
};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

use crate::backoff;
use crate::config::{nanos, FilterConfig};
use crate::finish::finish_waiting;
use crate::flights::{Call, FlightStats};
use crate::host::{AgentCall, AgentRequest, Metric, Proxy};
use crate::http::Http;
use crate::reload::{Loading, Retired, SHED_RULES};
use crate::state::{Shared, RULES_KEY, VM_SEQ_KEY};

mod rules;

/// Tick period until the first rules arrive, so a fresh Envoy limits quickly.
const STARTUP_TICK_MS: u64 = 100;

/// The largest lease call body whose buffer a VM keeps for its next call:
/// a few items' worth (a new key's call is one, about 120 bytes); a batch's
/// larger buffer (up to `MAX_BODY_BYTES`) is freed once it is sent.
const MAX_KEPT_BODY: usize = 4096;

pub struct Root<H> {
    context_id: u32,
    host: Rc<H>,
    vm: Shared,
    filter_id: String,
    /// A sync in flight, with the counts it carries (restored if it fails).
    in_flight: Option<(u32, Vec<meshlimit_core::wire::DecisionCount>)>,
    ready_gauge: Option<u32>,
    /// Whether the last sync failed: failures are logged once per outage, not
    /// once per tick.
    sync_failing: bool,
    /// The lease-call counters (calls, refills, waits, cold starts, cold
    /// starts left unpaid) and what they showed.
    call_counters: [Option<u32>; 5],
    reported: FlightStats,
    /// The call fetching the agent's rules, if one is in flight.
    rules_call: Option<u32>,
    /// A new rules version being compiled a slice at a time.
    loading: Option<Loading>,
    /// Replaced sets, freed a slice at a time.
    retired: Retired,
    /// When the next sync is due (the tick is faster while a load lasts).
    next_sync_ns: u64,
    /// `meshlimit.decision_log_dropped`: records this VM could not hand over.
    declog_dropped: Option<u32>,
}

impl<H: Proxy + 'static> Root<H> {
    pub fn new(context_id: u32, host: Rc<H>) -> Self {
        Self {
            context_id,
            call_counters: [
                host.define_metric(Metric::Counter, "meshlimit.lease_calls"),
                host.define_metric(Metric::Counter, "meshlimit.lease_refills"),
                host.define_metric(Metric::Counter, "meshlimit.lease_waits"),
                host.define_metric(Metric::Counter, "meshlimit.cold_starts"),
                host.define_metric(Metric::Counter, "meshlimit.cold_starts_unpaid"),
            ],
            reported: FlightStats::default(),
            vm: Shared::default(),
            filter_id: String::new(),
            in_flight: None,
            ready_gauge: host.define_metric(Metric::Gauge, "meshlimit.rules_ready_vms"),
            sync_failing: false,
            rules_call: None,
            loading: None,
            retired: Retired::default(),
            next_sync_ns: 0,
            declog_dropped: host.define_metric(Metric::Counter, "meshlimit.decision_log_dropped"),
            host,
        }
    }

    /// The HTTP context of stream `context_id`.
    pub(crate) fn http(&self, context_id: u32) -> Http<H> {
        Http::new(Rc::clone(&self.host), Rc::clone(&self.vm), context_id)
    }

    /// The agent counts the region's live agents; the fail-local bucket is sized
    /// by it instead of the configured `expected_nodes` (kept while the agent is
    /// unreachable, which is when the bucket is used).
    fn set_live_nodes(&mut self, nodes: u32) {
        let current = Rc::clone(&self.vm.borrow().config);
        if current.expected_nodes != nodes {
            info!("meshlimit: {nodes} live nodes share each limit");
            let config = FilterConfig {
                expected_nodes: nodes,
                ..(*current).clone()
            };
            self.vm.borrow_mut().set_config(config);
        }
    }

    /// Sends the VM's queued lease items, one call per batch. A batch the host
    /// refuses to send is answered as a failed call.
    fn send_queued(&mut self) {
        loop {
            let (config, body, items) = {
                let mut vm = self.vm.borrow_mut();
                let vm = &mut *vm;
                let version = vm.rules.as_ref().map_or("", |r| r.version());
                let Some(items) = vm.flights.take_items(version) else {
                    break;
                };
                let mut body = std::mem::take(&mut vm.call_body);
                lease_request_json_into(&mut body, version, &items);
                (Rc::clone(&vm.config), body, items)
            };
            let call = AgentCall::to_agent(
                &config,
                LEASE_PATH,
                AgentRequest::Post(body.as_bytes()),
                config.timeout,
            );
            let dispatched = self.host.dispatch(call);
            // Kept for the next call, unless a batch of many items grew it.
            if body.capacity() <= MAX_KEPT_BODY {
                self.vm.borrow_mut().call_body = body;
            }
            match dispatched {
                Some(token) => self.vm.borrow_mut().flights.sent(token, items),
                None => {
                    backoff::failed(&*self.host, config.agent_backoff);
                    self.answered(Call::Unsent(items), None);
                }
            }
        }
        self.report_calls();
    }

    /// Applies a lease call's answers (`None`: it failed) and finishes every
    /// request they decide.
    fn answered(&mut self, call: Call, answers: Option<Vec<LeaseAnswer>>) {
        let config = Rc::clone(&self.vm.borrow().config);
        let decided = self
            .vm
            .borrow_mut()
            .flights
            .answered(&*self.host, &config, call, answers);
        finish_waiting(&*self.host, &self.vm, &config, decided);
        self.host.act_for(self.context_id);
        // What the answers showed (cold starts left unpaid) is counted now,
        // not at the next call, which a denied key may never make.
        self.report_calls();
    }

    fn report_calls(&mut self) {
        let now = self.vm.borrow().flights.stats;
        let deltas = [
            now.calls - self.reported.calls,
            now.refills - self.reported.refills,
            now.waits - self.reported.waits,
            now.cold_starts - self.reported.cold_starts,
            now.cold_starts_unpaid - self.reported.cold_starts_unpaid,
        ];
        for (metric, delta) in self.call_counters.iter().zip(deltas) {
            if let (Some(id), true) = (metric, delta > 0) {
                self.host
                    .increment(*id, i64::try_from(delta).unwrap_or(i64::MAX));
            }
        }
        self.reported = now;
    }

    fn next_vm_number(&self) -> u64 {
        for _ in 0..16 {
            let (bytes, cas) = self.host.shared_get(VM_SEQ_KEY);
            let n = bytes
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
                + 1;
            if self
                .host
                .shared_set(VM_SEQ_KEY, &n.to_le_bytes(), cas)
                .is_ok()
            {
                return n;
            }
        }
        0
    }

    /// Hands the VM's next batch of buffered decision records to the agent
    /// (`MAX_DECISION_RECORDS` a call), unless a batch is still unanswered.
    /// One batch is in flight at a time: the agent handles calls
    /// concurrently, and two batches in flight could be written out of order
    /// (a rotated file would then keep older records than it deleted). A part
    /// batch goes on the tick; a whole one as soon as the last is answered,
    /// or, with none in flight, on the wake-up the request that filled it
    /// queued (`http::finish`). So the buffer drains at a batch a round trip,
    /// far more records than one worker rejects; past that its bound drops
    /// what does not fit, counted.
    fn flush_decisions(&mut self) {
        if !self.vm.borrow().declog.sending() {
            let batch = self.vm.borrow_mut().declog.take_batch(&self.filter_id);
            if let Some(batch) = batch {
                let n = batch.records.len();
                let body = serde_json::to_vec(&batch).unwrap_or_default();
                let config = Rc::clone(&self.vm.borrow().config);
                let call = AgentCall::to_agent(
                    &config,
                    DECISIONS_PATH,
                    AgentRequest::Post(&body),
                    config.sync_timeout,
                );
                match self.host.dispatch(call) {
                    Some(token) => self.vm.borrow_mut().declog.sent(token, n),
                    None => self.vm.borrow_mut().declog.lost(n),
                }
            }
        }
        self.count_dropped();
    }

    /// Sends the next batch of decision records if a whole one waits and none
    /// is in flight.
    fn flush_if_due(&mut self) {
        if self.vm.borrow().declog.batch_due() {
            self.flush_decisions();
        }
    }

    fn count_dropped(&mut self) {
        let dropped = self.vm.borrow_mut().declog.take_uncounted();
        if let (Some(id), true) = (self.declog_dropped, dropped > 0) {
            self.host
                .increment(id, i64::try_from(dropped).unwrap_or(i64::MAX));
        }
    }

    fn sync(&mut self) {
        let (config, version) = {
            let vm = self.vm.borrow();
            (
                Rc::clone(&vm.config),
                vm.rules.as_ref().map(|r| r.version().to_string()),
            )
        };
        let decisions = self.vm.borrow_mut().counts.take_unreported();
        let request = SyncRequest {
            v: WIRE_VERSION,
            filter_id: self.filter_id.clone(),
            rules_version: version,
            decisions,
            fetches_rules: true,
        };
        let body = serde_json::to_vec(&request).unwrap_or_default();
        let call = AgentCall::to_agent(
            &config,
            SYNC_PATH,
            AgentRequest::Post(&body),
            config.sync_timeout,
        );
        match self.host.dispatch(call) {
            Some(token) => self.in_flight = Some((token, request.decisions)),
            None => self.vm.borrow_mut().counts.restore(request.decisions),
        }
    }
}

impl<H: Proxy + 'static> Context for Root<H> {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let batch = self.vm.borrow_mut().declog.answered(token_id);
        if let Some(n) = batch {
            let (status, _) = self.host.call_response(body_size);
            if status == Some(200) {
                // The next batch at once if a whole one waits; a part batch
                // waits for the tick, so a steady trickle of rejections is
                // not a call a round trip.
                self.flush_if_due();
            } else {
                // The rest wait for the next tick: no second call at once
                // to an agent that just failed one.
                debug!(
                    "meshlimit: decision log batch refused (status {status:?}); {n} records lost"
                );
                self.vm.borrow_mut().declog.lost(n);
                self.count_dropped();
            }
            return;
        }
        if self.rules_call.take_if(|t| *t == token_id).is_some() {
            let (status, body) = self.host.call_response(body_size);
            match status {
                Some(200) => self.load(body),
                _ => warn!("meshlimit: fetching the rules failed (status {status:?}); keeping the last good rules"),
            }
            return;
        }
        let Some((_, decisions)) = self.in_flight.take_if(|(t, _)| *t == token_id) else {
            // Not the sync: a lease call of this VM's.
            let (status, body) = self.host.call_response(body_size);
            let answers = (status == Some(200))
                .then(|| read_lease_response(&body).ok())
                .flatten()
                .filter(|r| r.v == WIRE_VERSION)
                .map(|r| r.items);
            if answers.is_some() {
                backoff::answered(&*self.host, &mut self.vm.borrow_mut().agent_ok_seen);
            } else if backoff::agent_failed(status) {
                debug!("meshlimit: lease call failed (status {status:?})");
                let backoff = self.vm.borrow().config.agent_backoff;
                backoff::failed(&*self.host, backoff);
            } else {
                warn!("meshlimit: the agent refused a lease call (status {status:?})");
            }
            self.answered(Call::Sent(token_id), answers);
            // Requests a lost race left undecided wait on new calls (the
            // answer's counts are reported already).
            if self.vm.borrow().flights.has_queued() {
                self.send_queued();
            }
            // The requests decided by the answer may have filled a batch of
            // decision records.
            self.flush_if_due();
            return;
        };
        let (status, body) = self.host.call_response(body_size);
        let answer = (status == Some(200))
            .then(|| serde_json::from_slice::<SyncResponse>(&body).ok())
            .flatten()
            .filter(|r| r.v == WIRE_VERSION);
        match answer {
            Some(response) => {
                if self.sync_failing {
                    info!("meshlimit: agent reachable again");
                    self.sync_failing = false;
                }
                if let Some(nodes) = response.live_nodes.filter(|n| *n > 0) {
                    self.set_live_nodes(nodes);
                }
                self.fetch_rules(&response.version);
            }
            None => {
                if !self.sync_failing {
                    warn!("meshlimit: rules sync failed (status {status:?}); keeping the last good rules");
                    self.sync_failing = true;
                }
                self.vm.borrow_mut().counts.restore(decisions);
            }
        }
    }
}

impl<H: Proxy + 'static> RootContext for Root<H> {
    fn on_configure(&mut self, _size: usize) -> bool {
        let mut config = match FilterConfig::parse(self.host.plugin_configuration().as_deref()) {
            Ok(c) => c,
            Err(e) => {
                warn!("meshlimit: {e}");
                return false;
            }
        };
        // The secret comes from the VM's environment (Envoy's
        // `vm_config.environment_variables.host_env_keys`). Without one the agent
        // refuses this filter's calls and every rule takes its failure policy.
        match self.host.env_var(SECRET_ENV).map(|s| Secret::new(s.as_bytes())) {
            Some(Ok(secret)) => config = config.with_secret(&secret),
            Some(Err(e)) => warn!("meshlimit: {SECRET_ENV}: {e}; the agent will refuse this filter"),
            None => warn!("meshlimit: no {SECRET_ENV} in the VM's environment; the agent will refuse this filter"),
        }
        self.vm.borrow_mut().set_config(config);
        let node = self
            .host
            .property(&["node", "id"])
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "envoy".into());
        let vm_number = self.next_vm_number();
        self.filter_id = format!("{node}/vm{vm_number}");
        // Requests queue their lease items and wake this context through a
        // queue of this VM's own, so the calls belong to the root context:
        // never cancelled with a stream that ends first, and batched.
        self.vm.borrow_mut().call_queue = self
            .host
            .register_queue(&format!("meshlimit.calls.{vm_number}"));
        // Start with the last good rules any VM on this Envoy had.
        if let (Some(lines), _) = self.host.shared_get(RULES_KEY) {
            match RulesLoad::run(lines) {
                Ok((set, _)) => self.install(set, None),
                Err(e) => debug!("meshlimit: no usable rules in shared data: {e}"),
            }
        }
        self.set_tick();
        true
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        self.host.take_wake(queue_id);
        self.vm.borrow_mut().wake_queued = false;
        self.send_queued();
        // A request may have filled a batch of decision records.
        self.flush_if_due();
    }

    fn on_tick(&mut self) {
        let fast = self.loading.is_some() || self.retired.can_shed();
        self.load_slice();
        if !self.retired.is_empty() {
            self.retired.shed(SHED_RULES);
        }
        // Fast while there is work: a set still held by a long stream is looked
        // at again at the sync interval.
        if fast != (self.loading.is_some() || self.retired.can_shed()) {
            self.set_tick();
        }
        // While the tick is fast, syncs keep their own interval.
        let now = self.host.now_ns();
        if self.in_flight.is_none() && (!fast || now >= self.next_sync_ns) {
            let interval = self.vm.borrow().config.sync_interval;
            self.next_sync_ns = now.saturating_add(nanos(interval));
            self.sync();
            self.flush_decisions();
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(self.http(context_id)))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
