//! This VM's decision counts: Envoy stats (so Envoy's own /stats shows the
//! filter's decisions) and the tally reported to the agent at the next sync.
//! Each VM is single-threaded, so plain maps suffice; nothing here touches shared
//! data on the request path.

use meshlimit_core::wire::DecisionCount;
use meshlimit_core::Outcome;

use crate::fast_map::FastMap;
use crate::host::{Metric, Proxy};

/// Counts kept by one VM.
#[derive(Default)]
pub struct Counts {
    /// By rule name, each outcome seen.
    rules: FastMap<String, Vec<Tally>>,
}

/// One rule's outcome: its Envoy counter and what the agent has not heard of.
struct Tally {
    outcome: Outcome,
    /// The Envoy counter, once defined (`Some(None)`: the host refused it).
    metric: Option<Option<u32>>,
    unreported: u64,
}

impl Counts {
    /// Counts one decision of `rule`. Once the rule was counted, its entry is
    /// found by the name the request holds: nothing is allocated.
    pub fn record<P: Proxy>(&mut self, host: &P, rule: &str, outcome: Outcome) {
        if let Some(tallies) = self.rules.get_mut(rule) {
            count(host, rule, tallies, outcome);
            return;
        }
        let mut tallies = Vec::new();
        count(host, rule, &mut tallies, outcome);
        self.rules.insert(rule.to_string(), tallies);
    }

    /// Takes the counts not yet reported, for a sync request.
    pub fn take_unreported(&mut self) -> Vec<DecisionCount> {
        let mut out = Vec::new();
        for (rule, tallies) in &mut self.rules {
            for t in tallies.iter_mut().filter(|t| t.unreported > 0) {
                out.push(DecisionCount {
                    rule: rule.clone(),
                    outcome: t.outcome,
                    count: std::mem::take(&mut t.unreported),
                });
            }
        }
        out
    }

    /// Puts back counts whose sync failed, so the agent still hears of them.
    pub fn restore(&mut self, counts: Vec<DecisionCount>) {
        for c in counts {
            let tallies = self.rules.entry(c.rule).or_default();
            tally(tallies, c.outcome).unreported += c.count;
        }
    }
}

/// Counts one decision of `rule` among its `tallies`: in Envoy (its counter
/// defined on the outcome's first decision) and for the agent.
fn count<P: Proxy>(host: &P, rule: &str, tallies: &mut Vec<Tally>, outcome: Outcome) {
    let tally = tally(tallies, outcome);
    let id = *tally.metric.get_or_insert_with(|| {
        host.define_metric(
            Metric::Counter,
            &format!("meshlimit.rule.{rule}.{}", outcome.as_str()),
        )
    });
    if let Some(id) = id {
        host.increment(id, 1);
    }
    tally.unreported += 1;
}

/// The tally of `outcome` among a rule's, added if new.
fn tally(tallies: &mut Vec<Tally>, outcome: Outcome) -> &mut Tally {
    let at = match tallies.iter().position(|t| t.outcome == outcome) {
        Some(at) => at,
        None => {
            tallies.push(Tally {
                outcome,
                metric: None,
                unreported: 0,
            });
            tallies.len() - 1
        }
    };
    &mut tallies[at]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryHost;

    fn sorted(mut counts: Vec<DecisionCount>) -> Vec<(String, Outcome, u64)> {
        counts.sort_by(|a, b| (&a.rule, a.outcome.as_str()).cmp(&(&b.rule, b.outcome.as_str())));
        counts
            .into_iter()
            .map(|c| (c.rule, c.outcome, c.count))
            .collect()
    }

    #[test]
    fn decisions_are_counted_in_envoy_and_reported_to_the_agent_once() {
        let host = MemoryHost::default();
        let mut counts = Counts::default();
        for _ in 0..3 {
            counts.record(&host, "per-key", Outcome::Allowed);
        }
        counts.record(&host, "per-key", Outcome::Limited);
        assert_eq!(host.metric("meshlimit.rule.per-key.allowed"), Some(3));
        assert_eq!(host.metric("meshlimit.rule.per-key.limited"), Some(1));
        assert_eq!(
            sorted(counts.take_unreported()),
            [
                ("per-key".to_string(), Outcome::Allowed, 3),
                ("per-key".to_string(), Outcome::Limited, 1),
            ]
        );
        // Taken once: the next sync reports only what came since.
        assert!(counts.take_unreported().is_empty());
        counts.record(&host, "per-key", Outcome::Allowed);
        assert_eq!(
            sorted(counts.take_unreported()),
            [("per-key".to_string(), Outcome::Allowed, 1)]
        );
    }

    #[test]
    fn counts_of_a_failed_sync_are_put_back_and_added_to_the_new_ones() {
        let host = MemoryHost::default();
        let mut counts = Counts::default();
        counts.record(&host, "per-key", Outcome::Allowed);
        counts.record(&host, "per-key", Outcome::Allowed);
        let failed_sync = counts.take_unreported();
        counts.record(&host, "per-key", Outcome::Allowed);
        counts.restore(failed_sync);
        assert_eq!(
            sorted(counts.take_unreported()),
            [("per-key".to_string(), Outcome::Allowed, 3)]
        );
        // Envoy's own counter counted each decision once.
        assert_eq!(host.metric("meshlimit.rule.per-key.allowed"), Some(3));
    }
}
