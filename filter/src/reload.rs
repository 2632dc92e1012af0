//! A new rules version compiled in slices between requests, so a VM swaps a set of
//! 20,000 rules without a request waiting on the swap.
//!
//! The root context fetches the rules as lines (`GET /v1/rules`, one rule a line)
//! when a sync says the agent runs another version, then compiles them a slice at
//! a time, each slice at most [`SLICE_NS`] of the worker's time, on a tick of
//! [`LOAD_TICK_MS`] while the load lasts: requests run between slices on the old
//! set, and the new one is swapped in whole once compiled. The trade-off: a new
//! version takes about twice its compile time to reach the VM (a fraction of a
//! second for 20,000 rules) instead of once, and a VM that has no rules yet compiles
//! them at once (it has nothing to keep serving meanwhile).

use std::rc::Rc;

use meshlimit_core::rules::lines::{LoadError, RulesLoad};
use meshlimit_core::RuleSet;

use crate::host::Host;

/// The most one slice of compiling may take of a worker's loop.
pub const SLICE_NS: u64 = 500_000;
/// The tick while a load is in progress: a slice each millisecond at most.
pub const LOAD_TICK_MS: u64 = 1;
/// Rules compiled between two looks at the clock (a rule takes a few µs).
const RULES_PER_LOOK: usize = 16;

/// Rules freed a tick from a set no request uses any more: a small part of a
/// millisecond of a worker's time, where freeing 20,000 at once takes a few ms.
pub const SHED_RULES: usize = 1_000;

/// Sets replaced by a newer version, freed a slice at a time once the last
/// request that started on them is done: dropped whole, 20,000 rules would take
/// a worker several milliseconds.
#[derive(Default)]
pub struct Retired {
    sets: Vec<Rc<RuleSet>>,
}

impl Retired {
    pub fn push(&mut self, set: Rc<RuleSet>) {
        self.sets.push(set);
    }

    /// Frees up to `rules` rules of the sets nothing else holds; true when
    /// none is left to free.
    pub fn shed(&mut self, rules: usize) -> bool {
        self.sets
            .retain_mut(|set| Rc::get_mut(set).is_none_or(|set| !set.shed(rules)));
        self.sets.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// Whether a set can be freed now: none is held by a request (a long
    /// stream keeps the set it started on until it ends, and a retired set
    /// waits for it without a fast tick).
    pub fn can_shed(&self) -> bool {
        self.sets
            .iter()
            .any(|set| Rc::strong_count(set) == 1 && Rc::weak_count(set) == 0)
    }
}

/// Where a load stands after a slice.
pub enum Slice {
    /// More to compile; call again on the next tick.
    Working,
    /// The set, and the lines to hand to the VMs that start later.
    Done(Box<RuleSet>, Vec<u8>),
    /// The lines were refused; the VM keeps its rules.
    Failed(LoadError),
}

/// One version being loaded.
pub struct Loading {
    load: Option<RulesLoad>,
    version: String,
}

impl Loading {
    pub fn start(lines: Vec<u8>) -> Result<Self, LoadError> {
        let load = RulesLoad::start(lines)?;
        Ok(Self {
            version: load.version().to_string(),
            load: Some(load),
        })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// Compiles for at most `budget_ns` of `host`'s clock (and at least
    /// [`RULES_PER_LOOK`] rules, so a load always moves), and finishes the set
    /// once every rule is compiled.
    pub fn slice(&mut self, host: &impl Host, budget_ns: u64) -> Slice {
        let Some(load) = self.load.as_mut() else {
            return Slice::Working;
        };
        let start = host.now_ns();
        loop {
            match load.step(RULES_PER_LOOK) {
                Err(e) => return Slice::Failed(e),
                Ok(true) => break,
                Ok(false) if host.now_ns().saturating_sub(start) >= budget_ns => {
                    return Slice::Working
                }
                Ok(false) => {}
            }
        }
        match self.load.take().map(RulesLoad::finish) {
            Some(Ok((set, lines))) => Slice::Done(Box::new(set), lines),
            Some(Err(e)) => Slice::Failed(e),
            None => Slice::Working,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryHost;
    use meshlimit_core::rules::lines::encode;
    use meshlimit_core::rules::RulesConfig;

    fn lines(n: usize) -> (Vec<u8>, String) {
        let rules: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "name": format!("r-{i}"),
                    "match": {"path_prefix": format!("/api/{i}/")},
                    "key": [{"header": "x-api-key"}],
                    "limit": {"requests": 10, "per": "1s"},
                })
            })
            .collect();
        let config: RulesConfig =
            serde_json::from_value(serde_json::json!({"version": 1, "rules": rules})).unwrap();
        let set = RuleSet::compile(&config).unwrap();
        (encode(&set).unwrap(), set.version().to_string())
    }

    #[test]
    fn a_large_set_is_compiled_in_slices_each_within_its_budget() {
        let (body, version) = lines(1_000);
        // The clock moves 10 µs at every look: a slice's budget is a number of looks.
        let host = MemoryHost::ticking(10_000);
        let mut loading = Loading::start(body.clone()).unwrap();
        assert_eq!(loading.version(), version);
        // 50 µs a slice: the first look starts it, every 16 rules one more.
        let mut slices = 0;
        let (set, back) = loop {
            slices += 1;
            match loading.slice(&host, 50_000) {
                Slice::Working => {}
                Slice::Done(set, back) => break (set, back),
                Slice::Failed(e) => panic!("{e}"),
            }
        };
        // Five steps a slice (16 rules each while lines are left, then one step
        // of finishing the set each): 12 slices read 960 rules; the 13th reads
        // the last 40, checks their order and sorts their paths; the 14th
        // indexes them and sorts and keeps their names.
        assert_eq!(slices, 14);
        assert_eq!(set.rules().len(), 1_000);
        assert_eq!(set.version(), version);
        assert_eq!(back, body);
    }

    #[test]
    fn a_retired_set_is_freed_in_slices_once_no_request_holds_it() {
        let (body, _) = lines(2_500);
        let (set, _) = RulesLoad::run(body).unwrap();
        let set = Rc::new(set);
        let request = Rc::clone(&set);
        let mut retired = Retired::default();
        retired.push(set);
        assert!(!retired.can_shed());
        assert!(!retired.shed(SHED_RULES), "a request still runs on it");
        assert_eq!(request.rules().len(), 2_500, "untouched while in use");
        drop(request);
        assert!(retired.can_shed());
        let mut ticks = 1;
        while !retired.shed(SHED_RULES) {
            ticks += 1;
        }
        // 1,000 rules a tick for three ticks, then the index and the rest.
        assert_eq!(ticks, 4);
        assert!(retired.is_empty());
    }

    #[test]
    fn a_set_with_time_to_spare_is_done_in_one_slice() {
        let (body, _) = lines(40);
        let mut loading = Loading::start(body).unwrap();
        assert!(matches!(
            loading.slice(&MemoryHost::default(), SLICE_NS),
            Slice::Done(..)
        ));
    }

    #[test]
    fn a_broken_line_fails_the_load() {
        let (body, _) = lines(40);
        let mut text = String::from_utf8(body).unwrap();
        text.push_str("\n{");
        let mut loading = Loading::start(text.into_bytes()).unwrap();
        assert!(matches!(
            loading.slice(&MemoryHost::default(), SLICE_NS),
            Slice::Failed(LoadError::Rule { line: 42, .. })
        ));
    }
}
