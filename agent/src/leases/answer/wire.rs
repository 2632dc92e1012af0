//! The wire answers: a store result turned into the filter's answer (a
//! pooled key's grant split with the pool and its denial held at the node,
//! an error answered by the rule's failure policy), and the grants, denials
//! and `unavailable` answers the passes give too.

use std::sync::Arc;

use meshlimit_core::rules::FailurePolicy;
use meshlimit_core::wire::{AnsweredFrom, LeaseAnswer};
use meshlimit_core::{Algorithm, DescriptorKey, Take, NANOS_PER_MS};

use crate::pool::StoreGrant;
use meshlimit_store::{Acquire, Acquired, StoreError};

use super::super::LeaseService;
use super::Pending;

impl LeaseService {
    /// Turns a store result into the filter's answer; a pooled key's grant is
    /// split with the pool, and its denial is cached at the node (see
    /// `settle_pooled` for how long).
    pub(in crate::leases) fn answer(
        self: &Arc<Self>,
        p: &Pending<'_>,
        acquire: &Acquire,
        now: u64,
        result: Acquired,
    ) -> LeaseAnswer {
        let take = match result {
            Ok(take) => take,
            Err(e) => return self.answer_failed(p, acquire, now, e),
        };
        self.metrics.store_results("ok", 1);
        self.fail_local.forget(&acquire.key);
        match take {
            Take::Granted {
                tokens,
                remaining,
                reset_ns,
            } => {
                let grant = StoreGrant::under(acquire.limit, tokens, remaining, reset_ns);
                self.answer_granted(p, acquire, now, grant)
            }
            Take::Denied { retry_after_ns } => self.answer_denied(p, acquire, now, retry_after_ns),
        }
    }

    /// The store granted the item: all of it to the filter for an exact
    /// rule; for a pooled key, what the filter takes, the rest pooled.
    fn answer_granted(
        self: &Arc<Self>,
        p: &Pending<'_>,
        acquire: &Acquire,
        now: u64,
        grant: StoreGrant,
    ) -> LeaseAnswer {
        let StoreGrant {
            tokens,
            remaining,
            reset_ns,
            ..
        } = grant;
        let algorithm = acquire.limit.algorithm();
        if !p.pooled {
            return self.grant(p.rule, algorithm, tokens, remaining, reset_ns, None);
        }
        let take = Take::Granted {
            tokens,
            remaining,
            reset_ns,
        };
        let ask = (acquire.min, p.want);
        let (settled, next_ask_ns) = self.settle_pooled(&p.terms(), acquire, now, take, ask);
        let filter = match settled {
            Take::Granted { tokens, .. } => tokens,
            Take::Denied { .. } => 0,
        };
        let remaining = remaining.saturating_add(tokens - filter);
        self.grant(p.rule, algorithm, filter, remaining, reset_ns, next_ask_ns)
    }

    /// The store denied the item for `retry_after_ns` (no longer than the
    /// rule's next schedule edge); a pooled key's denial is held at the node.
    fn answer_denied(
        self: &Arc<Self>,
        p: &Pending<'_>,
        acquire: &Acquire,
        now: u64,
        retry_after_ns: u64,
    ) -> LeaseAnswer {
        let retry_after_ns = retry_after_ns.min(p.until_change_ns);
        if !p.pooled {
            return self.deny(p.rule, &acquire.key, retry_after_ns);
        }
        let take = Take::Denied { retry_after_ns };
        let wait = match self.settle_unasked(&p.terms(), acquire, now, take) {
            Take::Denied { retry_after_ns } => retry_after_ns,
            Take::Granted { .. } => retry_after_ns,
        };
        self.deny(p.rule, &acquire.key, wait)
    }

    /// The store call failed for the item: `unavailable` (the filter applies
    /// the rule's failure policy), or under `fail_local` the node's answer.
    fn answer_failed(
        &self,
        p: &Pending<'_>,
        acquire: &Acquire,
        now: u64,
        e: StoreError,
    ) -> LeaseAnswer {
        self.metrics.store_results(e.metric_result(), 1);
        if p.pooled {
            self.pools.call_failed(&acquire.key, now);
        }
        if !matches!(e, StoreError::Shed) && self.should_log(now) {
            tracing::warn!(
                rule = p.rule,
                "lease unavailable (logged once a second at most): {e}"
            );
        }
        if p.on_failure != FailurePolicy::Local {
            return self.unavailable(e.reason());
        }
        self.metrics.lease_unavailable(e.reason());
        self.fail_local_answer(p, acquire, now)
    }

    /// The node's fail-local ceiling, held here once for every filter of the
    /// node (the filters' own buckets take over only when the agent itself is
    /// unreachable).
    fn fail_local_answer(&self, p: &Pending<'_>, acquire: &Acquire, now: u64) -> LeaseAnswer {
        match self
            .fail_local
            .take(&acquire.key, &p.local_limit, now, acquire.min, p.demand)
        {
            Take::Granted { .. } => LeaseAnswer::Grant {
                tokens: acquire.min,
                ttl_ms: 0,
                remaining: 0,
                reset_ms: 0,
                local: true,
                from: None,
                next_ask_ms: None,
            },
            Take::Denied { retry_after_ns } => LeaseAnswer::Deny {
                retry_after_ms: retry_after_ns.div_ceil(NANOS_PER_MS),
                local: true,
                from: None,
            },
        }
    }

    /// A grant of `tokens` to a filter, good for the lease's life (a fixed
    /// window's only to its window's end, `reset_ns`: see
    /// [`LeasePolicy::lease_life_ns`](meshlimit_core::policy::LeasePolicy::lease_life_ns)).
    pub(in crate::leases) fn grant(
        &self,
        rule: &str,
        algorithm: Algorithm,
        tokens: u32,
        remaining: u32,
        reset_ns: u64,
        next_ask_ns: Option<u64>,
    ) -> LeaseAnswer {
        self.metrics.lease_granted(rule, tokens);
        LeaseAnswer::Grant {
            tokens,
            // At least a millisecond: the requests waiting on the grant take
            // their cost from it when the filter has written it down.
            ttl_ms: self
                .settings
                .policy
                .lease_life_ns(algorithm, reset_ns)
                .div_ceil(NANOS_PER_MS)
                .max(1),
            remaining,
            reset_ms: reset_ns.div_ceil(NANOS_PER_MS),
            local: false,
            from: Some(AnsweredFrom::Store),
            next_ask_ms: next_ask_ns.map(|n| n.div_ceil(NANOS_PER_MS)),
        }
    }

    pub(in crate::leases) fn deny(
        &self,
        rule: &str,
        key: &DescriptorKey,
        retry_after_ns: u64,
    ) -> LeaseAnswer {
        self.metrics.lease_denied(rule, key);
        LeaseAnswer::Deny {
            retry_after_ms: retry_after_ns.div_ceil(NANOS_PER_MS),
            local: false,
            from: Some(AnsweredFrom::Store),
        }
    }

    /// An item answered `unavailable` for `reason` (a fixed word; the API's
    /// refusals of single items too), counted by it.
    pub(crate) fn unavailable(&self, reason: &str) -> LeaseAnswer {
        self.metrics.lease_unavailable(reason);
        LeaseAnswer::Unavailable {
            reason: reason.to_string(),
        }
    }
}

/// The same answer, found in the node pool rather than by a store call.
pub(super) fn from_pool(answer: LeaseAnswer) -> LeaseAnswer {
    match answer {
        LeaseAnswer::Grant {
            tokens,
            ttl_ms,
            remaining,
            reset_ms,
            local,
            next_ask_ms,
            ..
        } => LeaseAnswer::Grant {
            tokens,
            ttl_ms,
            remaining,
            reset_ms,
            local,
            from: Some(AnsweredFrom::Pool),
            next_ask_ms,
        },
        LeaseAnswer::Deny {
            retry_after_ms,
            local,
            ..
        } => LeaseAnswer::Deny {
            retry_after_ms,
            local,
            from: Some(AnsweredFrom::Pool),
        },
        other => other,
    }
}
