//! Deciding, for one key, which of the limiter's decisions were wrong, against
//! ideal token buckets with the rule's rate and burst (`meshlimit_core::Bucket`,
//! the same maths the store runs). A window rule is judged against its exact
//! truth instead ([`Ideal`]): a fixed window against exact fixed windows aligned
//! to the Unix epoch as the store's are (the judge's clock plus the Unix time at
//! the run's start); a sliding window against the exact
//! sliding log (every admission's time kept, at most `requests` within any
//! `per`), which the store's two-counter window approximates. For windows, both
//! replays below count by the decision's time: the ideal fed every arrival, and
//! the replay of admissions (a request admitted when the window, or the log over
//! the last `per`, already held `requests` is wrongly allowed; a fixed-window
//! admission decided just after a window's start may count in the window of its
//! arrival, where the store may have counted it).
//!
//! - **Wrongly limited**: a request rejected (429 or 503) while the key's offered
//!   traffic was within its limit: an ideal bucket fed every arrival of the key
//!   (each takes a token when there is one) admits this request, and admitted
//!   every arrival of the key from one rule period before this request's arrival
//!   until its decision. A key offered above its limit is not "under its limit
//!   over the window", so which of its requests get through is not judged here;
//!   how many do is `admitted/limit`. (Up to the decision, not the arrival: while
//!   a request waits for the store, requests of other gateways that arrived after
//!   it may be served first; if the key reached its limit meanwhile, this one was
//!   at the limit's edge, not wrongly limited.)
//! - **Wrongly allowed**: a request admitted while the key had used its allowance:
//!   an ideal bucket replayed over the admitted requests, in the order they were
//!   decided and at the instant each was decided, holds less than the request's
//!   cost. Equivalently: for some window ending at that decision, the key's
//!   admissions exceeded burst + rate × window. The replay starts full at the
//!   arrival of the key's first admitted request, as the store's bucket starts
//!   full at its first lease.
//!   The store decided somewhere between the request's arrival and its decision,
//!   and a full bucket loses what it would refill meanwhile; so for a request
//!   decided `w` after its arrival, the replay's cap is burst + rate × `w` (only a
//!   full bucket is affected). A wrongly allowed request does not spend the
//!   replay's tokens, so each excess admission is counted once.
//! - **Held back** (a diagnostic, not a target): a rejection while that replay of
//!   admissions still held a whole token, i.e. unspent allowance sat somewhere in
//!   the fleet (in leases, in an agent's pool) while this request was turned away.
//!
//! The simulator feeds arrivals in arrival order and decisions in decision order
//! (one thread, one monotonic clock), so both replays are exact.

use std::collections::{BTreeMap, VecDeque};

use meshlimit_core::{Algorithm, Bucket, Limit, Take};

/// One key's judge.
#[derive(Debug, Clone)]
pub struct Judge {
    limit: Limit,
    cost: u32,
    offered: Option<Bucket>,
    admitted: Option<Replay>,
    /// The last arrival the offered-traffic bucket could not admit.
    last_over_ns: Option<u64>,
    /// For a window rule: the ideal fed every arrival and the replay of
    /// admissions (the bucket fields above then stay unused).
    window: Option<(Ideal, Ideal)>,
    /// Unix time (ns) at the judge clock's zero: fixed windows are aligned to
    /// the Unix epoch, as the store aligns them.
    unix_offset_ns: u64,
}

/// The exact truth of a window rule.
#[derive(Debug, Clone)]
pub enum Ideal {
    /// Exact fixed windows: counts by window index.
    Fixed(BTreeMap<u64, u64>),
    /// The exact sliding log: each admission's time and cost within the last
    /// `per`, and their sum.
    Log(VecDeque<(u64, u64)>, u64),
}

impl Ideal {
    fn new(limit: &Limit) -> Ideal {
        match limit.algorithm() {
            Algorithm::SlidingWindow => Ideal::Log(VecDeque::new(), 0),
            _ => Ideal::Fixed(BTreeMap::new()),
        }
    }

    /// Whether `cost` fits at `unix_ns` (counted in the window of `also_ns`
    /// too, for a fixed window, when it does not fit in its own).
    fn fits(&mut self, limit: &Limit, unix_ns: u64, cost: u64) -> Option<u64> {
        let (per, n) = (limit.per_ns(), u64::from(limit.requests()));
        match self {
            Ideal::Fixed(counts) => {
                let index = unix_ns / per;
                // Only the windows a later call may still ask about are kept.
                counts.retain(|i, _| *i + 2 >= index);
                let count = counts.get(&index).copied().unwrap_or(0);
                (count + cost <= n).then_some(index)
            }
            Ideal::Log(log, sum) => {
                while log.front().is_some_and(|(t, _)| t + per <= unix_ns) {
                    if let Some((_, c)) = log.pop_front() {
                        *sum -= c;
                    }
                }
                (*sum + cost <= n).then_some(unix_ns)
            }
        }
    }

    /// Whether `cost` fits at `unix_ns`, changing nothing.
    fn has_room(&self, limit: &Limit, unix_ns: u64, cost: u64) -> bool {
        let (per, n) = (limit.per_ns(), u64::from(limit.requests()));
        let used = match self {
            Ideal::Fixed(counts) => counts.get(&(unix_ns / per)).copied().unwrap_or(0),
            Ideal::Log(log, sum) => {
                let gone: u64 = log
                    .iter()
                    .take_while(|(t, _)| t + per <= unix_ns)
                    .map(|(_, c)| c)
                    .sum();
                sum - gone
            }
        };
        used + cost <= n
    }

    fn count(&mut self, at: u64, cost: u64) {
        match self {
            Ideal::Fixed(counts) => *counts.entry(at).or_default() += cost,
            Ideal::Log(log, sum) => {
                log.push_back((at, cost));
                *sum += cost;
            }
        }
    }

    /// Counts `cost` at `unix_ns` when it fits, else in the window of
    /// `earlier_ns` (a fixed window's arrival) when that fits; false if neither.
    fn take(&mut self, limit: &Limit, unix_ns: u64, earlier_ns: u64, cost: u64) -> bool {
        let at = self.fits(limit, unix_ns, cost).or_else(|| match self {
            Ideal::Fixed(_) if earlier_ns / limit.per_ns() != unix_ns / limit.per_ns() => {
                self.fits(limit, earlier_ns, cost)
            }
            _ => None,
        });
        match at {
            Some(at) => {
                self.count(at, cost);
                true
            }
            None => false,
        }
    }
}

/// The replay of admissions: a token bucket whose cap stretches by the refill
/// of each request's wait (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Replay {
    tokens: f64,
    updated_ns: u64,
}

impl Judge {
    pub fn new(limit: Limit, cost: u32) -> Judge {
        Judge {
            limit,
            cost: cost.max(1),
            offered: None,
            admitted: None,
            last_over_ns: None,
            window: limit
                .algorithm()
                .is_window()
                .then(|| (Ideal::new(&limit), Ideal::new(&limit))),
            unix_offset_ns: 0,
        }
    }

    /// The same judge with its clock's zero at `unix_ns` (Unix time).
    pub fn aligned(self, unix_ns: u64) -> Judge {
        Judge {
            unix_offset_ns: unix_ns,
            ..self
        }
    }

    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// An arrival at `now_ns` (call in arrival order): true when an ideal
    /// limiter fed every arrival admits it.
    pub fn arrive(&mut self, now_ns: u64) -> bool {
        let limit = self.limit;
        if let Some((ideal, _)) = &mut self.window {
            let unix = self.unix_offset_ns + now_ns;
            let admit = ideal.take(&limit, unix, unix, u64::from(self.cost));
            if !admit {
                self.last_over_ns = Some(now_ns);
            }
            return admit;
        }
        let bucket = self
            .offered
            .get_or_insert_with(|| Bucket::full(&limit, now_ns));
        let admit = matches!(
            bucket.take(&limit, now_ns, self.cost, self.cost),
            Take::Granted { .. }
        );
        if !admit {
            self.last_over_ns = Some(now_ns);
        }
        admit
    }

    /// A rejection, decided now, of a request that arrived at `arrived_ns`: true
    /// when it was wrongly limited (see the module docs). Call in decision order,
    /// after every arrival up to now.
    pub fn rejected(&self, arrived_ns: u64, ideal_admit: bool) -> bool {
        let window_start = arrived_ns.saturating_sub(self.limit.per_ns());
        ideal_admit && self.last_over_ns.is_none_or(|t| t < window_start)
    }

    /// An admission decided at `now_ns` of a request that arrived at
    /// `arrived_ns` (call in decision order); true when it was wrongly allowed.
    pub fn admitted(&mut self, arrived_ns: u64, now_ns: u64) -> bool {
        if let Some((_, replay)) = &mut self.window {
            let (unix, arrived) = (
                self.unix_offset_ns + now_ns,
                self.unix_offset_ns + arrived_ns,
            );
            return !replay.take(&self.limit, unix, arrived, u64::from(self.cost));
        }
        let (rate, burst) = (self.limit.rate_per_ns(), f64::from(self.limit.burst()));
        let replay = self.admitted.get_or_insert(Replay {
            tokens: burst,
            updated_ns: arrived_ns,
        });
        let elapsed = now_ns.saturating_sub(replay.updated_ns) as f64;
        let wait = now_ns.saturating_sub(arrived_ns) as f64;
        let held = (replay.tokens + elapsed * rate).min(burst + wait * rate);
        replay.updated_ns = replay.updated_ns.max(now_ns);
        let cost = f64::from(self.cost);
        if held + 1e-9 >= cost {
            replay.tokens = held - cost;
            false
        } else {
            replay.tokens = held;
            true
        }
    }

    /// A rejection decided at `now_ns`: true when the replay of admissions still
    /// held a whole token (allowance held back).
    pub fn held_back(&self, now_ns: u64) -> bool {
        if let Some((_, replay)) = &self.window {
            let unix = self.unix_offset_ns + now_ns;
            return replay.has_room(&self.limit, unix, u64::from(self.cost));
        }
        match &self.admitted {
            Some(r) => {
                let elapsed = now_ns.saturating_sub(r.updated_ns) as f64;
                let held = (r.tokens + elapsed * self.limit.rate_per_ns())
                    .min(f64::from(self.limit.burst()));
                held + 1e-9 >= f64::from(self.cost)
            }
            // Nothing admitted yet: the whole burst is unspent.
            None => true,
        }
    }
}

#[cfg(test)]
mod tests;
