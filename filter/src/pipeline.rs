//! The request path, as plain code over the [`Host`] trait: which rules apply,
//! what local state decides, what to ask the agent, how its answers and failures
//! become rule verdicts. `http.rs` only moves data between this and Envoy.

use std::rc::Rc;

use meshlimit_core::decision::RuleResult;
use meshlimit_core::rules::{Accuracy, RequestError, Rule};
use meshlimit_core::slot::{LocalCheck, SlotState};
use meshlimit_core::wire::{
    AnsweredFrom, DecisionSource, LeaseAnswer, LeaseFields, LeaseItem, LeaseRequest, WIRE_VERSION,
};
use meshlimit_core::{DescriptorKey, Limit, Outcome, RequestInfo, RuleSet, RuleVerdict};
use smallvec::SmallVec;

use crate::config::FilterConfig;
use crate::host::Host;
use crate::slots;

/// Rules a request's checks and results hold inline: more go on the heap.
const INLINE_RULES: usize = 2;

/// The takes of the requests waiting on one key, from its answered slot
/// ([`Evaluation::take_answered`]).
pub type Takes = SmallVec<[LocalCheck; INLINE_RULES]>;

/// One request's evaluation; it survives the pause while the agent answers.
pub struct Evaluation {
    rules: Rc<RuleSet>,
    checks: SmallVec<[Check; INLINE_RULES]>,
    /// Refills the local pass started (each key's lease crossed its mark).
    refills: Vec<Item>,
    /// Agent calls this request has waited on so far.
    pub(crate) rounds: u8,
    /// When its rules were last decided (the host's clock, read once a
    /// step): the decision log's time, without a clock call of its own.
    /// First the request's own read (`RequestInfo::now_ns`), which the local
    /// pass runs on.
    pub(crate) decided_at_ns: u64,
    /// The local pass may take worker slices (set by [`Evaluation::slice_pass`]).
    slicing: bool,
}

/// One item of a lease call, with the slot it fills.
#[derive(Clone)]
pub struct Item {
    pub fingerprint: u64,
    /// The rule set the item's rule is in, and its position there: the
    /// call names the rule from the set, not from a copy of its name made
    /// for every new key.
    rules: Rc<RuleSet>,
    rule: usize,
    pub key: DescriptorKey,
    /// Tokens asked for (`LeaseItem::cost`).
    pub cost: u32,
    pub plan: Option<String>,
    pub want: Option<u32>,
    /// Every request of the rule is checked at the store: no single flight
    /// (each request's item asks for its own cost), no refill ahead.
    pub exact: bool,
    /// Tokens a request already spent before the answer (a cold start): the
    /// grant pays them first.
    pub prepaid: u32,
    /// The local pass marked the key's call in flight in its slot, in the
    /// write of its miss: the call is not marked again when it is queued.
    pub marked: bool,
}

impl Item {
    /// The name of the item's rule.
    pub fn rule_name(&self) -> &str {
        self.rules
            .rules()
            .get(self.rule)
            .map_or("", |r| r.name.as_str())
    }

    /// The item as the wire's lease item (a copy of each field).
    pub fn lease(&self) -> LeaseItem {
        LeaseItem {
            rule: self.rule_name().to_string(),
            key: self.key.clone(),
            cost: self.cost,
            plan: self.plan.clone(),
            want: self.want,
        }
    }
}

/// What a call carries of the item (`meshlimit_core::wire::lease_request_json`).
impl LeaseFields for Item {
    fn rule(&self) -> &str {
        self.rule_name()
    }

    fn key(&self) -> &DescriptorKey {
        &self.key
    }

    fn cost(&self) -> u32 {
        self.cost
    }

    fn plan(&self) -> Option<&str> {
        self.plan.as_deref()
    }

    fn want(&self) -> Option<u32> {
        self.want
    }
}

#[cfg(test)]
impl Item {
    /// An item of the rule named `rule` in `rules`, asking for 2 tokens.
    pub(crate) fn of(
        rules: &Rc<RuleSet>,
        rule: &str,
        key: DescriptorKey,
        plan: Option<&str>,
        want: Option<u32>,
    ) -> Item {
        Item {
            fingerprint: 1,
            rules: Rc::clone(rules),
            rule: rules.rules().iter().position(|r| r.name == rule).unwrap(),
            key,
            cost: 2,
            plan: plan.map(str::to_string),
            want,
            exact: false,
            prepaid: 0,
            marked: false,
        }
    }
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Item")
            .field("fingerprint", &self.fingerprint)
            .field("rule", &self.rule_name())
            .field("key", &self.key)
            .field("cost", &self.cost)
            .field("plan", &self.plan)
            .field("want", &self.want)
            .field("exact", &self.exact)
            .field("prepaid", &self.prepaid)
            .field("marked", &self.marked)
            .finish()
    }
}

/// What an agent answer (or its absence) did for one key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyResult {
    /// The slot holds the agent's grant or denial: the key's waiting requests
    /// decide from it (where the agent found it, when it said).
    Answered(Option<AnsweredFrom>),
    /// The agent's own fail-local bucket denied (its store is down).
    AgentLocalDeny { retry_after_ns: u64 },
    /// No answer (call failed, agent unavailable, agent's fail-local grant):
    /// the rule's failure policy decides.
    Failed,
}

struct Check {
    rule: usize,
    key: DescriptorKey,
    fingerprint: u64,
    limit: Limit,
    plan: Option<String>,
    cost: u32,
    want: Option<u32>,
    state: State,
    /// Where the decision was made, once decided.
    source: DecisionSource,
    /// The slice of the key's lease the local pass took for this worker, to keep.
    slice: Option<crate::slices::Slice>,
    /// The local pass marked the key's call in flight with its miss
    /// ([`Item::marked`]), until the call is queued.
    marked: bool,
}

impl Check {
    /// A lease call item for this check's key, of its rule in `rules`:
    /// asking for `cost` (the request's own, or 1 for a refill ahead), of
    /// which `prepaid` a request already spent (a cold start), and for its
    /// `want`.
    fn item(&self, rules: &Rc<RuleSet>, cost: u32, prepaid: u32) -> Item {
        let exact = rules
            .rules()
            .get(self.rule)
            .is_some_and(|r| r.accuracy == Accuracy::Exact);
        Item {
            fingerprint: self.fingerprint,
            rules: Rc::clone(rules),
            rule: self.rule,
            key: self.key.clone(),
            cost,
            plan: self.plan.clone(),
            want: self.want,
            exact,
            prepaid,
            marked: self.marked,
        }
    }
}

/// One rule's decision as the decision log sees it.
pub struct Logged<'e> {
    pub rule: &'e Rule,
    pub key: &'e DescriptorKey,
    pub verdict: RuleVerdict,
    pub outcome: Outcome,
    pub source: DecisionSource,
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Decided; `failure` names the policy that decided, if one did.
    Decided {
        verdict: RuleVerdict,
        failure: Option<Outcome>,
    },
    /// Local state could not decide: the agent must be asked.
    Miss,
    /// Not evaluated: an enforcing rule had already rejected the request.
    Skipped,
}

impl Evaluation {
    /// The rules that apply to `req`, strictest first; `None` when none do, an
    /// error when the request is ambiguous (a key header sent twice).
    pub fn new(
        rules: Rc<RuleSet>,
        req: &RequestInfo,
        cfg: &FilterConfig,
    ) -> Result<Option<Self>, RequestError> {
        let mut checks = SmallVec::new();
        rules.each_applicable(req, |a| {
            checks.push(Check {
                // The rule's position, not a search of the set by address.
                rule: a.index,
                fingerprint: cfg.slot_hasher.fingerprint(&a.key),
                key: a.key,
                limit: a.limit,
                plan: a.plan.map(str::to_string),
                cost: a.rule.cost.get(),
                want: None,
                state: State::Miss,
                source: DecisionSource::FailurePolicy,
                slice: None,
                marked: false,
            })
        })?;
        Ok((!checks.is_empty()).then_some(Self {
            rules,
            checks,
            refills: Vec::new(),
            rounds: 0,
            decided_at_ns: req.now_ns,
            slicing: false,
        }))
    }

    /// The refills the local pass started, for the VM's next lease call.
    pub fn take_refills(&mut self) -> Vec<Item> {
        std::mem::take(&mut self.refills)
    }

    /// True while some rule waits for the agent.
    pub fn has_misses(&self) -> bool {
        self.misses().next().is_some()
    }

    /// The lease call items for every key local state could not decide.
    pub fn miss_items(&self) -> Vec<Item> {
        self.each_miss_item().collect()
    }

    /// [`Evaluation::miss_items`] one at a time, for a caller that moves
    /// each where it goes (no list of them is allocated).
    pub fn each_miss_item(&self) -> impl Iterator<Item = Item> + '_ {
        self.misses().map(|i| {
            let c = &self.checks[i];
            c.item(&self.rules, c.cost, 0)
        })
    }

    /// Forgets the call marks of the local pass ([`Item::marked`]) once its
    /// calls are queued: a call made again for a key is marked again.
    pub fn forget_marks(&mut self) {
        for c in &mut self.checks {
            c.marked = false;
        }
    }

    /// The fingerprints of the keys still undecided.
    pub fn miss_fingerprints(&self) -> Vec<u64> {
        self.misses().map(|i| self.checks[i].fingerprint).collect()
    }

    /// The lease request for every key local state could not decide (one
    /// request's own call; the VM's batched calls go through `Flights`).
    pub fn lease_request(&self) -> LeaseRequest {
        LeaseRequest {
            v: WIRE_VERSION,
            rules_version: self.rules.version().to_string(),
            items: self.each_miss_item().map(|i| i.lease()).collect(),
        }
    }

    /// Applies the answers to this request's own call (in the order of
    /// `lease_request`'s items): each fills its key's slot, and the request
    /// takes from it in the same write, then decides. A missing answer takes
    /// the failure policy.
    pub fn apply_answers<H: Host>(
        &mut self,
        host: &H,
        cfg: &FilterConfig,
        answers: Vec<LeaseAnswer>,
    ) {
        let items = self.miss_items();
        let mut answers = answers.into_iter();
        for item in items {
            let mut takes = Takes::new();
            let applied = apply_answer(host, cfg, &item, answers.next(), |s, now| {
                takes.clear();
                self.take_answered(s, now, item.fingerprint, &mut takes);
            });
            self.resolve(host, cfg, item.fingerprint, applied, takes);
        }
    }

    /// Takes, from the answered slot `s` of the key `fingerprint`, what each
    /// of this request's undecided rules of that key costs (their demand was
    /// counted by the first check), in the order [`Evaluation::resolve`]
    /// reads them.
    pub fn take_answered(
        &self,
        s: &mut SlotState,
        now_ns: u64,
        fingerprint: u64,
        takes: &mut Takes,
    ) {
        for i in self.misses() {
            let c = &self.checks[i];
            if c.fingerprint == fingerprint {
                takes.push(s.take_answered(now_ns, c.cost));
            }
        }
    }

    /// How many of this request's undecided rules are of the key
    /// `fingerprint`: the takes [`Evaluation::take_answered`] makes for it.
    pub fn waits_on(&self, fingerprint: u64) -> usize {
        self.misses()
            .filter(|i| self.checks[*i].fingerprint == fingerprint)
            .count()
    }

    /// Decides the undecided rules of the key `fingerprint` from what its
    /// answer did ([`apply_answer`]). After [`KeyResult::Answered`] each
    /// rule decides by its take from the answered slot (`takes`, from
    /// [`Evaluation::take_answered`] in the answer's write); one that found
    /// nothing there (another request took the grant) stays undecided for
    /// another call.
    pub fn resolve<H: Host>(
        &mut self,
        host: &H,
        cfg: &FilterConfig,
        fingerprint: u64,
        applied: Applied,
        takes: impl IntoIterator<Item = LocalCheck>,
    ) {
        let now = applied.now_ns;
        self.decided_at_ns = now;
        let mut takes = takes.into_iter();
        // Each check's state is read at its turn: deciding one changes no
        // other, so these are the checks undecided when the answer came.
        for i in 0..self.checks.len() {
            let c = &self.checks[i];
            if c.state != State::Miss || c.fingerprint != fingerprint {
                continue;
            }
            let mut source = DecisionSource::FailurePolicy;
            let state = match applied.result {
                KeyResult::Answered(from) => {
                    source = match from {
                        Some(AnsweredFrom::Pool) => DecisionSource::AgentPool,
                        Some(AnsweredFrom::Store) => DecisionSource::Store,
                        None => DecisionSource::Agent,
                    };
                    // The takes made in the answer's write, once it was
                    // stored; else each takes in a write of its own, as
                    // when the answer's write lost every race.
                    let local = match applied.written {
                        true => takes.next(),
                        false => {
                            let c = &self.checks[i];
                            slots::update(host, now, c.fingerprint, cfg.slots, |s| {
                                s.take_answered(now, c.cost)
                            })
                        }
                    };
                    match local {
                        Some(
                            LocalCheck::Denied { retry_after_ns }
                            | LocalCheck::Held { retry_after_ns, .. },
                        ) => decided(RuleVerdict::Deny { retry_after_ns }),
                        Some(LocalCheck::Taken {
                            remaining,
                            reset_ns,
                            ..
                        }) => decided(RuleVerdict::Allow {
                            remaining,
                            reset_ns,
                        }),
                        // No slot to hold the grant (another key's fail-local
                        // bucket has it): the policy decides, as on failure.
                        None => self.failure_state(host, cfg, i, now),
                        Some(LocalCheck::Miss { .. }) => State::Miss,
                    }
                }
                KeyResult::AgentLocalDeny { retry_after_ns } => {
                    source = DecisionSource::AgentLocal;
                    State::Decided {
                        verdict: RuleVerdict::Deny { retry_after_ns },
                        failure: Some(Outcome::FailedLocal),
                    }
                }
                KeyResult::Failed => self.failure_state(host, cfg, i, now),
            };
            if let State::Decided { failure, .. } = state {
                // A grant with no slot to hold it is the failure policy's.
                self.checks[i].source = match failure {
                    Some(_) if source != DecisionSource::AgentLocal => {
                        DecisionSource::FailurePolicy
                    }
                    _ => source,
                };
            }
            self.checks[i].state = state;
        }
    }

    /// The request's verdict, for the tests (the filter and the simulator
    /// decide from the results they count, computed once).
    #[cfg(test)]
    pub fn verdict(&self) -> meshlimit_core::Verdict<'_> {
        meshlimit_core::decision::decide(&self.results())
    }

    /// Each decided rule's result, for counting.
    pub fn results(&self) -> SmallVec<[RuleResult<'_>; INLINE_RULES]> {
        self.checks.iter().filter_map(|c| self.result(c)).collect()
    }

    /// Each decided rule's decision, its key and where it was made, for the
    /// decision log.
    pub fn logged(&self) -> impl Iterator<Item = Logged<'_>> + '_ {
        self.checks.iter().filter_map(|c| {
            let result = self.result(c)?;
            Some(Logged {
                rule: &self.rules.rules()[c.rule],
                key: &c.key,
                verdict: result.verdict,
                outcome: result.outcome(),
                source: c.source,
            })
        })
    }

    /// A decided check's result (`None`: undecided or skipped).
    fn result(&self, c: &Check) -> Option<RuleResult<'_>> {
        let State::Decided { verdict, failure } = c.state else {
            return None;
        };
        let rule = &self.rules.rules()[c.rule];
        Some(RuleResult {
            rule: &rule.name,
            mode: rule.mode,
            limit: c.limit,
            verdict,
            failure,
            quota_unknown: c.source == DecisionSource::ColdStart,
        })
    }

    /// The key this evaluation formed for the decided rule named `rule`.
    pub fn key_of(&self, rule: &str) -> Option<(&DescriptorKey, u64)> {
        self.checks
            .iter()
            .find(|c| {
                matches!(c.state, State::Decided { .. })
                    && crate::decided::same_name(&self.rules.rules()[c.rule].name, rule)
            })
            .map(|c| (&c.key, c.fingerprint))
    }

    /// The rules version this evaluation decides by.
    pub fn rules_version(&self) -> &str {
        self.rules.version()
    }

    fn misses(&self) -> impl Iterator<Item = usize> + '_ {
        self.checks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.state == State::Miss)
            .map(|(i, _)| i)
    }

    fn rule(&self, i: usize) -> &Rule {
        // Indices come from this rule set, which the evaluation holds.
        &self.rules.rules()[self.checks[i].rule]
    }
}

fn decided(verdict: RuleVerdict) -> State {
    State::Decided {
        verdict,
        failure: None,
    }
}

mod answer;
mod failure;
mod local;
pub use answer::{apply_answer, Applied};
pub use local::{CallMark, LocalStep};

#[cfg(test)]
mod tests;
