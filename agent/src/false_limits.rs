//! The false-limit rate, an SLI: the share of a rule's 429s given to keys that
//! were under their limit.
//!
//! **Definition.** A 429 of rule R to key K is *false* when the region's bucket
//! for (R, K) in the store held at least the request's cost (the rule's `cost`)
//! at the moment of the rejection, and had not been drained (left with less
//! than a tenth of the burst, or the cost: the largest lease of a node near
//! its share) within one
//! period of the rule before it. The second half is what
//! "under its limit over the rule's window" adds to "a token was there": a
//! node's hold after a drained grant turns a key away while the store's
//! bucket refills a lease's worth, and a key far over its limit is held so
//! every time; those 429s are the limit working, not false ones. Only the
//! bucket's last update is known, so a drain before it is not seen.
//!
//! A 429 the store itself gave (`source: store`: the lease script said no) is
//! true by construction and counted as checked at once. The suspects are the
//! 429s made from what the node held instead of the store: the node pool's
//! hold (`agent_pool`), a filter's cached denial (`denial_cache`), a filter's
//! leased tokens (`filter_lease`) and an agent that did not say (`agent`). The
//! agent checks them against the store with a read-only peek (one call, the
//! store's deadline, never retried; the peek script in `store/redis/script.rs`,
//! the memory store's own read).
//!
//! **When.** The node pool's denials are the agent's own: each is offered for
//! a check the moment it is made, with its exact time (a filter's record of it
//! is not offered again). A filter's own 429s reach the agent in its decision
//! records, on its tick (up to `sync_interval_ms` late, a second by default).
//! The sooner the check, the likelier the bucket is untouched since and the
//! judgement exact.
//!
//! **Sampling.** At most `--false-limit-checks` ([`CHECKS_PER_SECOND`] by
//! default) suspects a second per node are checked, taken uniformly at random
//! (`Sampler`: each with probability budget ÷ the node's suspects a second),
//! never by arrival order; the rest are skipped and counted
//! (`meshlimit_false_limit_checks_skipped_total{reason="budget"}`). Each check
//! weighs for itself and the suspects of its rule skipped for the budget since
//! the previous one, store 429s weigh 1: the weighed ratio
//! (`meshlimit_false_limit_ratio`, and the summable
//! `meshlimit_false_limit_weighed_false_total ÷ meshlimit_false_limit_weighed_total`)
//! estimates the share of all the rule's 429s, with the sampling error of a
//! ratio over the checks (about ±2·√(r(1−r)/checks)). Rejections by a failure
//! policy (`failure_policy`, `agent_local`) are the store's outage, not a
//! limit: the fail-open ratio and store metrics cover them.
//!
//! **The delay between the rejection and the check**, `d`, is measured on the
//! agent's clock after the peek answers (the filter that decided runs on the
//! same node, on the same clock), so it is never shorter than the true delay
//! to the store's reading. The rejection is placed at the store's clock minus
//! `d`, and the bucket there is:
//!
//! - exact when nothing touched the bucket since (its last update is before
//!   the rejection): its tokens refilled up to that moment;
//! - otherwise a lower bound: its tokens at the last update less what the rule
//!   refills from the rejection to that update (spending since only removed
//!   tokens), and a bucket the store does not hold (a full one) less what the
//!   rule refills over `d`.
//!
//! **Direction.** Every correction goes the same way: the SLI counts a 429 as
//! false only when the store's bucket proves it, so it never reports more
//! false limits than its definition finds (up to the sampling error). That
//! definition sees one update of the bucket: for a key far over its limit
//! shared by many nodes, a drain before that update is missed, so on a large
//! fleet the SLI can read above what the accuracy judge finds wrongly limited
//! (docs/guide/false-limits.md). What it cannot see: tokens the store had already handed out in
//! leases and pools but nobody spent yet. A grant that drains the store's
//! bucket for a key under its limit strands its tokens at the nodes; the
//! store looks drained, and the 429s that follow (another node's hold, a
//! filter's cached denial) count as true, though an ideal bucket fed the same
//! requests would have admitted them. In the simulator that difference is all
//! of the gap between the SLI and the judge's "wrongly limited"
//! (docs/guide/false-limits.md). Also a bucket spent again between the rejection and a late
//! check proves nothing.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use meshlimit_core::rules::{Limits, Rule, Scope};
use meshlimit_core::wire::{DecisionRecord, DecisionSource};
use meshlimit_core::{DescriptorKey, Limit, Outcome, NANOS_PER_MS};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub mod metrics;

use crate::rules_watch::CurrentRules;
use meshlimit_core::secret::KeyIds;
use meshlimit_store::{Buckets, Stored};
pub use metrics::FalseLimitMetrics;
use metrics::Skipped;

/// Suspect 429s checked against the store per second per node, at most, by
/// default (`--false-limit-checks`).
pub const CHECKS_PER_SECOND: u32 = 10;
/// Suspects waiting for a check, at most; past it they are skipped.
pub const QUEUE: usize = 1_024;
/// A suspect older than this when its turn comes is skipped: the refill over
/// so long a delay leaves the lower bound with nothing to prove.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// Float rounding margin, as the bucket's own take uses.
const EPSILON: f64 = 1e-9;

/// A suspect 429 waiting for its check.
#[derive(Debug, Clone)]
struct Suspect {
    rule: String,
    key_id: String,
    /// When the 429 was decided, ns since the Unix epoch.
    at_ns: u64,
}

/// The node's false-limit checker: takes the filters' decision records and
/// the node pool's denials, and feeds the SLI's metrics.
pub struct FalseLimits {
    rules: Arc<CurrentRules>,
    metrics: Arc<FalseLimitMetrics>,
    /// How suspects name their keys (the deployment's keyed hash).
    key_ids: KeyIds,
    /// `None` outside a tokio runtime (nothing can check): suspects are skipped.
    tx: Option<mpsc::Sender<Suspect>>,
    sampler: Mutex<Sampler>,
    /// Checks a second, at most.
    budget: AtomicU32,
}

impl FalseLimits {
    /// Starts the checker task on the current tokio runtime (none: suspects
    /// are skipped and counted). It ends when the checker is dropped.
    pub fn start(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Buckets>,
        metrics: Arc<FalseLimitMetrics>,
        key_ids: KeyIds,
    ) -> Arc<FalseLimits> {
        let tx = tokio::runtime::Handle::try_current().ok().map(|rt| {
            let (tx, rx) = mpsc::channel(QUEUE);
            let ids = key_ids.clone();
            rt.spawn(run(rx, rules.clone(), store, metrics.clone(), ids));
            tx
        });
        Arc::new(FalseLimits {
            rules,
            metrics,
            key_ids,
            tx,
            sampler: Mutex::new(Sampler::new(Instant::now(), unix_ns())),
            budget: AtomicU32::new(CHECKS_PER_SECOND),
        })
    }

    /// The SLI's metrics.
    pub fn metrics(&self) -> &FalseLimitMetrics {
        &self.metrics
    }

    /// Checks at most `per_second` suspects a second (0: none).
    pub fn set_budget(&self, per_second: u32) {
        self.budget.store(per_second, Ordering::Relaxed);
    }

    /// Takes a filter's records: each 429 counted as checked (the store's) or
    /// offered for a check (a suspect). A 429 from the node pool
    /// (`agent_pool`) was offered by the agent when it answered
    /// ([`FalseLimits::pool_denied`]), so its record is not offered again.
    pub(crate) fn observe(&self, records: &[DecisionRecord]) {
        let Some(set) = self.rules.get() else {
            return;
        };
        for r in records.iter().filter(|r| r.decision == Outcome::Limited) {
            let Some(rule) = set.rule(&r.rule) else {
                continue;
            };
            match r.source {
                DecisionSource::Store => self.metrics.false_limit_checked(&rule.name, false),
                DecisionSource::DenialCache
                | DecisionSource::FilterLease
                | DecisionSource::Agent => {
                    let at_ns = r.at_ms.saturating_mul(NANOS_PER_MS);
                    self.offer(rule, at_ns, || r.key_id.clone());
                }
                // A cold start only ever admits.
                DecisionSource::AgentPool
                | DecisionSource::AgentLocal
                | DecisionSource::FailurePolicy
                | DecisionSource::ColdStart => {}
            }
        }
    }

    /// The node pool denied `key` of `rule` just now: a suspect, offered for a
    /// check at once with its exact moment (no wait for the filter's record).
    /// The key id is formed only for a suspect the sampler takes.
    pub(crate) fn pool_denied(&self, rule: &Rule, key: &DescriptorKey) {
        let at_ns = unix_ns();
        self.offer(rule, at_ns, || self.key_ids.id(key).to_string());
    }

    /// One suspect: skipped when its rule cannot be checked, else taken by the
    /// sampler and queued, or skipped for the budget (its weight carried by
    /// the rule's next check).
    fn offer(&self, rule: &Rule, at_ns: u64, key_id: impl FnOnce() -> String) {
        if let Err(why) = checkable(rule) {
            return self.metrics.false_limit_skipped(&rule.name, why);
        }
        let taken = match self.sampler.lock() {
            Ok(mut s) => s.take(Instant::now(), self.budget.load(Ordering::Relaxed)),
            Err(_) => false,
        };
        if !taken {
            return self
                .metrics
                .false_limit_skipped(&rule.name, Skipped::Budget);
        }
        let suspect = Suspect {
            rule: rule.name.clone(),
            key_id: key_id(),
            at_ns,
        };
        let queued = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.try_send(suspect).is_ok());
        if !queued {
            self.metrics.false_limit_skipped(&rule.name, Skipped::Queue);
        }
    }
}

/// Whether the check can judge a 429 of `rule` at all.
fn checkable(rule: &Rule) -> Result<(), Skipped> {
    if rule.scope == Scope::Global {
        return Err(Skipped::GlobalRule);
    }
    if rule.limits.strictest().algorithm().is_window() {
        return Err(Skipped::WindowRule);
    }
    Ok(())
}

/// Picks the suspects to check, uniformly: each is taken with probability
/// `budget ÷ n`, where `n` is the node's suspects in the last
/// second or in this one so far, whichever is more, and never more than
/// the budget in a second. Whether a suspect is taken does not
/// depend on whether it was false, so the checked ones are a random sample of
/// all of them; each check weighs for the suspects of its rule skipped since
/// the previous one (`FalseLimitMetrics::false_limit_checked`), and the weighted ratio
/// estimates the share of all the rule's 429s without bias from the sampling.
/// (Only the cap can bend it: when suspects surge past last second's count,
/// the cap may be reached early in the second and the rest of it is weighed
/// by the next second's first check.)
#[derive(Debug)]
struct Sampler {
    second: Instant,
    /// Suspects offered this second, and in the last one.
    this: u32,
    last: u32,
    /// Suspects taken this second.
    taken: u32,
    /// SplitMix64's state.
    rng: u64,
}

impl Sampler {
    fn new(now: Instant, seed: u64) -> Sampler {
        Sampler {
            second: now,
            this: 0,
            last: 0,
            taken: 0,
            rng: seed | 1,
        }
    }

    /// Whether to check the suspect offered at `now`.
    fn take(&mut self, now: Instant, budget: u32) -> bool {
        let gone = now.saturating_duration_since(self.second);
        if gone >= Duration::from_secs(1) {
            self.last = if gone < Duration::from_secs(2) {
                self.this
            } else {
                0
            };
            self.this = 0;
            self.taken = 0;
            self.second = now;
        }
        self.this = self.this.saturating_add(1);
        let p = f64::from(budget) / f64::from(self.last.max(self.this));
        if self.taken >= budget || self.uniform() >= p {
            return false;
        }
        self.taken += 1;
        true
    }

    /// A uniform draw in [0, 1).
    fn uniform(&mut self) -> f64 {
        meshlimit_core::fingerprint::uniform(&mut self.rng)
    }
}

/// Checks the queued suspects as they come (the sampler keeps them within
/// the budget).
async fn run(
    mut rx: mpsc::Receiver<Suspect>,
    rules: Arc<CurrentRules>,
    store: Arc<dyn Buckets>,
    metrics: Arc<FalseLimitMetrics>,
    key_ids: KeyIds,
) {
    while let Some(s) = rx.recv().await {
        match check(&s, &rules, store.as_ref(), &key_ids).await {
            Ok(is_false) => metrics.false_limit_checked(&s.rule, is_false),
            Err(why) => metrics.false_limit_skipped(&s.rule, why),
        }
    }
}

/// Peeks the suspect's bucket and judges it.
async fn check(
    s: &Suspect,
    rules: &CurrentRules,
    store: &dyn Buckets,
    key_ids: &KeyIds,
) -> Result<bool, Skipped> {
    let set = rules.get().ok_or(Skipped::UnknownRule)?;
    let rule = set.rule(&s.rule).ok_or(Skipped::UnknownRule)?;
    checkable(rule)?;
    if delay_ns(s.at_ns) > MAX_DELAY.as_nanos() as u64 {
        return Err(Skipped::Stale);
    }
    let limits = limits_of(rule, s.at_ns);
    let Some(first) = limits.first() else {
        return Err(Skipped::UnknownRule);
    };
    let peeked = store
        .peek(key_ids, &rule.name, &s.key_id, first)
        .await
        .map_err(|_| Skipped::StoreError)?;
    // Measured after the answer: never shorter than the true delay.
    let delay = delay_ns(s.at_ns);
    let stored = match peeked {
        None => None,
        Some(p) => Some(p.stored.ok_or(Skipped::WindowRule)?),
    };
    Ok(is_false(stored.as_ref(), &limits, rule.cost.get(), delay))
}

/// The limits a key of `rule` may be under at `at_ns`: the rule's in force
/// then (its schedule's window, if one covers it), or every plan's (the key id
/// does not say which plan; a 429 is false only under all of them).
fn limits_of(rule: &Rule, at_ns: u64) -> Vec<Limit> {
    match &rule.limits {
        Limits::Single(_) => vec![rule.limit_in_force(None, at_ns).limit],
        Limits::Plans {
            default, limits, ..
        } => std::iter::once(*default)
            .chain(limits.values().copied())
            .collect(),
    }
}

/// Now, ns since the Unix epoch on this node's clock.
fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Nanoseconds from `at_ns` (Unix ns) to now on this node's clock; 0 for a
/// time in the future.
fn delay_ns(at_ns: u64) -> u64 {
    unix_ns().saturating_sub(at_ns)
}

/// Whether a 429 `delay_ns` before the store's reading `stored` (`None`: the
/// store held no bucket, i.e. a full one) was false under every one of
/// `limits`: the bucket held `cost` tokens then, and it had not been drained
/// within the rule's period before (see [`drained_within_period`]).
pub fn is_false(stored: Option<&Stored>, limits: &[Limit], cost: u32, delay_ns: u64) -> bool {
    !limits.is_empty()
        && limits.iter().all(|limit| {
            tokens_at_rejection(stored, limit, delay_ns) + EPSILON >= f64::from(cost)
                && !drained_within_period(stored, limit, cost, delay_ns)
        })
}

/// Whether the bucket's last update, at or before the rejection and within
/// one period of `limit` before it, left it drained: with less than the
/// largest lease a node near its share takes (a tenth of the burst, or the
/// cost if more), the mark below which a node holds the key until a lease's
/// worth refills (a node far over its share may lease more, and is held
/// below its own lease: its 429s are the limit working either way).
/// The key then spent (nearly) its limit over the window ending at the
/// rejection, so the tokens the bucket held at that moment were the refill
/// since, which a key at its limit is owed no sooner than its next turn.
/// (Without it, every 429 of a node's hold after a drained grant would count
/// as false for a key far over its limit: the bucket refills during the hold
/// until a lease's worth is back.) The store shows one update only: a drain
/// before the last update is not seen.
pub fn drained_within_period(
    stored: Option<&Stored>,
    limit: &Limit,
    cost: u32,
    delay_ns: u64,
) -> bool {
    let Some(s) = stored else {
        return false;
    };
    let Some(at) = s.now_ns.checked_sub(delay_ns) else {
        return true;
    };
    let (tokens, updated) = s.bucket.parts();
    let drained_below = f64::from(cost.max(limit.burst() / 10));
    updated <= at && at - updated < limit.per_ns() && tokens + EPSILON < drained_below
}

/// The tokens the bucket held `delay_ns` before the reading: exact when it was
/// not touched since, else a lower bound (see the module's doc). A stored
/// bucket refills under `limit` (each candidate limit of the rule in turn).
pub fn tokens_at_rejection(stored: Option<&Stored>, limit: &Limit, delay_ns: u64) -> f64 {
    match stored {
        None => (f64::from(limit.burst()) - limit.rate_per_ns() * delay_ns as f64).max(0.0),
        Some(s) => {
            // Before the store's clock began (the memory store's is the
            // agent's start): nothing to prove.
            let Some(at) = s.now_ns.checked_sub(delay_ns) else {
                return 0.0;
            };
            let (tokens, updated) = s.bucket.parts();
            if updated <= at {
                s.bucket.tokens_at(limit, at)
            } else {
                (tokens - limit.rate_per_ns() * (updated - at) as f64).max(0.0)
            }
        }
    }
}

#[cfg(test)]
mod tests;
