//! Sick-node handling. A Redis node whose connection is lost (refused, reset:
//! a dead process) is marked down at once; one that times out several batches
//! in a row (a stalled process) is marked down after [`FAILURES_TO_DOWN`]. While
//! a node is down no lease waits on it: its keys take the rule's failure policy
//! at once, and a background probe (not a user's batch) finds when it answers
//! again. The other nodes' keys are untouched: health is per node.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// Consecutive failed (timed-out) batches that mark a node down.
pub(crate) const FAILURES_TO_DOWN: u32 = 3;
/// How often a down node is probed (PING, off the request path).
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Health of every node this store talks to.
#[derive(Debug, Default)]
pub(crate) struct Health {
    nodes: HashMap<String, NodeHealth>,
}

#[derive(Debug, Default, Clone, Copy)]
struct NodeHealth {
    failures: u32,
    down_since: Option<Instant>,
}

impl Health {
    /// True when `node` is down; its keys are not sent to it.
    pub(crate) fn is_down(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|h| h.down_since.is_some())
    }

    /// True when any node is down.
    pub(crate) fn any_down(&self) -> bool {
        self.nodes.values().any(|h| h.down_since.is_some())
    }

    /// A batch to `node` answered: it is healthy. Returns how long it was down,
    /// if it was.
    pub(crate) fn succeeded(&mut self, node: &str, now: Instant) -> Option<Duration> {
        self.nodes
            .remove(node)
            .and_then(|h| h.down_since)
            .map(|since| now.saturating_duration_since(since))
    }

    /// A batch to `node` failed; `lost` when its connection was lost (refused,
    /// reset), not merely slow. Returns true when this failure marks it down.
    pub(crate) fn failed(&mut self, node: &str, now: Instant, lost: bool) -> bool {
        let h = self.nodes.entry(node.to_string()).or_default();
        h.failures = h.failures.saturating_add(1);
        if h.down_since.is_none() && (lost || h.failures >= FAILURES_TO_DOWN) {
            h.down_since = Some(now);
            return true;
        }
        false
    }

    /// `node` left the hash slot map (replaced by a promoted replica): forgotten.
    /// Returns how long it was down, if it was.
    pub(crate) fn forget(&mut self, node: &str, now: Instant) -> Option<Duration> {
        self.succeeded(node, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_marks_a_node_down_at_once_and_timeouts_after_three() {
        let t0 = Instant::now();
        let mut h = Health::default();
        assert!(h.failed("dead", t0, true));
        assert!(h.is_down("dead"));
        assert!(!h.failed("dead", t0, true), "already down");
        assert!(!h.failed("slow", t0, false));
        assert!(!h.failed("slow", t0, false));
        assert!(!h.is_down("slow"));
        assert!(h.failed("slow", t0, false));
        assert!(h.is_down("slow") && !h.is_down("other"));
        let later = t0 + Duration::from_millis(300);
        assert_eq!(h.succeeded("slow", later), Some(Duration::from_millis(300)));
        assert!(!h.is_down("slow"));
        assert_eq!(h.forget("dead", later), Some(Duration::from_millis(300)));
        assert!(!h.any_down());
    }
}
