//! One VM's lease calls to the agent: which items go out, which requests wait
//! for which call, and what an answer decides. Plain code over the [`Host`]
//! trait, generic over how a waiting request is named (a context id in Envoy, a
//! request number in the simulator), so both run this same code.
//!
//! - **Batched.** Items queue until the VM's root context sends them: every miss
//!   and refill of one turn of the worker's event loop goes out in one call.
//! - **Single flight.** A key of a leased rule has at most one item queued or in
//!   flight from this VM; a request that finds its key busy waits for that call
//!   instead of making its own (counted in [`FlightStats::waits`]). Across the
//!   workers of one Envoy the slot's call marker keeps refills single (see
//!   `meshlimit_core::lease`); a miss in one worker does not wait on another
//!   worker's call, since nothing would wake it (at most one call per key per
//!   worker). Exact rules are not single-flighted: each request's item asks for
//!   its own cost, as every request of an exact rule is checked at the store.
//! - **Refill ahead.** A request that crossed its key's refill mark was served;
//!   the refill it started is queued here like a miss, with nobody waiting.
//! - **No wedge.** Every call ends, by its answer or by the host's timeout, and
//!   then every request waiting on it is decided or queued again; a request
//!   that has waited [`MAX_ROUNDS`] calls takes its rules' failure policies.

use std::collections::HashMap;
use std::hash::Hash;

use meshlimit_core::wire::{LeaseAnswer, LeaseRequest, WIRE_VERSION};

use crate::config::FilterConfig;
use crate::host::Host;
use crate::pipeline::{apply_answer, Evaluation, Item};
use crate::slots;

/// Calls a request may wait on before its failure policies decide.
/// Each round is one agent call (a few hundred microseconds, at most the
/// lease timeout); a request loses a round only when the tokens its call
/// brought were taken by requests that asked before it. At 3 rounds, one
/// gateway taking 40% of a hot key's requests at 3× its limit sent 6 of
/// 120,000 requests to their failure policy (503 for a rule that fails
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
}

/// The VM's lease calls and the requests waiting on them.
pub struct Flights<W> {
    queued: Vec<Item>,
    calls: HashMap<u32, Vec<Item>>,
    /// Items queued or in flight per key (leased rules: at most one).
    busy: HashMap<u64, u32>,
    parked: HashMap<W, Evaluation>,
    waiters: HashMap<u64, Vec<W>>,
    pub stats: FlightStats,
}

impl<W> Default for Flights<W> {
    fn default() -> Self {
        Self {
            queued: Vec::new(),
            calls: HashMap::new(),
            busy: HashMap::new(),
            parked: HashMap::new(),
            waiters: HashMap::new(),
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
            self.stats.refills += 1;
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

    /// The queued items as one lease request (for `rules_version`), handing
    /// the items to the caller, which sends the request and reports
    /// [`Flights::sent`] or [`Flights::answered`] with `None`.
    pub fn take_batch(&mut self, rules_version: &str) -> Option<(LeaseRequest, Vec<Item>)> {
        if self.queued.is_empty() {
            return None;
        }
        let items = std::mem::take(&mut self.queued);
        let request = LeaseRequest {
            v: WIRE_VERSION,
            rules_version: rules_version.to_string(),
            items: items.iter().map(|i| i.lease.clone()).collect(),
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
    ) -> Vec<(W, Evaluation)> {
        let items = match call {
            Call::Sent(token) => self.calls.remove(&token).unwrap_or_default(),
            Call::Unsent(items) => items,
        };
        let mut answers = answers.map(Vec::into_iter);
        let mut woken: Vec<W> = Vec::new();
        for item in items {
            let answer = answers.as_mut().and_then(Iterator::next);
            let result = apply_answer(host, cfg, &item, answer);
            let fp = item.fingerprint;
            match self.busy.get_mut(&fp) {
                Some(n) if *n > 1 => *n -= 1,
                _ => {
                    self.busy.remove(&fp);
                }
            }
            // An exact rule's item answers one request; the others of its key
            // keep waiting for their own items.
            let waiting = self.waiters.remove(&fp).unwrap_or_default();
            let (now, later) = if item.exact {
                let mut w = waiting.into_iter();
                (w.next().into_iter().collect(), w.collect())
            } else {
                (waiting, Vec::new())
            };
            if !later.is_empty() {
                self.waiters.insert(fp, later);
            }
            for id in now {
                if let Some(eval) = self.parked.get_mut(&id) {
                    eval.resolve(host, cfg, fp, result);
                    if !woken.contains(&id) {
                        woken.push(id);
                    }
                }
            }
        }
        let mut decided = Vec::new();
        for id in woken {
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
    fn wait<H: Host>(&mut self, host: &H, cfg: &FilterConfig, id: W, eval: Evaluation) {
        let now = host.now_ns();
        let timeout = crate::config::nanos(cfg.timeout);
        for item in eval.miss_items() {
            let fp = item.fingerprint;
            if !item.exact && self.busy.contains_key(&fp) {
                self.stats.waits += 1;
            } else {
                // Marks the slot too: the call's round trip is measured, and
                // other workers do not start a refill meanwhile.
                slots::update(host, fp, cfg.slots, |s| s.begin_call(now, timeout));
                self.enqueue(item);
            }
            let waiting = self.waiters.entry(fp).or_default();
            if !waiting.contains(&id) {
                waiting.push(id);
            }
        }
        self.parked.insert(id, eval);
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
mod tests {
    use std::rc::Rc;

    use meshlimit_core::rules::RulesConfig;
    use meshlimit_core::wire::LeaseAnswer;
    use meshlimit_core::{RequestInfo, RuleSet, Verdict};

    use super::*;
    use crate::testing::MemoryHost;

    const MS: u64 = 1_000_000;

    fn rules(accuracy: &str) -> Rc<RuleSet> {
        let config: RulesConfig =
            serde_json::from_value(serde_json::json!({"version": 1, "rules": [
                {"name": "r", "key": [{"header": "x-k"}], "limit": {"requests": 1000, "per": "1s"},
                 "accuracy": accuracy, "on_failure": "closed"},
            ]}))
            .unwrap();
        Rc::new(RuleSet::compile(&config).unwrap())
    }

    fn eval(rs: &Rc<RuleSet>, host: &MemoryHost, cfg: &FilterConfig, key: &str) -> Evaluation {
        let req = RequestInfo::new("/", "GET", vec![("x-k".to_string(), key.to_string())]);
        let mut e = Evaluation::new(Rc::clone(rs), &req, cfg).unwrap().unwrap();
        e.local_pass(host, cfg);
        e
    }

    fn rs_fp(_rs: &Rc<RuleSet>, cfg: &FilterConfig) -> u64 {
        let req = RequestInfo::new("/", "GET", vec![("x-k".to_string(), "a".to_string())]);
        let rs = rules("fast");
        let a = rs.applicable(&req).unwrap().into_iter().next().unwrap();
        cfg.slot_hasher.fingerprint(&a.key)
    }

    fn grant(tokens: u32) -> LeaseAnswer {
        LeaseAnswer::Grant {
            tokens,
            ttl_ms: 300,
            remaining: 100,
            reset_ms: 10,
            local: false,
        }
    }

    #[test]
    fn requests_for_a_busy_key_wait_on_its_one_call() {
        let (host, cfg, rs) = (
            MemoryHost::default(),
            FilterConfig::default(),
            rules("fast"),
        );
        let mut f = Flights::default();
        for id in 1..=3 {
            assert!(f
                .admit(&host, &cfg, id, eval(&rs, &host, &cfg, "a"))
                .is_none());
        }
        assert!(f
            .admit(&host, &cfg, 4, eval(&rs, &host, &cfg, "b"))
            .is_none());
        let (req, items) = f.take_batch("v").unwrap();
        // One item per key, in one call; two requests waited.
        assert_eq!(req.items.len(), 2);
        f.sent(7, items);
        assert_eq!(
            f.stats,
            FlightStats {
                calls: 1,
                refills: 0,
                waits: 2
            }
        );
        let decided = f.answered(&host, &cfg, Call::Sent(7), Some(vec![grant(3), grant(1)]));
        let ids: Vec<u32> = decided.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), 4, "{ids:?}");
        assert!(decided
            .iter()
            .all(|(_, e)| matches!(e.verdict(), Verdict::Allow { .. })));
        assert_eq!(f.parked(), 0);
        assert!(!f.has_queued());
        // Each request counts once in the key's demand, though the three that
        // waited looked at the slot twice.
        let fp = rs_fp(&rs, &cfg);
        let (bytes, _) = host.shared_get(&crate::slots::slot_key(fp, cfg.slots));
        let slot = meshlimit_core::slot::SlotState::claim(bytes.as_deref(), fp, 0).unwrap();
        assert_eq!(slot.lease.demand, 3.0);
    }

    #[test]
    fn a_grant_too_small_for_every_waiter_sends_another_call_for_the_rest() {
        let (host, cfg, rs) = (
            MemoryHost::default(),
            FilterConfig::default(),
            rules("fast"),
        );
        let mut f = Flights::default();
        for id in 1..=3 {
            f.admit(&host, &cfg, id, eval(&rs, &host, &cfg, "a"));
        }
        let (_, items) = f.take_batch("v").unwrap();
        f.sent(1, items);
        let decided = f.answered(&host, &cfg, Call::Sent(1), Some(vec![grant(2)]));
        assert_eq!(decided.len(), 2);
        assert_eq!(f.parked(), 1);
        let (req, items) = f.take_batch("v").unwrap();
        assert_eq!(req.items.len(), 1, "one call for the one still waiting");
        f.sent(2, items);
        let decided = f.answered(
            &host,
            &cfg,
            Call::Sent(2),
            Some(vec![LeaseAnswer::Deny {
                retry_after_ms: 5,
                local: false,
            }]),
        );
        assert!(matches!(decided[0].1.verdict(), Verdict::Deny { .. }));
    }

    #[test]
    fn a_request_that_keeps_losing_its_grant_takes_its_policy_after_max_rounds() {
        let (host, cfg, rs) = (
            MemoryHost::default(),
            FilterConfig::default(),
            rules("fast"),
        );
        let mut f = Flights::default();
        f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
        let mut calls = 0;
        let decided = loop {
            let (_, items) = f.take_batch("v").unwrap();
            calls += 1;
            // Every answer's tokens are gone before the request looks.
            let decided = f.answered(&host, &cfg, Call::Unsent(items), Some(vec![grant(0)]));
            if !decided.is_empty() {
                break decided;
            }
        };
        assert_eq!(calls, usize::from(MAX_ROUNDS));
        assert!(matches!(
            decided[0].1.verdict(),
            Verdict::Unavailable { .. }
        ));
    }

    #[test]
    fn a_failed_call_decides_its_waiters_by_their_policy_and_frees_the_key() {
        let (host, cfg, rs) = (
            MemoryHost::default(),
            FilterConfig::default(),
            rules("fast"),
        );
        let mut f = Flights::default();
        f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
        f.admit(&host, &cfg, 2, eval(&rs, &host, &cfg, "a"));
        let (_, items) = f.take_batch("v").unwrap();
        f.sent(1, items);
        let decided = f.answered(&host, &cfg, Call::Sent(1), None);
        assert_eq!(decided.len(), 2);
        assert!(decided
            .iter()
            .all(|(_, e)| matches!(e.verdict(), Verdict::Unavailable { .. })));
        // The key is free: the next request calls again.
        f.admit(&host, &cfg, 3, eval(&rs, &host, &cfg, "a"));
        assert!(f.has_queued());
    }

    #[test]
    fn each_request_of_an_exact_rule_asks_for_itself() {
        let (host, cfg, rs) = (
            MemoryHost::default(),
            FilterConfig::default(),
            rules("exact"),
        );
        let mut f = Flights::default();
        f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
        f.admit(&host, &cfg, 2, eval(&rs, &host, &cfg, "a"));
        let (req, items) = f.take_batch("v").unwrap();
        assert_eq!(req.items.len(), 2);
        assert_eq!(f.stats.waits, 0);
        f.sent(1, items);
        let decided = f.answered(&host, &cfg, Call::Sent(1), Some(vec![grant(1), grant(1)]));
        assert_eq!(decided.len(), 2);
        assert!(decided
            .iter()
            .all(|(_, e)| matches!(e.verdict(), Verdict::Allow { .. })));
    }

    #[test]
    fn a_request_that_crosses_the_mark_is_served_and_its_refill_queued() {
        let (host, cfg, rs) = (
            MemoryHost::default(),
            FilterConfig::default(),
            rules("fast"),
        );
        let mut f = Flights::default();
        // A first grant, spent at 1,000/s, gives the key a spend rate.
        f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
        let (_, items) = f.take_batch("v").unwrap();
        f.sent(1, items);
        f.answered(&host, &cfg, Call::Sent(1), Some(vec![grant(50)]));
        let mut id = 2;
        let mut refilled_at = None;
        for ms in 1..=300u64 {
            host.set_now(ms * MS);
            let decided = f.admit(&host, &cfg, id, eval(&rs, &host, &cfg, "a"));
            id += 1;
            if decided.is_none() {
                // Ran dry: ask again (this is the second grant, which measures the rate).
                let (_, items) = f.take_batch("v").unwrap();
                f.sent(id, items);
                f.answered(&host, &cfg, Call::Sent(id), Some(vec![grant(50)]));
                continue;
            }
            if f.has_queued() {
                refilled_at = Some(ms);
                break;
            }
        }
        let at = refilled_at.expect("a refill started ahead of need");
        assert_eq!(f.stats.refills, 1);
        assert_eq!(
            f.parked(),
            0,
            "the request that crossed the mark did not wait"
        );
        // It went out as a refill: nobody waits on it, the lease still had tokens.
        let (req, _) = f.take_batch("v").unwrap();
        assert_eq!(req.items.len(), 1);
        // Near the end of the first grant's 50 tokens, spent one a millisecond.
        assert!((40..50).contains(&at), "refill started at {at} ms");
        let (bytes, _) = host.shared_get(&crate::slots::slot_key(rs_fp(&rs, &cfg), cfg.slots));
        let slot =
            meshlimit_core::slot::SlotState::claim(bytes.as_deref(), rs_fp(&rs, &cfg), 0).unwrap();
        assert!(slot.lease.tokens > 0, "served from what was left");
        assert!(slot.lease.in_flight(host.now_ns()));
    }
}
