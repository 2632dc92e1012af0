//! A new rules version compiled in slices between requests, so a VM swaps a set of
//! 20,000 rules without a request waiting on the swap.
//!
//! The root context fetches the rules as lines (`GET /v1/rules`, one rule a line)
//! when a sync says the agent runs another version, then compiles them a slice at
//! a time, each slice at most [`SLICE_NS`] of the worker's time, on a tick of
//! [`LOAD_TICK_MS`] while the load lasts: requests run between slices on the old
//! set, and the new one is swapped in whole once compiled. The trade-off: a new
//! version takes about twice its compile time to reach the VM (about 0.3 s for
//! 20,000 rules here) instead of once, and a VM that has no rules yet compiles
//! them at once (it has nothing to keep serving meanwhile).

use meshlimit_core::rules::lines::{LoadError, RulesLoad};
use meshlimit_core::RuleSet;

use crate::host::Host;

/// The most one slice of compiling may take of a worker's loop.
pub const SLICE_NS: u64 = 500_000;
/// The tick while a load is in progress: a slice each millisecond at most.
pub const LOAD_TICK_MS: u64 = 1;
/// Rules compiled between two looks at the clock (a rule takes a few µs).
const RULES_PER_LOOK: usize = 16;

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
        let version = RuleSet::compile(&config).unwrap().version().to_string();
        (encode(&config, &version), version)
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
        // Five looks of 16 rules a slice: 80 rules, so 13 slices for 1,000.
        assert_eq!(slices, 13);
        assert_eq!(set.rules().len(), 1_000);
        assert_eq!(set.version(), version);
        assert_eq!(back, body);
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
