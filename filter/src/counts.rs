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
