//! The failure policies: how a rule decides when the agent could not be asked
//! or did not answer (`open`, `closed`, or the slot's fail-local bucket).

use meshlimit_core::rules::FailurePolicy;
use meshlimit_core::wire::DecisionSource;
use meshlimit_core::{Outcome, RuleVerdict, Take};

use super::{Evaluation, State};
use crate::config::FilterConfig;
use crate::host::Host;
use crate::slots;

impl Evaluation {
    /// The agent could not be asked or did not answer in time: every undecided
    /// rule takes its failure policy.
    pub fn fail_misses<H: Host>(&mut self, host: &H, cfg: &FilterConfig) {
        let now = host.now_ns();
        self.decided_at_ns = now;
        let misses: Vec<usize> = self.misses().collect();
        for i in misses {
            self.checks[i].state = self.failure_state(host, cfg, i, now);
            self.checks[i].source = DecisionSource::FailurePolicy;
        }
    }

    /// The state the rule of check `i` takes from its failure policy.
    pub(super) fn failure_state<H: Host>(
        &self,
        host: &H,
        cfg: &FilterConfig,
        i: usize,
        now: u64,
    ) -> State {
        let c = &self.checks[i];
        match self.rule(i).on_failure {
            FailurePolicy::Open => State::Decided {
                verdict: RuleVerdict::Allow {
                    remaining: 0,
                    reset_ns: 0,
                },
                failure: Some(Outcome::FailedOpen),
            },
            FailurePolicy::Closed => State::Decided {
                verdict: RuleVerdict::Unavailable,
                failure: Some(Outcome::FailedClosed),
            },
            FailurePolicy::Local => {
                let local = c.limit.scaled(cfg.local_share());
                let take = slots::update(host, now, c.fingerprint, cfg.slots, |s| {
                    s.fallback_take(&local, now, c.cost)
                })
                // No slot for this key (another key's fail-local bucket holds it,
                // or the write kept losing races): no state to count against, so
                // no grant; it may retry once one request's worth has refilled.
                .unwrap_or(Take::Denied {
                    retry_after_ns: local.max_wait_ns(1.0),
                });
                let verdict = match take {
                    Take::Granted {
                        remaining,
                        reset_ns,
                        ..
                    } => RuleVerdict::Allow {
                        remaining,
                        reset_ns,
                    },
                    Take::Denied { retry_after_ns } => RuleVerdict::Deny { retry_after_ns },
                };
                State::Decided {
                    verdict,
                    failure: Some(Outcome::FailedLocal),
                }
            }
        }
    }
}
