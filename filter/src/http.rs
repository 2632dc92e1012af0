//! The HTTP context: gathers the request, runs the pipeline, pauses for the agent
//! when local state cannot decide, and answers 429/503 or lets the request go on.

use std::rc::Rc;

use log::debug;
use meshlimit_core::decision::HeldQuota;
use meshlimit_core::header_list::MalformedHeaders;
use meshlimit_core::headers::{self, HeaderStyle, Protocol};
use meshlimit_core::rules::{Needs, RequestError};
use meshlimit_core::wire::{lease_request_json, read_lease_response, LEASE_PATH, WIRE_VERSION};
use meshlimit_core::{client_ip, metadata, RequestInfo, RuleSet};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use crate::backoff;
use crate::config::FilterConfig;
use crate::finish::{fail_queued, finish, protocol_of};
use crate::host::{AgentCall, AgentRequest, Proxy};
use crate::pipeline::{Evaluation, LocalStep};
use crate::state::{QuotaCell, Shared, Waiting};
use crate::usage;

pub struct Http<H> {
    host: Rc<H>,
    vm: Shared,
    config: Rc<FilterConfig>,
    context_id: u32,
    /// The evaluation waiting for this request's own agent call (a host without
    /// shared queues, where the root context cannot call for it), and the
    /// request as its rules saw it (boxed: most requests have none, and
    /// their contexts' drop then tests one pointer).
    pending: Option<Box<(Evaluation, RequestInfo)>>,
    /// The quota the allowed response reports, when this context finished
    /// the request (held inline: no allocation on the request path)...
    quota: Option<HeldQuota>,
    /// ...or the cell the root context sets it in, once the request waited
    /// on the VM's lease calls.
    parked: Option<QuotaCell>,
}

impl<H: Proxy> Http<H> {
    pub fn new(host: Rc<H>, vm: Shared, context_id: u32) -> Self {
        let config = Rc::clone(&vm.borrow().config);
        Self {
            host,
            vm,
            config,
            context_id,
            pending: None,
            quota: None,
            parked: None,
        }
    }

    /// The request as the rules see it. Stream
    /// properties are host calls, so they are fetched only when some rule keys
    /// on them.
    fn request_info(&self, rules: Option<&RuleSet>) -> Result<RequestInfo, MalformedHeaders> {
        let none = Needs::default();
        let needs = rules.map_or(&none, RuleSet::needs);
        let headers = self.host.request_headers()?;
        let mut info = RequestInfo::from_headers(headers);
        // The host's clock (Unix time): which schedule window is in force.
        info.now_ns = self.host.now_ns();
        if needs.client_ip || needs.route || needs.cluster || !needs.metadata.is_empty() {
            self.stream_facts(needs, &mut info);
        }
        Ok(info)
    }

    /// The stream properties some rule keys on (each a host call), read
    /// into `info`.
    #[inline(never)]
    fn stream_facts(&self, needs: &Needs, info: &mut RequestInfo) {
        if needs.client_ip {
            let downstream = self.host.property(&["source", "address"]);
            // Read where the header list holds it, and only when a rule keys
            // on the client's address.
            let xff = info
                .headers
                .get("x-forwarded-for")
                .and_then(meshlimit_core::text::utf8);
            let client_ip =
                client_ip::resolve(downstream.as_deref(), xff, self.config.trusted_hops);
            info.client_ip = client_ip;
        }
        if needs.route {
            info.route = self
                .host
                .property(&["xds", "route_name"])
                .filter(|r| !r.is_empty());
        }
        if needs.cluster {
            info.cluster = self
                .host
                .property(&["xds", "cluster_name"])
                .filter(|c| !c.is_empty());
        }
        // One call for the whole dynamic metadata, as protobuf (see
        // `meshlimit_core::metadata`), only when some rule reads it.
        if !needs.metadata.is_empty() {
            if let Some(all) = self.host.property_bytes(&["metadata"]) {
                info.metadata = needs
                    .metadata
                    .iter()
                    .filter_map(|f| Some((f.clone(), metadata::namespace(&all, f)?.to_vec())))
                    .collect();
            }
        }
    }

    /// Finishes the request `info` in this context; an allowed one keeps its
    /// quota for the response.
    fn finish(&mut self, info: &RequestInfo, eval: &Evaluation) -> Action {
        let (host, vm, config) = (&*self.host, &self.vm, &self.config);
        let (action, quota) = finish(host, vm, config, info, eval);
        self.quota = quota;
        action
    }

    /// Takes the request's evaluation to the VM's lease calls: it waits there
    /// (returns `Pause`; the root context finishes it) or is decided at once.
    fn join_flights(&mut self, eval: Evaluation, queue: u32, info: RequestInfo) -> Action {
        let admitted =
            self.vm
                .borrow_mut()
                .flights
                .admit(&*self.host, &self.config, self.context_id, eval);
        let action = match admitted {
            Some(eval) => self.finish(&info, &eval),
            None => self.park(info),
        };
        wake_root(&*self.host, &self.vm, queue);
        action
    }
}

impl<H: Proxy> Http<H> {
    // The rare ends of a request, each a function of its own: kept out of
    // `on_http_request_headers`, whose code every request enters.

    /// Answers a request the rules cannot be applied to (400).
    #[cold]
    #[inline(never)]
    fn refuse(&self, protocol: Protocol, e: &RequestError) -> Action {
        self.host.send_answer(headers::bad_request(protocol, e));
        Action::Pause
    }

    /// Answers a request to the usage path (or its limit).
    #[cold]
    #[inline(never)]
    fn answer_usage(&mut self, rules: Option<&RuleSet>, info: &RequestInfo) -> Action {
        let now = self.host.now_ns();
        let per_second = self.config.usage_per_second;
        let admitted = self
            .vm
            .borrow_mut()
            .usage
            .admit(&*self.host, per_second, now);
        self.host.send_answer(if admitted {
            let protocol = protocol_of(info);
            usage::answer(&*self.host, &self.config, rules, info, protocol)
        } else {
            usage::limited()
        });
        Action::Pause
    }

    /// Calls the agent for this request alone (a host without shared
    /// queues): the request waits for the answer, or takes its failure
    /// policy when the call cannot be made.
    #[inline(never)]
    fn call_alone(&mut self, mut eval: Evaluation, info: RequestInfo) -> Action {
        let host = &*self.host;
        let body = lease_request_json(eval.rules_version(), &eval.miss_items());
        let cfg = &self.config;
        let call = AgentCall::to_agent(cfg, LEASE_PATH, AgentRequest::Post(&body), cfg.timeout);
        if host.dispatch(call).is_some() {
            self.pending = Some(Box::new((eval, info)));
            return Action::Pause;
        }
        backoff::failed(host, self.config.agent_backoff);
        eval.fail_misses(host, &self.config);
        self.finish(&info, &eval)
    }

    /// Leaves the request `info` waiting on the VM's lease calls: the root
    /// context finishes it and sets its quota in the cell kept here.
    #[inline(never)]
    fn park(&mut self, info: RequestInfo) -> Action {
        let quota = QuotaCell::default();
        let waiting = Waiting {
            quota: Rc::clone(&quota),
            info,
        };
        self.vm
            .borrow_mut()
            .waiting
            .insert(self.context_id, waiting);
        self.parked = Some(quota);
        Action::Pause
    }
}

/// Asks the root context to send the VM's queued items, and a whole batch of
/// decision records if one waits with none in flight (so a burst of
/// rejections does not overflow the buffer between two ticks), once per turn.
/// A queue the host refuses fails the queued items (each waiting request takes
/// its failure policy); the records wait for the tick.
fn wake_root<H: Proxy>(host: &H, vm: &Shared, queue: u32) {
    let wake = {
        let v = vm.borrow();
        (v.flights.has_queued() || v.declog.batch_due()) && !v.wake_queued
    };
    if !wake {
        return;
    }
    if host.enqueue(queue) {
        vm.borrow_mut().wake_queued = true;
    } else {
        fail_queued(host, vm);
    }
}

impl<H> Drop for Http<H> {
    fn drop(&mut self) {
        // A parked request the root context finished is in neither of the
        // VM's lists: its entry in `waiting`, which held the cell's other
        // reference, went when it was finished (`finish_waiting`), after it
        // left the lease calls' list. Only one that was not finished (the
        // stream reset while it waited) is looked for.
        if self
            .parked
            .as_ref()
            .is_some_and(|q| Rc::strong_count(q) > 1)
        {
            if let Ok(mut vm) = self.vm.try_borrow_mut() {
                vm.flights.forget(self.context_id);
                vm.waiting.remove(&self.context_id);
            }
        }
    }
}

impl<H: Proxy> Context for Http<H> {
    fn on_http_call_response(
        &mut self,
        _token_id: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let Some((mut eval, info)) = self.pending.take().map(|b| *b) else {
            return;
        };
        let (status, body) = self.host.call_response(body_size);
        let answer = (status == Some(200))
            .then(|| read_lease_response(&body).ok())
            .flatten()
            .filter(|r| r.v == WIRE_VERSION);
        match answer {
            Some(resp) => {
                backoff::answered(&*self.host, &mut self.vm.borrow_mut().agent_ok_seen);
                eval.apply_answers(&*self.host, &self.config, resp.items);
            }
            None => {
                debug!("meshlimit: lease call failed (status {status:?})");
                // A 4xx means we sent something the agent refuses: a bug, not an
                // outage, but the request must not wait either way.
                if backoff::agent_failed(status) {
                    backoff::failed(&*self.host, self.config.agent_backoff);
                }
                eval.fail_misses(&*self.host, &self.config);
            }
        }
        if let Action::Continue = self.finish(&info, &eval) {
            self.host.resume_request();
        }
    }
}

impl<H: Proxy> HttpContext for Http<H> {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let rules = self.vm.borrow().rules.clone();
        if rules.is_none() && self.config.usage_path.is_none() {
            return Action::Continue;
        }
        let info = match self.request_info(rules.as_deref()) {
            Ok(read) => read,
            Err(e) => return self.refuse(Protocol::Http, &RequestError::from(e)),
        };
        if usage::is_usage(&self.config, &info) {
            return self.answer_usage(rules.as_deref(), &info);
        }
        let Some(rules) = rules else {
            return Action::Continue;
        };
        let mut eval = match Evaluation::new(rules, &info, &self.config) {
            Ok(Some(eval)) => eval,
            Ok(None) => return Action::Continue,
            Err(e) => return self.refuse(protocol_of(&info), &e),
        };
        let host = Rc::clone(&self.host);
        let host = &*host;
        let queue = self.vm.borrow().call_queue;
        let step = {
            let mut vm = self.vm.borrow_mut();
            let vm = &mut *vm;
            // A key hot at this worker is decided from its slice, no host call.
            if eval.slice_pass(&mut vm.slices) {
                LocalStep::default()
            } else {
                // A cold start's call goes out with the VM's batch.
                let cold = queue.is_some().then_some(&mut vm.cold_starts);
                let flights = &vm.flights;
                let busy = |fp| flights.is_busy(fp);
                let busy = queue.is_some().then_some(&busy as &dyn Fn(u64) -> bool);
                let step = eval.local_step(host, &self.config, cold, busy);
                eval.keep_slices(&mut vm.slices);
                step
            }
        };
        if let Some(queue) = queue.filter(|_| !step.backed_off) {
            return self.join_flights(eval, queue, info);
        }
        if step.ask {
            return self.call_alone(eval, info);
        }
        self.finish(&info, &eval)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let quota = match &self.parked {
            Some(cell) => *cell.borrow(),
            None => self.quota,
        };
        if let Some(held) = quota.as_ref() {
            let style = self.config.response_headers;
            if style != HeaderStyle::Off {
                let host = &self.host;
                let mut vm = self.vm.borrow_mut();
                vm.quota_fields.write(style, &held.quota(), |name, value| {
                    host.add_response_header(name, value);
                });
            }
        }
        Action::Continue
    }
}
