//! One simulated gateway (one Envoy): its own shared data, its own filter
//! configuration, the rules, and a client to its agent. Each request runs the
//! filter's request path (`meshlimit_filter::pipeline`): the local pass (denial
//! cache, lease bucket); on a miss one agent call whose answers are applied as
//! the filter applies them; on a failed call the failure policy, and the agent
//! is skipped for `agent_backoff_ms` as the filter's http context does.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use meshlimit_core::{Outcome, RequestInfo, RuleSet, Verdict};
use meshlimit_filter::config::FilterConfig;
use meshlimit_filter::host::Host;
use meshlimit_filter::pipeline::Evaluation;

use crate::arrivals::ArrivalGen;
use crate::client::AgentClient;
use crate::host::SimHost;
use crate::record::{Decision, Pending, Recorder};

/// The keys requests carry, in the scenario's key header.
pub struct Keys {
    header: String,
    names: Vec<String>,
}

/// One gateway.
pub struct Gateway {
    id: u16,
    host: SimHost,
    cfg: FilterConfig,
    rules: Rc<RuleSet>,
    keys: Rc<Keys>,
    client: AgentClient,
    rec: Rc<Recorder>,
    agent_down_until: Cell<u64>,
    inflight: Cell<usize>,
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
        host: SimHost,
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
            agent_down_until: Cell::new(0),
            inflight: Cell::new(0),
        }
    }

    /// Offers the planned arrivals at their times (open loop: a request waiting
    /// for the agent never delays the next arrival).
    pub async fn run(self: Rc<Self>, arrivals: ArrivalGen, start: tokio::time::Instant) {
        for a in arrivals {
            tokio::time::sleep_until(start + Duration::from_nanos(a.at_ns)).await;
            self.arrive(a.key);
        }
    }

    /// Agent calls still waiting for an answer.
    pub fn inflight(&self) -> usize {
        self.inflight.get()
    }

    /// One request for `key`, now.
    pub fn arrive(self: &Rc<Self>, key: u32) {
        let info = self.keys.request(key);
        let Ok(Some(mut eval)) = Evaluation::new(Rc::clone(&self.rules), &info, &self.cfg) else {
            self.rec.unmatched();
            return;
        };
        let pending = self.rec.arrive(key, self.id, self.host.now_ns());
        if !eval.local_pass(&self.host, &self.cfg) {
            return self.finish(pending, &eval, true);
        }
        if self.agent_down_until.get() > self.host.now_ns() {
            eval.fail_misses(&self.host, &self.cfg);
            return self.finish(pending, &eval, true);
        }
        self.inflight.set(self.inflight.get() + 1);
        let gw = Rc::clone(self);
        tokio::task::spawn_local(async move {
            gw.ask(pending, eval).await;
            gw.inflight.set(gw.inflight.get().saturating_sub(1));
        });
    }

    async fn ask(&self, pending: Pending, mut eval: Evaluation) {
        match self.client.lease(&eval.lease_request()).await {
            Ok(resp) => {
                self.rec.answers(&resp.items);
                eval.apply_answers(&self.host, &self.cfg, resp.items);
            }
            Err(why) => {
                self.rec.failed(why);
                let backoff = self.cfg.agent_backoff_ms.saturating_mul(1_000_000);
                self.agent_down_until
                    .set(self.host.now_ns().saturating_add(backoff));
                eval.fail_misses(&self.host, &self.cfg);
            }
        }
        self.finish(pending, &eval, false);
    }

    fn finish(&self, pending: Pending, eval: &Evaluation, local: bool) {
        let decision = decision_of(eval);
        self.rec
            .decide(pending, decision, local, self.host.now_ns());
    }
}

/// The request's fate as the client sees it, and whether a failure policy chose it.
fn decision_of(eval: &Evaluation) -> Decision {
    let by_failure = eval
        .results()
        .iter()
        .any(|r| matches!(r.failure, Some(Outcome::FailedOpen | Outcome::FailedLocal)));
    match (eval.verdict(), by_failure) {
        (Verdict::Allow { .. }, false) => Decision::Allowed,
        (Verdict::Allow { .. }, true) => Decision::FailAllowed,
        (Verdict::Deny { .. }, false) => Decision::Limited,
        (Verdict::Deny { .. }, true) => Decision::FailLimited,
        (Verdict::Unavailable { .. }, _) => Decision::Unavailable,
    }
}
