//! This VM's decision counts: Envoy stats (so Envoy's own /stats shows the
//! filter's decisions) and the tally reported to the agent at the next sync.
//! Each VM is single-threaded, so plain maps suffice; nothing here touches shared
//! data on the request path.

use std::collections::HashMap;

use meshlimit_core::wire::DecisionCount;
use meshlimit_core::Outcome;

use crate::host::{Metric, Proxy};

/// Counts kept by one VM.
#[derive(Default)]
pub struct Counts {
    metric_ids: HashMap<(String, Outcome), Option<u32>>,
    unreported: HashMap<(String, Outcome), u64>,
}

impl Counts {
    /// Counts one decision of `rule`.
    pub fn record<P: Proxy>(&mut self, host: &P, rule: &str, outcome: Outcome) {
        let key = (rule.to_string(), outcome);
        let id = *self.metric_ids.entry(key.clone()).or_insert_with(|| {
            host.define_metric(
                Metric::Counter,
                &format!("meshlimit.rule.{rule}.{}", outcome.as_str()),
            )
        });
        if let Some(id) = id {
            host.increment(id, 1);
        }
        *self.unreported.entry(key).or_default() += 1;
    }

    /// Takes the counts not yet reported, for a sync request.
    pub fn take_unreported(&mut self) -> Vec<DecisionCount> {
        self.unreported
            .drain()
            .map(|((rule, outcome), count)| DecisionCount {
                rule,
                outcome,
                count,
            })
            .collect()
    }

    /// Puts back counts whose sync failed, so the agent still hears of them.
    pub fn restore(&mut self, counts: Vec<DecisionCount>) {
        for c in counts {
            *self.unreported.entry((c.rule, c.outcome)).or_default() += c.count;
        }
    }
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
