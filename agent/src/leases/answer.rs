//! One lease request, item by item: the first pass over the rules and the
//! pool, and the one store call for what is left. The store's results turned
//! into wire answers: `wire`.

use std::sync::Arc;
use tokio::sync::broadcast;
use tokio::time::Instant;

use meshlimit_core::policy;
use meshlimit_core::rules::{Accuracy, FailurePolicy, Rule};
use meshlimit_core::wire::{LeaseAnswer, LeaseItem, LeaseRequest};
use meshlimit_core::Limit;

use crate::fail_local::FailLocal;
use crate::pool::PoolTake;
use meshlimit_store::{Acquire, Acquired, StoreError};

use super::settle::Terms;
use super::{LeaseService, ROUNDS};

mod wire;

use wire::from_pool;

/// An item that goes to the store: its place in the answer and its rule's name.
pub(super) struct Pending<'a> {
    pub(super) index: usize,
    pub(super) rule: &'a str,
    /// Served through the node pool (not an exact rule).
    pub(super) pooled: bool,
    /// What the filter expects to spend in half a lease life.
    pub(super) want: Option<u32>,
    /// The lease size (a pooled key may take up to two).
    pub(super) lease: u32,
    /// The rule's failure policy, and the node's fail-local slice of its limit.
    pub(super) on_failure: FailurePolicy,
    pub(super) local_limit: Limit,
    /// This node's recent demand for the key (tokens per second, pooled keys).
    pub(super) demand: f64,
    /// How long until the rule's schedule may change the limit in force: a
    /// denial is held (at the node, by the filter) no longer.
    pub(super) until_change_ns: u64,
}

impl<'a> Pending<'a> {
    /// What this item's ask fixes for settling its answer in the pool.
    pub(super) fn terms(&self) -> Terms<'a> {
        Terms {
            rule: self.rule,
            lease: self.lease,
            until_change_ns: self.until_change_ns,
        }
    }
}

/// What the passes over one request fill: the answers found, the asks for
/// the store (`batch`, and `pending` in the same order) and the waits on
/// store calls in flight.
pub(super) struct Pass<'r> {
    pub(super) answers: Vec<Option<LeaseAnswer>>,
    pub(super) batch: Vec<Acquire>,
    pub(super) pending: Vec<Pending<'r>>,
    pub(super) waits: Vec<broadcast::Receiver<()>>,
}

impl Pass<'_> {
    /// Room for a request of `items` items, none answered yet.
    pub(super) fn new(items: usize) -> Self {
        Self {
            answers: vec![None; items],
            batch: Vec::with_capacity(items),
            pending: Vec::with_capacity(items),
            waits: Vec::new(),
        }
    }
}

/// One item in a pass, with its rule and the limit and share in force.
struct Ask<'a, 'r> {
    index: usize,
    item: &'a LeaseItem,
    rule: &'r Rule,
    limit: Limit,
    share: f64,
    /// Served through the node pool (not an exact rule).
    pooled: bool,
}

/// The round of a pass and its clocks.
struct Turn {
    round: usize,
    /// The service's clock (`LeaseService::now_ns`).
    now: u64,
    /// The wall clock (UTC), which the schedule windows follow, as the
    /// filter's do.
    utc_ns: u64,
    /// The deadline of a wait on another ask's store call, in nanoseconds.
    call_timeout: u64,
}

/// Where the pool leaves a pooled item.
enum PoolStep {
    /// Answered from the pool.
    Answered(LeaseAnswer),
    /// Waits on its key's store call in flight.
    Waiting(broadcast::Receiver<()>),
    /// Goes to the store, with this node's recent demand for the key and the
    /// asks that waited on the last call.
    Store { demand: f64, waited: u32 },
}

impl LeaseService {
    /// Answers the items at `indices` from the pool where it can; the rest go
    /// in the pass's `batch` for the store, or, when their key's store call
    /// is in flight and this is not the last `round`, in its `waits`.
    pub(super) fn first_pass<'r>(
        self: &Arc<Self>,
        req: &LeaseRequest,
        rules: Option<&'r meshlimit_core::RuleSet>,
        indices: &[usize],
        round: usize,
        pass: &mut Pass<'r>,
    ) {
        let turn = Turn {
            round,
            now: self.now_ns(),
            utc_ns: crate::regions::clock::now_ns(),
            call_timeout: u64::try_from(self.call_timeout().as_nanos()).unwrap_or(u64::MAX),
        };
        for &index in indices {
            let item = &req.items[index];
            let Some(rule) = rules.and_then(|set| set.rule(&item.rule)) else {
                let reason = if rules.is_some() {
                    "unknown_rule"
                } else {
                    "no_rules"
                };
                pass.answers[index] = Some(self.unavailable(reason));
                continue;
            };
            let limit = rule.limit_in_force(item.plan.as_deref(), turn.utc_ns).limit;
            let share = self.shares.share(rule, &item.key);
            let ask = Ask {
                index,
                item,
                rule,
                limit,
                share,
                pooled: rule.accuracy != Accuracy::Exact,
            };
            let (demand, waited) = if ask.pooled {
                match self.pool_step(&ask, &turn) {
                    PoolStep::Answered(answer) => {
                        pass.answers[index] = Some(answer);
                        continue;
                    }
                    PoolStep::Waiting(rx) => {
                        pass.waits.push(rx);
                        continue;
                    }
                    PoolStep::Store { demand, waited } => (demand, waited),
                }
            } else {
                (0.0, 0)
            };
            self.store_ask(&ask, &turn, demand, waited, pass);
        }
    }

    /// Takes a pooled item from the pool: round 0 takes (and counts the ask's
    /// demand); later rounds take again for asks that waited on a store call,
    /// and the last may not wait again.
    fn pool_step(self: &Arc<Self>, ask: &Ask<'_, '_>, turn: &Turn) -> PoolStep {
        let (item, rule, limit) = (ask.item, ask.rule, &ask.limit);
        let (now, timeout) = (turn.now, turn.call_timeout);
        let take = if turn.round == 0 {
            self.pools
                .take(&item.key, now, item.cost, item.want, timeout)
        } else {
            self.pools
                .retake(&item.key, now, item.cost, item.want, timeout)
        };
        match take {
            PoolTake::Served {
                tokens,
                remaining,
                reset_ns,
                refill,
                next_ask_ns,
            } => {
                let next_ask_ns = next_ask_ns.map(|n| n.min(rule.until_change_ns(turn.utc_ns)));
                let answer = from_pool(self.grant(
                    &rule.name,
                    limit.algorithm(),
                    tokens,
                    remaining,
                    reset_ns,
                    next_ask_ns,
                ));
                if refill {
                    self.refill(rule, limit, ask.share, &item.key);
                }
                PoolStep::Answered(answer)
            }
            PoolTake::Wait(rx) if turn.round + 1 < ROUNDS => PoolStep::Waiting(rx),
            // Still in flight after a wait: this ask goes to the store itself.
            PoolTake::Wait(_) => PoolStep::Store {
                demand: 0.0,
                waited: 0,
            },
            PoolTake::Denied { retry_after_ns } => {
                PoolStep::Answered(self.pool_denied(ask, turn, retry_after_ns))
            }
            PoolTake::Miss {
                demand_per_sec,
                dropped,
                waited,
            } => {
                if dropped > 0 {
                    self.metrics.tokens_dropped(&rule.name, dropped);
                }
                PoolStep::Store {
                    demand: demand_per_sec,
                    waited,
                }
            }
        }
    }

    /// The answer to an ask the pool turns away for `retry_after_ns`.
    fn pool_denied(&self, ask: &Ask<'_, '_>, turn: &Turn, retry_after_ns: u64) -> LeaseAnswer {
        let (key, rule) = (&ask.item.key, ask.rule);
        // A turned-away ask sent back later than the hold
        // (`Pools::fill_then_hold`) still asks again when the schedule
        // changes the limit.
        let retry_after_ns = retry_after_ns.min(rule.until_change_ns(turn.utc_ns));
        self.metrics.pool_denied();
        if let Some(checker) = &self.false_limits {
            checker.pool_denied(rule, key);
        }
        from_pool(self.deny(&rule.name, key, retry_after_ns))
    }

    /// Puts an item's ask in the pass's `batch` (and `pending`): the lease
    /// size, made to cover the asks that `waited` when pooled, and the most
    /// the store may grant.
    fn store_ask<'r>(
        &self,
        ask: &Ask<'_, 'r>,
        turn: &Turn,
        demand: f64,
        waited: u32,
        pass: &mut Pass<'r>,
    ) {
        let (item, rule, limit, share) = (ask.item, ask.rule, ask.limit, ask.share);
        let pooled = ask.pooled;
        let policy = &self.settings.policy;
        let enforced = limit.scaled(share.min(1.0));
        let far_over_of = policy::far_over_of(&enforced, demand, self.live_nodes());
        let mut lease = policy.lease_size(
            rule,
            &enforced,
            item.cost,
            demand,
            far_over_of,
            self.pools.intake(&item.key, turn.now),
        );
        if pooled {
            // Asks that waited on the last call and found it too small are
            // covered by this one.
            lease = policy::cover_waiting(lease, item.cost, waited, &enforced);
        }
        // A pooled key takes up to two leases, as much as this node will
        // spend before they expire (`LeasePolicy::store_max`), unless its
        // bucket is nearly empty (`may_prefetch`): then the filter's ask.
        let max = if pooled {
            let filter = item.want.unwrap_or(item.cost).max(item.cost);
            if self.may_prefetch(&item.key, &enforced, demand, lease) {
                policy.store_max(lease, filter, demand, policy.paced(far_over_of))
            } else {
                filter
            }
        } else {
            lease
        };
        pass.batch.push(Acquire {
            key: item.key.clone(),
            limit,
            min: item.cost,
            max,
            share,
        });
        pass.pending.push(Pending {
            index: ask.index,
            rule: &rule.name,
            pooled,
            want: item.want,
            lease,
            on_failure: rule.on_failure,
            local_limit: FailLocal::node_limit(&limit, share, self.live_nodes()),
            demand,
            until_change_ns: rule.until_change_ns(turn.utc_ns),
        });
    }

    /// One store call for the whole batch, always one result per item.
    pub(super) async fn call_store(&self, batch: &[Acquire]) -> Vec<Acquired> {
        if batch.is_empty() {
            return Vec::new();
        }
        let Ok(_permit) = self.inflight.try_acquire() else {
            return vec![Err(StoreError::Shed); batch.len()];
        };
        let started = Instant::now();
        let mut results = self.store.acquire(batch).await;
        self.metrics.store_call(batch.len(), started.elapsed());
        if results.len() != batch.len() {
            // A store bug must not shift answers onto the wrong items.
            let e = StoreError::Failed(format!(
                "{} answers for {} items",
                results.len(),
                batch.len()
            ));
            tracing::error!("{e}");
            results = vec![Err(e); batch.len()];
        }
        results
    }
}
