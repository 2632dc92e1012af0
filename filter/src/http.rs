//! The HTTP context: gathers the request, runs the pipeline, pauses for the agent
//! when local state cannot decide, and answers 429/503 or lets the request go on.

use std::rc::Rc;

use log::debug;
use meshlimit_core::decision::Quota;
use meshlimit_core::headers::{self, HeaderStyle, Protocol};
use meshlimit_core::rules::KeyPart;
use meshlimit_core::wire::{LeaseResponse, LEASE_PATH, WIRE_VERSION};
use meshlimit_core::{client_ip, Limit, RequestInfo, RuleSet, Verdict};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use crate::config::FilterConfig;
use crate::host::{self, Host, ProxyHost};
use crate::pipeline::Evaluation;
use crate::state::{
    Shared, AGENT_ALIVE_NS, AGENT_DOWN_KEY, AGENT_FAILURES_KEY, AGENT_FAILURES_TO_BACK_OFF,
    AGENT_OK_KEY,
};

pub struct Http {
    vm: Shared,
    config: Rc<FilterConfig>,
    /// The evaluation waiting for the agent's answer.
    pending: Option<Evaluation>,
    /// The quota the allowed response reports.
    quota: Option<(String, Limit, u32, u64)>,
    /// Whether a local answer takes the gRPC form.
    protocol: Protocol,
}

impl Http {
    pub fn new(vm: Shared) -> Self {
        let config = Rc::clone(&vm.borrow().config);
        Self {
            vm,
            config,
            pending: None,
            quota: None,
            protocol: Protocol::Http,
        }
    }

    /// The request as the rules see it, and the protocol it speaks. Stream
    /// properties are host calls, so they are fetched only when some rule keys
    /// on them.
    fn request_info(&self, rules: &RuleSet) -> (RequestInfo, Protocol) {
        let headers = host::request_headers();
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
                .map(str::to_string)
        };
        let path = headers
            .iter()
            .find(|(n, _)| n == ":path")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let method = find(":method").unwrap_or_default();
        let xff = find("x-forwarded-for");
        let protocol = Protocol::of_content_type(
            headers
                .iter()
                .find(|(n, _)| n == "content-type")
                .map(|(_, v)| v.as_slice()),
        );
        let mut info = RequestInfo::new(path, &method, headers);
        if rules.uses(&KeyPart::ClientIp) {
            let downstream = host::property(vec!["source", "address"]);
            info.client_ip = client_ip::resolve(
                downstream.as_deref(),
                xff.as_deref(),
                self.config.trusted_hops,
            );
        }
        if rules.uses(&KeyPart::Route) {
            info.route = host::property(vec!["xds", "route_name"]).filter(|r| !r.is_empty());
        }
        (info, protocol)
    }

    /// Counts every rule's decision and carries out the verdict.
    fn finish(&mut self, eval: &Evaluation) -> Action {
        {
            let mut vm = self.vm.borrow_mut();
            for r in eval.results() {
                vm.counts.record(r.rule, r.outcome());
            }
        }
        let style = self.config.response_headers;
        match eval.verdict() {
            Verdict::Allow { tightest } => {
                self.quota =
                    tightest.map(|q| (q.rule.to_string(), q.limit, q.remaining, q.reset_ns));
                Action::Continue
            }
            Verdict::Deny {
                rule,
                limit,
                retry_after_ns,
            } => {
                host::send_answer(headers::rejection(
                    self.protocol,
                    style,
                    rule,
                    &limit,
                    retry_after_ns,
                ));
                Action::Pause
            }
            Verdict::Unavailable { rule } => {
                host::send_answer(headers::unavailable(self.protocol, rule));
                Action::Pause
            }
        }
    }

    fn agent_backing_off(&self, now: u64) -> bool {
        let (bytes, _) = ProxyHost.shared_get(AGENT_DOWN_KEY);
        bytes
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .is_some_and(|until| until > now)
    }

    /// A failed agent call. Each failing request takes its policy at once;
    /// after `AGENT_FAILURES_TO_BACK_OFF` failures in a row (the agent is down,
    /// not just slow once) misses skip the agent for `agent_backoff_ms`.
    fn agent_failed(&self) {
        let (bytes, _) = ProxyHost.shared_get(AGENT_FAILURES_KEY);
        let failures = bytes
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes)
            + 1;
        // An agent that answered another request moments ago is alive: its
        // slow answers are one store node's trouble (their keys took the failure
        // policy), not a reason to take every other key off the agent.
        let now = ProxyHost.now_ns();
        let (ok, _) = ProxyHost.shared_get(AGENT_OK_KEY);
        let recent_ok = ok
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .is_some_and(|at| now.saturating_sub(at) < AGENT_ALIVE_NS);
        if failures < AGENT_FAILURES_TO_BACK_OFF || recent_ok {
            let _ = ProxyHost.shared_set(AGENT_FAILURES_KEY, &failures.to_le_bytes(), None);
            return;
        }
        let _ = ProxyHost.shared_set(AGENT_FAILURES_KEY, &0u32.to_le_bytes(), None);
        let backoff = self.config.agent_backoff_ms.saturating_mul(1_000_000);
        let until = now.saturating_add(backoff);
        let _ = ProxyHost.shared_set(AGENT_DOWN_KEY, &until.to_le_bytes(), None);
    }

    /// A successful agent call ends a run of failures.
    fn agent_answered(&self) {
        let now = ProxyHost.now_ns();
        let (ok, _) = ProxyHost.shared_get(AGENT_OK_KEY);
        let stale = ok
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .is_none_or(|at| now.saturating_sub(at) >= AGENT_ALIVE_NS / 4);
        if stale {
            let _ = ProxyHost.shared_set(AGENT_OK_KEY, &now.to_le_bytes(), None);
        }
        let (bytes, _) = ProxyHost.shared_get(AGENT_FAILURES_KEY);
        if bytes.is_some_and(|b| b.iter().any(|x| *x != 0)) {
            let _ = ProxyHost.shared_set(AGENT_FAILURES_KEY, &0u32.to_le_bytes(), None);
        }
    }
}

impl Context for Http {
    fn on_http_call_response(
        &mut self,
        _token_id: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let Some(mut eval) = self.pending.take() else {
            return;
        };
        let (status, body) = host::call_response(body_size);
        let answer = (status == Some(200))
            .then(|| serde_json::from_slice::<LeaseResponse>(&body).ok())
            .flatten()
            .filter(|r| r.v == WIRE_VERSION);
        match answer {
            Some(resp) => {
                self.agent_answered();
                eval.apply_answers(&ProxyHost, &self.config, resp.items);
            }
            None => {
                debug!("meshlimit: lease call failed (status {status:?})");
                // A 4xx means we sent something the agent refuses: a bug, not an
                // outage, but the request must not wait either way.
                self.agent_failed();
                eval.fail_misses(&ProxyHost, &self.config);
            }
        }
        if let Action::Continue = self.finish(&eval) {
            host::resume_request();
        }
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(rules) = self.vm.borrow().rules.clone() else {
            return Action::Continue;
        };
        let (info, protocol) = self.request_info(&rules);
        self.protocol = protocol;
        let mut eval = match Evaluation::new(rules, &info, &self.config) {
            Ok(Some(eval)) => eval,
            Ok(None) => return Action::Continue,
            Err(e) => {
                host::send_answer(headers::bad_request(protocol, &e));
                return Action::Pause;
            }
        };
        if eval.local_pass(&ProxyHost, &self.config) {
            if self.agent_backing_off(ProxyHost.now_ns()) {
                eval.fail_misses(&ProxyHost, &self.config);
            } else {
                let body = serde_json::to_vec(&eval.lease_request()).unwrap_or_default();
                let cfg = &self.config;
                if host::dispatch(
                    &cfg.agent_cluster,
                    &cfg.agent_authority,
                    cfg.agent_auth.as_deref(),
                    LEASE_PATH,
                    &body,
                    cfg.timeout_ms,
                )
                .is_some()
                {
                    self.pending = Some(eval);
                    return Action::Pause;
                }
                self.agent_failed();
                eval.fail_misses(&ProxyHost, &self.config);
            }
        }
        self.finish(&eval)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if let Some((rule, limit, remaining, reset_ns)) = &self.quota {
            if self.config.response_headers != HeaderStyle::Off {
                let quota = Quota {
                    rule,
                    limit: *limit,
                    remaining: *remaining,
                    reset_ns: *reset_ns,
                };
                for (name, value) in headers::quota_fields(self.config.response_headers, &quota) {
                    host::add_response_header(name, &value);
                }
            }
        }
        Action::Continue
    }
}
