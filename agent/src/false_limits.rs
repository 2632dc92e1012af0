//! The false-limit rate, an SLI: the share of a rule's 429s given to keys that
//! were under their limit.
//!
//! **Definition.** A 429 of rule R to key K is *false* when the region's bucket
//! for (R, K) in the store held at least the request's cost (the rule's `cost`)
//! at the moment of the rejection.
//!
//! A 429 the store itself gave (`source: store`: the lease script said no) is
//! true by construction and counted as checked at once. The suspects are the
//! 429s made from what the node held instead of the store: a filter's cached
//! denial (`denial_cache`), the node pool's hold (`agent_pool`), a filter's
//! leased tokens (`filter_lease`) and an agent that did not say (`agent`). The
//! agent checks them against the store with a read-only peek (one call, the
//! store's deadline, never retried; the peek script in `store/redis/script.rs`,
//! the memory store's own read), at most [`CHECKS_PER_SECOND`] a second per
//! node, from a queue of at most [`QUEUE`]; the rest are skipped and counted
//! (`meshlimit_false_limit_checks_skipped_total{reason}`), and the next check of
//! the rule weighs for the ones skipped for the budget in the ratio.
//! Rejections by a failure policy (`failure_policy`, `agent_local`) are the
//! store's outage, not a limit: the fail-open ratio and store metrics cover them.
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
//! false limits than there were (it is a lower bound). What it cannot see:
//! tokens the store had already handed out in leases but nobody spent yet
//! (stranded in leases, so the store looked emptier than the key's use), and
//! a bucket spent again between the rejection and the check.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use meshlimit_core::rules::{Limits, Rule, Scope};
use meshlimit_core::wire::{DecisionRecord, DecisionSource};
use meshlimit_core::{Limit, Outcome};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::metrics::{Metrics, Skipped};
use crate::rules_watch::CurrentRules;
use crate::store::{Store, Stored};

/// Suspect 429s checked against the store per second per node, at most.
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
    /// When the filter decided, ms since the Unix epoch.
    at_ms: u64,
}

/// The node's false-limit checker: takes the filters' decision records and
/// feeds the SLI's metrics.
pub struct FalseLimits {
    rules: Arc<CurrentRules>,
    metrics: Arc<Metrics>,
    /// `None` outside a tokio runtime (nothing can check): suspects are skipped.
    tx: Option<mpsc::Sender<Suspect>>,
}

impl FalseLimits {
    /// Starts the checker task on the current tokio runtime (none: suspects
    /// are skipped and counted). It ends when the checker is dropped.
    pub fn start(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> Arc<FalseLimits> {
        let tx = tokio::runtime::Handle::try_current().ok().map(|rt| {
            let (tx, rx) = mpsc::channel(QUEUE);
            rt.spawn(run(rx, rules.clone(), store, metrics.clone()));
            tx
        });
        Arc::new(FalseLimits { rules, metrics, tx })
    }

    /// Takes a filter's records: each 429 counted as checked (the store's) or
    /// queued for a check (a suspect).
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
                | DecisionSource::AgentPool
                | DecisionSource::FilterLease
                | DecisionSource::Agent => {
                    let suspect = Suspect {
                        rule: rule.name.clone(),
                        key_id: r.key_id.clone(),
                        at_ms: r.at_ms,
                    };
                    let queued = self
                        .tx
                        .as_ref()
                        .is_some_and(|tx| tx.try_send(suspect).is_ok());
                    if !queued {
                        self.metrics.false_limit_skipped(&rule.name, Skipped::Queue);
                    }
                }
                DecisionSource::AgentLocal | DecisionSource::FailurePolicy => {}
            }
        }
    }
}

/// Checks the queued suspects, at most [`CHECKS_PER_SECOND`] a second.
async fn run(
    mut rx: mpsc::Receiver<Suspect>,
    rules: Arc<CurrentRules>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
) {
    let mut second = Instant::now();
    let mut used = 0u32;
    while let Some(s) = rx.recv().await {
        if second.elapsed() >= Duration::from_secs(1) {
            second = Instant::now();
            used = 0;
        }
        if used >= CHECKS_PER_SECOND {
            metrics.false_limit_skipped(&s.rule, Skipped::Budget);
            continue;
        }
        used += 1;
        match check(&s, &rules, store.as_ref(), &metrics).await {
            Ok(is_false) => metrics.false_limit_checked(&s.rule, is_false),
            Err(why) => metrics.false_limit_skipped(&s.rule, why),
        }
    }
}

/// Peeks the suspect's bucket and judges it.
async fn check(
    s: &Suspect,
    rules: &CurrentRules,
    store: &dyn Store,
    metrics: &Metrics,
) -> Result<bool, Skipped> {
    let set = rules.get().ok_or(Skipped::UnknownRule)?;
    let rule = set.rule(&s.rule).ok_or(Skipped::UnknownRule)?;
    if rule.scope == Scope::Global {
        return Err(Skipped::GlobalRule);
    }
    if rule.limits.strictest().algorithm().is_window() {
        return Err(Skipped::WindowRule);
    }
    if delay_ns(s.at_ms) > MAX_DELAY.as_nanos() as u64 {
        return Err(Skipped::Stale);
    }
    let limits = limits_of(rule, s.at_ms.saturating_mul(1_000_000));
    let Some(first) = limits.first() else {
        return Err(Skipped::UnknownRule);
    };
    let peeked = store
        .peek(metrics.key_ids(), &rule.name, &s.key_id, first)
        .await
        .map_err(|_| Skipped::StoreError)?;
    // Measured after the answer: never shorter than the true delay.
    let delay = delay_ns(s.at_ms);
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

/// Nanoseconds from `at_ms` (Unix ms) to now on this node's clock; 0 for a
/// time in the future.
fn delay_ns(at_ms: u64) -> u64 {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    now_ms.saturating_sub(at_ms).saturating_mul(1_000_000)
}

/// Whether a 429 `delay_ns` before the store's reading `stored` (`None`: the
/// store held no bucket, i.e. a full one) was false under every one of
/// `limits`: the bucket held `cost` tokens then.
pub fn is_false(stored: Option<&Stored>, limits: &[Limit], cost: u32, delay_ns: u64) -> bool {
    !limits.is_empty()
        && limits
            .iter()
            .all(|limit| tokens_at_rejection(stored, limit, delay_ns) + EPSILON >= f64::from(cost))
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
