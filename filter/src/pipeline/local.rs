//! The local pass: what the key's slot decides without the agent (the
//! denial cache, the lease, a denial that just ended, a cold start), and the
//! step a request runs around it while the agent may be backed off.

use std::cell::OnceCell;

use meshlimit_core::policy::worker_slice;
use meshlimit_core::rules::{Accuracy, ColdStart, Mode, Rule, Scope};
use meshlimit_core::slot::{LocalCheck, SlotState, MAX_LEASE_TTL_NS};
use meshlimit_core::wire::DecisionSource;
use meshlimit_core::{Limit, RuleVerdict};

use super::{decided, Evaluation, State};
use crate::allowance::Allowance;
use crate::config::FilterConfig;
use crate::host::Host;
use crate::slices::{Slice, Slices};
use crate::{backoff, slots};

/// How the local pass marks a miss's call in flight in the slot write of the
/// miss itself, where the VM's lease calls ([`crate::flights`]) will make
/// the call: a new key's request then reads and writes its slot once before
/// its call, not twice. `busy`: whether they already have an item for a key
/// (its miss waits for it, and marks nothing); `backed_off`: whether misses
/// skip the agent (the back-off's one read, kept for the rest of the step).
/// Only the last rule's miss is marked in its write: a rule after it could
/// reject the request, and then no call is made for the miss.
pub struct CallMark<'a> {
    pub busy: &'a dyn Fn(u64) -> bool,
    pub backed_off: &'a dyn Fn() -> bool,
}

/// What a request's local pass ([`Evaluation::local_step`]) left to do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalStep {
    /// Some rule waits for the agent.
    pub ask: bool,
    /// The agent was backed off: every rule is decided and nothing is to be
    /// sent.
    pub backed_off: bool,
}

impl Evaluation {
    /// Decides, in order, the rules this worker's slices hold tokens for
    /// ([`crate::slices`]), with no host call, and stops at the first they
    /// cannot: the local pass decides the rest, as if these had taken from
    /// the shared lease. A rule of `accuracy: exact` (every request checked
    /// at the store) never has a slice. Lets the local pass take slices
    /// ([`Evaluation::keep_slices`] keeps them). True when every rule was
    /// decided.
    pub fn slice_pass(&mut self, slices: &mut Slices) -> bool {
        self.slicing = true;
        let now = self.decided_at_ns;
        for c in &mut self.checks {
            if self.rules.rules()[c.rule].accuracy == Accuracy::Exact {
                return false;
            }
            let Some(spent) = slices.take(c.fingerprint, now, c.cost) else {
                return false;
            };
            c.source = DecisionSource::FilterLease;
            c.state = decided(RuleVerdict::Allow {
                remaining: spent.remaining,
                reset_ns: spent.reset_ns,
            });
        }
        true
    }

    /// Hands the slices the local pass took to the worker's `slices`.
    pub fn keep_slices(&mut self, slices: &mut Slices) {
        for c in &mut self.checks {
            if let Some(slice) = c.slice.take() {
                slices.keep(slice);
            }
        }
    }

    /// Decides what local state can: the denial cache, then the lease. Stops at
    /// the first enforcing denial, so no further tokens are spent on a request that
    /// is rejected anyway. Returns true when the agent must be asked.
    /// Reads the clock first (a request runs the pass in
    /// [`Evaluation::local_step`], on the clock its headers were read with).
    pub fn local_pass<H: Host>(&mut self, host: &H, cfg: &FilterConfig) -> bool {
        self.decided_at_ns = host.now_ns();
        self.local_pass_with(host, cfg, None, None)
    }

    /// [`Evaluation::local_pass`], where a rule with `cold_start: admit` may
    /// admit a key this Envoy knows nothing of from the worker's `cold`
    /// allowance (`None`: no cold starts, as while the agent is backed off).
    /// The key's call is queued as a refill that pays for the request. On
    /// the evaluation's clock (`decided_at_ns`, the request's own read).
    /// With `mark`, the last rule's miss marks its call in flight in the
    /// same write ([`CallMark`]).
    pub fn local_pass_with<H: Host>(
        &mut self,
        host: &H,
        cfg: &FilterConfig,
        mut cold: Option<&mut Allowance>,
        mark: Option<&CallMark<'_>>,
    ) -> bool {
        let last = self.checks.len().saturating_sub(1);
        let now = self.decided_at_ns;
        let mut rejected = false;
        for i in 0..self.checks.len() {
            // Decided from this worker's slice (`slice_pass`).
            if matches!(self.checks[i].state, State::Decided { .. }) {
                continue;
            }
            let enforcing = self.rule(i).mode == Mode::Enforce;
            let max_wait_ns = max_wait_ns(self.rule(i), &self.checks[i].limit, now);
            let c = &mut self.checks[i];
            if rejected {
                c.state = State::Skipped;
                continue;
            }
            let rule = &self.rules.rules()[c.rule];
            let exact = rule.accuracy == Accuracy::Exact;
            let call_timeout = crate::config::nanos(cfg.timeout);
            let refill_timeout = (!exact).then_some(call_timeout);
            let may_start_cold = !exact
                && rule.cold_start == ColdStart::Admit
                && cold
                    .as_deref()
                    .is_some_and(|b| b.available(cfg.cold_starts_per_second, now));
            // No hold after a denial across a schedule edge: the limit that
            // denied may be gone (any call takes less than HOLD_EDGE_NS).
            let hold = rule.until_change_ns(now.saturating_sub(HOLD_EDGE_NS)) > HOLD_EDGE_NS;
            let mut want = None;
            let mut started_cold = false;
            let slicing = self.slicing && !exact;
            let mut slice = None;
            let mark = mark.filter(|m| i == last && (exact || !(m.busy)(c.fingerprint)));
            let mut marked = false;
            let local = slots::update(host, now, c.fingerprint, cfg.slots, |s| {
                let take = match slicing {
                    true => worker_slice(
                        &c.limit,
                        c.cost,
                        s.lease.demand_per_sec(now),
                        s.lease.usable(now),
                    ),
                    false => c.cost,
                };
                let check = s.check(now, take, max_wait_ns, refill_timeout, hold);
                slice = taken_slice(s, &check, c.fingerprint, take - c.cost, now);
                started_cold = may_start_cold
                    && check == (LocalCheck::Miss { in_flight: false })
                    && s.cold_start(now, call_timeout);
                // Only a call (a miss, a refill) carries what to ask for.
                if matches!(
                    check,
                    LocalCheck::Miss { .. }
                        | LocalCheck::Taken { refill: true, .. }
                        | LocalCheck::Held { refill: true, .. }
                ) {
                    want = s.lease.next_ask(c.cost);
                }
                // The call this miss makes, marked as `Flights` would mark it.
                marked = matches!(check, LocalCheck::Miss { .. })
                    && !started_cold
                    && mark.is_some_and(|m| !(m.backed_off)())
                    && s.begin_call(now, call_timeout);
                check
            });
            c.want = want;
            c.slice = slice;
            c.marked = marked && local.is_some();
            if started_cold && local.is_some() {
                if let Some(b) = cold.as_deref_mut() {
                    b.take(cfg.cold_starts_per_second, now);
                }
                self.refills.push(c.item(&self.rules, c.cost, c.cost));
                c.source = DecisionSource::ColdStart;
                // What is left is the agent's to say: the response shows no
                // quota for the rule (`RuleResult::quota_unknown`).
                c.state = decided(RuleVerdict::Allow {
                    remaining: 0,
                    reset_ns: 0,
                });
                continue;
            }
            let local = local.unwrap_or(LocalCheck::Miss { in_flight: false });
            // A refill ahead, or the call behind a denial that just ended:
            // out with the VM's next batch, and nobody waits on it.
            if let LocalCheck::Taken { refill: true, .. } | LocalCheck::Held { refill: true, .. } =
                local
            {
                self.refills.push(c.item(&self.rules, 1, 0));
            }
            c.state = match local {
                LocalCheck::Denied { retry_after_ns } | LocalCheck::Held { retry_after_ns, .. } => {
                    c.source = DecisionSource::DenialCache;
                    decided(RuleVerdict::Deny { retry_after_ns })
                }
                LocalCheck::Taken {
                    remaining,
                    reset_ns,
                    ..
                } => {
                    c.source = DecisionSource::FilterLease;
                    // The slice's tokens are this node's still: reported as left.
                    let sliced = c.slice.map_or(0, |s| s.tokens);
                    decided(RuleVerdict::Allow {
                        remaining: remaining.saturating_add(sliced),
                        reset_ns,
                    })
                }
                LocalCheck::Miss { .. } => State::Miss,
            };
            rejected = enforcing
                && matches!(
                    c.state,
                    State::Decided {
                        verdict: RuleVerdict::Deny { .. },
                        ..
                    }
                );
        }
        if rejected {
            for c in &mut self.checks {
                if c.state == State::Miss {
                    c.state = State::Skipped;
                }
            }
        }
        self.checks.iter().any(|c| c.state == State::Miss)
    }

    /// The local pass as a request runs it, in the filter and in the
    /// simulator's gateways alike: with the agent backed off
    /// ([`backoff::backing_off`]) no key starts cold, the refills the pass
    /// started are dropped (each slot's call marked failed) and every miss
    /// takes its failure policy, so nothing is left to send. `cold` is the
    /// worker's allowance where the host can batch calls (`None`: none);
    /// `busy` there says which keys the VM's lease calls already have an
    /// item for, and the last rule's miss marks its call in its own write
    /// ([`CallMark`]).
    ///
    /// The back-off is a shared-data read, made only when it matters: before
    /// the pass when some rule may start its key cold, else after it when the
    /// pass left a miss or a refill. A request its lease decides alone, the
    /// hot key's common case, never reads it.
    pub fn local_step<H: Host>(
        &mut self,
        host: &H,
        cfg: &FilterConfig,
        cold: Option<&mut Allowance>,
        busy: Option<&dyn Fn(u64) -> bool>,
    ) -> LocalStep {
        // The request's own clock read (`RequestInfo::now_ns`): one a request.
        let now = self.decided_at_ns;
        // Read once, when first needed, and kept for the rest of the step.
        let read = OnceCell::new();
        let backed_off = || *read.get_or_init(|| backoff::backing_off(host, now));
        let may_start_cold = cold.is_some() && self.may_start_cold();
        let mut backed_off_now = may_start_cold && backed_off();
        let cold = cold.filter(|_| may_start_cold && !backed_off_now);
        let mark = busy.map(|busy| CallMark {
            busy,
            backed_off: &backed_off,
        });
        let ask = self.local_pass_with(host, cfg, cold, mark.as_ref());
        if !may_start_cold && (ask || !self.refills.is_empty()) {
            backed_off_now = backed_off();
        }
        if !backed_off_now {
            return LocalStep {
                ask,
                backed_off: false,
            };
        }
        for item in self.take_refills() {
            slots::update(host, now, item.fingerprint, cfg.slots, |s| s.call_failed());
        }
        if ask {
            self.fail_misses(host, cfg);
        }
        LocalStep {
            ask: false,
            backed_off: true,
        }
    }

    /// Whether some rule of this request may admit its key cold
    /// (`cold_start: admit` on a rule that is not exact).
    fn may_start_cold(&self) -> bool {
        (0..self.checks.len()).any(|i| {
            let rule = self.rule(i);
            rule.cold_start == ColdStart::Admit && rule.accuracy != Accuracy::Exact
        })
    }
}

/// The slice a take of one request's cost and `extra` tokens more left this
/// worker, when `check` took them from the lease in `s` (`None` without
/// extra tokens): they expire with the lease.
fn taken_slice(
    s: &SlotState,
    check: &LocalCheck,
    fingerprint: u64,
    extra: u32,
    now: u64,
) -> Option<Slice> {
    let taken = matches!(check, LocalCheck::Taken { .. });
    (taken && extra > 0).then(|| Slice {
        fingerprint,
        tokens: extra,
        expires_ns: s.lease.expires_ns.min(now.saturating_add(MAX_LEASE_TTL_NS)),
        base_remaining: s.store_remaining.saturating_add(s.lease.tokens),
        reset_at_ns: s.store_reset_at_ns,
    })
}

/// A key is not held at a denial that ended ([`LocalCheck::Held`]) when its
/// rule's limit changed this recently: as long as a slot keeps a call marked
/// in flight at most ([`MAX_LEASE_TTL_NS`]), so the denial and the call
/// behind it fall within it.
const HOLD_EDGE_NS: u64 = MAX_LEASE_TTL_NS;

/// The longest the rule can make a request wait: a cached denial is never kept
/// longer, whatever the clock does. A global rule's region may hold as little as
/// its floor share (`DEFAULT_REGION_FLOOR`, 10%), which stretches its waits
/// tenfold. Nor is a denial kept past the rule's next schedule edge, where its
/// limit may change.
fn max_wait_ns(rule: &Rule, limit: &Limit, now_ns: u64) -> u64 {
    let min_share = match rule.scope {
        Scope::Global => meshlimit_core::policy::DEFAULT_REGION_FLOOR,
        Scope::Region => 1.0,
    };
    limit
        .max_wait_ns(min_share)
        .min(rule.until_change_ns(now_ns))
}
