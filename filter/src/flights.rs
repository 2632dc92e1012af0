//! One VM's lease calls to the agent: which items go out, which requests wait
//! for which call, and what an answer decides. Plain code over the [`Host`]
//! trait, generic over how a waiting request is named (a context id in Envoy, a
//! request number in the simulator), so both run this same code.
//!
//! - **Batched.** Items queue until the VM's root context sends them: every miss
//!   and refill of one turn of the worker's event loop goes out together, in
//!   as few calls as the agent's limits allow (64 items, 64 KiB a call; see
//!   `meshlimit_core::wire::lease_batch_len`).
//! - **Single flight.** A key of a leased rule has at most one item queued or in
//!   flight from this VM; a request that finds its key busy waits for that call
//!   instead of making its own (counted in [`FlightStats::waits`]). Across the
//!   workers of one Envoy the slot's call marker keeps refills single (see
//!   `meshlimit_core::lease`); a miss in one worker does not wait on another
//!   worker's call, since nothing would wake it (at most one call per key per
//!   worker). Exact rules are not single-flighted: each request's item asks for
//!   its own cost, as every request of an exact rule is checked at the store.
//! - **Refill ahead.** A request that crossed its key's refill mark was served;
//!   the refill it started is queued here like a miss, with nobody waiting. A
//!   cold start's call is queued the same way, and its grant pays for the
//!   request admitted before it.
//! - **No wedge.** Every call ends, by its answer or by the host's timeout, and
//!   then every request waiting on it is decided or queued again; a request
//!   that has waited [`MAX_ROUNDS`] calls takes its rules' failure policies.

use std::collections::hash_map::Entry;
use std::hash::Hash;

use smallvec::SmallVec;

use meshlimit_core::wire::{lease_batch_len, LeaseAnswer, LeaseRequest, WIRE_VERSION};

use crate::config::FilterConfig;
use crate::fast_map::{FastMap, FastSet};
use crate::host::Host;
use crate::pipeline::{apply_answer, Evaluation, Item, Takes};
use crate::slots;

/// Calls a request may wait on before its failure policies decide.
/// Each round is one agent call (a few hundred microseconds, at most the
/// lease timeout); a request loses a round only when the tokens its call
/// brought were taken by requests that asked before it, so a request on a
/// healthy agent rarely needs more than two. Eight bounds how long a
/// request can wait (eight lease timeouts) while keeping a lost race from
/// sending a request to its failure policy (a 503 for a rule that fails
/// closed) with the agent healthy.
pub const MAX_ROUNDS: u8 = 8;

/// What the lease calls did, for the filter's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlightStats {
    /// Lease calls sent (reported by [`Flights::sent`]; a batch the host
    /// refused is not one).
    pub calls: u64,
    /// Items sent ahead of need (nobody waiting).
    pub refills: u64,
    /// Requests that waited on a call already queued or in flight for their key.
    pub waits: u64,
    /// Requests admitted by a cold start (their key's call queued behind them).
    pub cold_starts: u64,
    /// Cold starts no grant paid for: the agent denied the key, or did not
    /// answer. Each was one request's cost over what the store counted.
    pub cold_starts_unpaid: u64,
}

/// The VM's lease calls and the requests waiting on them.
pub struct Flights<W> {
    queued: Vec<Item>,
    /// The buffer of the last answered batch, emptied: the queue's next
    /// buffer when a whole queue goes out, so a new key's item is queued
    /// and sent with no allocation of a list.
    spare: Vec<Item>,
    calls: FastMap<u32, Vec<Item>>,
    /// Items queued or in flight per key (leased rules: at most one).
    busy: FastMap<u64, u32>,
    parked: FastMap<W, Evaluation>,
    waiters: FastMap<u64, Waiting<W>>,
    pub stats: FlightStats,
}

impl<W> Default for Flights<W> {
    fn default() -> Self {
        Self {
            queued: Vec::new(),
            spare: Vec::new(),
            calls: FastMap::default(),
            busy: FastMap::default(),
            parked: FastMap::default(),
            waiters: FastMap::default(),
            stats: FlightStats::default(),
        }
    }
}

impl<W: Copy + Eq + Hash> Flights<W> {
    /// Takes a request after its local pass: queues its refills, and when rules
    /// are undecided, queues or joins the calls for their keys and parks it.
    /// Returns the evaluation back when nothing waits (it is decided).
    pub fn admit<H: Host>(
        &mut self,
        host: &H,
        cfg: &FilterConfig,
        id: W,
        mut eval: Evaluation,
    ) -> Option<Evaluation> {
        for item in eval.take_refills() {
            if item.prepaid > 0 {
                self.stats.cold_starts += 1;
            } else {
                self.stats.refills += 1;
            }
            self.enqueue(item);
        }
        if !eval.has_misses() {
            return Some(eval);
        }
        self.wait(host, cfg, id, eval);
        None
    }

    /// True when items wait to be sent.
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// The next batch of queued items, handed to the caller, which sends them
    /// (the call's body: `meshlimit_core::wire::lease_request_json`) and
    /// reports [`Flights::sent`] or [`Flights::answered`] with `None`. A batch
    /// stops at the agent's limits ([`lease_batch_len`]): a turn of many new
    /// keys goes out as several calls, never as one the agent refuses whole.
    pub fn take_items(&mut self, rules_version: &str) -> Option<Vec<Item>> {
        let n = lease_batch_len(rules_version, &self.queued);
        match n {
            0 => None,
            n if n == self.queued.len() => {
                let next = std::mem::take(&mut self.spare);
                Some(std::mem::replace(&mut self.queued, next))
            }
            n => Some(self.queued.drain(..n).collect()),
        }
    }

    /// [`Flights::take_items`] with the items as one lease request (for
    /// `rules_version`), for a caller that sends the request as a value (the
    /// simulator's client).
    pub fn take_batch(&mut self, rules_version: &str) -> Option<(LeaseRequest, Vec<Item>)> {
        let items = self.take_items(rules_version)?;
        let request = LeaseRequest {
            v: WIRE_VERSION,
            rules_version: rules_version.to_string(),
            items: items.iter().map(Item::lease).collect(),
        };
        Some((request, items))
    }

    /// The batch went out as call `token`.
    pub fn sent(&mut self, token: u32, items: Vec<Item>) {
        self.stats.calls += 1;
        self.calls.insert(token, items);
    }

    /// The answer to call `token` (`None`: the call failed or timed out), or,
    /// with `items`, to a batch that could not be sent. Fills the slots, then
    /// decides every request waiting on these keys; returns the decided ones.
    /// A request still undecided (another worker took the tokens first) waits
    /// on a new call, unless it has waited [`MAX_ROUNDS`] already.
    pub fn answered<H: Host>(
        &mut self,
        host: &H,
        cfg: &FilterConfig,
        call: Call,
        answers: Option<Vec<LeaseAnswer>>,
    ) -> Finished<W> {
        let mut items = match call {
            Call::Sent(token) => self.calls.remove(&token).unwrap_or_default(),
            Call::Unsent(items) => items,
        };
        let mut answers = answers.map(Vec::into_iter);
        let mut woken: Waiting<W> = Waiting::default();
        for item in items.drain(..) {
            let answer = answers.as_mut().and_then(Iterator::next);
            let paid = matches!(answer, Some(LeaseAnswer::Grant { local: false, .. }));
            if item.prepaid > 0 && !paid {
                self.stats.cold_starts_unpaid += 1;
            }
            let fp = item.fingerprint;
            // One lookup: the count goes down, or the key is no longer busy.
            if let Entry::Occupied(mut busy) = self.busy.entry(fp) {
                match *busy.get() > 1 {
                    true => *busy.get_mut() -= 1,
                    false => {
                        busy.remove();
                    }
                }
            }
            // An exact rule's item answers one request; the others of its key
            // keep waiting for their own items.
            let waiting = self.waiters.remove(&fp).unwrap_or_default().order;
            let (now, later): (Ids<W>, Waiting<W>) = if item.exact {
                let mut w = waiting.into_iter();
                (w.next().into_iter().collect(), w.collect())
            } else {
                (waiting, Waiting::default())
            };
            if !later.order.is_empty() {
                self.waiters.insert(fp, later);
            }
            // The answer fills the slot and the requests it wakes take from
            // it, in order, in one write.
            let parked = &self.parked;
            let mut takes = Takes::new();
            let applied = apply_answer(host, cfg, &item, answer, |s, at| {
                takes.clear();
                for id in &now {
                    if let Some(eval) = parked.get(id) {
                        eval.take_answered(s, at, fp, &mut takes);
                    }
                }
            });
            let mut takes = takes.into_iter();
            for id in now {
                if let Some(eval) = self.parked.get_mut(&id) {
                    // Its own takes, read in place: what it leaves unread
                    // is still its own, not the next request's.
                    let mut own = takes.by_ref().take(eval.waits_on(fp));
                    eval.resolve(host, cfg, fp, applied, &mut own);
                    own.for_each(drop);
                    woken.push(id);
                }
            }
        }
        // Kept for the queue, which had it: no more memory than it held.
        self.spare = items;
        let mut decided = Finished::new();
        for id in woken.order {
            let Some(mut eval) = self.parked.remove(&id) else {
                continue;
            };
            if !eval.has_misses() {
                decided.push((id, eval));
                continue;
            }
            let waiting_elsewhere = eval
                .miss_fingerprints()
                .iter()
                .any(|fp| self.waiters.get(fp).is_some_and(|w| w.contains(&id)));
            if waiting_elsewhere {
                self.parked.insert(id, eval);
                continue;
            }
            eval.rounds = eval.rounds.saturating_add(1);
            if eval.rounds >= MAX_ROUNDS {
                eval.fail_misses(host, cfg);
                decided.push((id, eval));
            } else {
                self.wait(host, cfg, id, eval);
            }
        }
        decided
    }

    /// Forgets a waiting request whose stream went away.
    pub fn forget(&mut self, id: W) {
        self.parked.remove(&id);
    }

    /// Requests waiting (for tests and the simulator).
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    fn enqueue(&mut self, item: Item) {
        *self.busy.entry(item.fingerprint).or_default() += 1;
        self.queued.push(item);
    }

    /// Parks `eval` on the calls for its undecided keys, queueing an item for
    /// each key that has none (every key of an exact rule).
    fn wait<H: Host>(&mut self, host: &H, cfg: &FilterConfig, id: W, mut eval: Evaluation) {
        let mut now = None;
        let timeout = crate::config::nanos(cfg.timeout);
        for item in eval.each_miss_item() {
            let fp = item.fingerprint;
            if !item.exact && self.busy.contains_key(&fp) {
                self.stats.waits += 1;
            } else {
                // Marks the slot too (unless the local pass did, in the write
                // of the miss): the call's round trip is measured, and other
                // workers do not start a refill meanwhile.
                if !item.marked {
                    let now = *now.get_or_insert_with(|| host.now_ns());
                    slots::update(host, now, fp, cfg.slots, |s| s.begin_call(now, timeout));
                }
                self.enqueue(item);
            }
            self.waiters.entry(fp).or_default().push(id);
        }
        eval.forget_marks();
        self.parked.insert(id, eval);
    }

    /// Whether an item for the key `fingerprint` is queued or in flight: a
    /// miss of a leased rule waits for it ([`crate::pipeline::CallMark`]).
    pub fn is_busy(&self, fingerprint: u64) -> bool {
        self.busy.contains_key(&fingerprint)
    }
}

/// The requests an answer decided, with their evaluations: a new key's
/// answer decides one, held inline, so its request allocates no list.
pub type Finished<W> = SmallVec<[(W, Evaluation); 1]>;

/// Requests in the order they came: a new key's call has one, held inline,
/// so neither its waiters nor the requests its answer wakes allocate a list.
type Ids<W> = SmallVec<[W; 2]>;

/// The requests waiting on one key's call, in the order they came, with a set
/// for membership once [`SCANNED_WAITERS`] wait: while the
/// agent is slow thousands may wait on a hot key, and a search of the list
/// for each of them cost the VM their square (the simulator's gateways spent
/// their time there, seconds behind their load). A new key has one waiter,
/// and a set for one would cost its request an allocation and a hash.
struct Waiting<W> {
    order: Ids<W>,
    /// Empty until a push finds [`SCANNED_WAITERS`] in `order`.
    members: FastSet<W>,
}

/// The most waiters on one key looked up by a search of the list.
const SCANNED_WAITERS: usize = 8;

impl<W> Default for Waiting<W> {
    fn default() -> Self {
        Waiting {
            order: Ids::new(),
            members: FastSet::default(),
        }
    }
}

impl<W: Copy + Eq + Hash> Waiting<W> {
    /// Adds `id` unless it already waits here.
    fn push(&mut self, id: W) {
        if self.order.len() < SCANNED_WAITERS {
            if !self.order.contains(&id) {
                self.order.push(id);
            }
            return;
        }
        if self.members.is_empty() {
            self.members.extend(self.order.iter().copied());
        }
        if self.members.insert(id) {
            self.order.push(id);
        }
    }

    fn contains(&self, id: &W) -> bool {
        match self.members.is_empty() {
            true => self.order.contains(id),
            false => self.members.contains(id),
        }
    }
}

impl<W: Copy + Eq + Hash> FromIterator<W> for Waiting<W> {
    fn from_iter<I: IntoIterator<Item = W>>(ids: I) -> Self {
        let mut w = Waiting::default();
        for id in ids {
            w.push(id);
        }
        w
    }
}

/// Which call an answer is for.
pub enum Call {
    /// The call sent with this token (see [`Flights::sent`]).
    Sent(u32),
    /// These items: a batch that could not be sent, or one whose caller kept
    /// it instead of reporting it sent (the simulator).
    Unsent(Vec<Item>),
}

#[cfg(test)]
mod tests;
