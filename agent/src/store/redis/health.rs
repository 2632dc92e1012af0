//! Sick-node cool-down. A Redis node that fails several batches in a row (timeouts,
//! refused connections) is skipped for a short cool-down: its keys take the rule's
//! failure policy at once instead of each request waiting out a deadline. After the
//! cool-down one batch is let through to probe it (half-open).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// Consecutive failed batches that put a node in cool-down.
pub const FAILURES_TO_COOL: u32 = 3;
/// How long a sick node is skipped.
pub const COOL_DOWN: Duration = Duration::from_millis(250);

/// Health of every node this store talks to.
#[derive(Debug, Default)]
pub struct Health {
    nodes: HashMap<String, NodeHealth>,
}

#[derive(Debug, Default, Clone, Copy)]
struct NodeHealth {
    failures: u32,
    cool_until: Option<Instant>,
}

impl Health {
    /// True when `node` is cooling down at `now`; its keys are not sent to it.
    pub fn is_cooling(&self, node: &str, now: Instant) -> bool {
        self.nodes
            .get(node)
            .and_then(|h| h.cool_until)
            .is_some_and(|until| until > now)
    }

    /// A batch to `node` answered.
    pub fn succeeded(&mut self, node: &str) {
        self.nodes.remove(node);
    }

    /// A batch to `node` failed; returns true when this failure starts a cool-down.
    pub fn failed(&mut self, node: &str, now: Instant) -> bool {
        let h = self.nodes.entry(node.to_string()).or_default();
        h.failures += 1;
        // Past a cool-down, one failure (the probe) is enough to cool again.
        let probe_failed = h.cool_until.is_some_and(|until| until <= now);
        if h.failures >= FAILURES_TO_COOL || probe_failed {
            h.cool_until = Some(now + COOL_DOWN);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_failures_cool_a_node_and_a_failed_probe_cools_it_again() {
        let t0 = Instant::now();
        let mut h = Health::default();
        assert!(!h.failed("a", t0));
        assert!(!h.failed("a", t0));
        assert!(!h.is_cooling("a", t0));
        assert!(h.failed("a", t0));
        assert!(h.is_cooling("a", t0 + COOL_DOWN - Duration::from_millis(1)));
        assert!(!h.is_cooling("b", t0));
        // Cool-down over: the probe batch goes through and fails.
        let later = t0 + COOL_DOWN;
        assert!(!h.is_cooling("a", later));
        assert!(h.failed("a", later));
        assert!(h.is_cooling("a", later));
        h.succeeded("a");
        assert!(!h.is_cooling("a", later));
    }
}
