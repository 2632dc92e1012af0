//! Sick-node handling. A Redis node whose connection is lost (refused, reset:
//! a dead process) is marked down at once; one that times out batch after
//! batch (a stalled process) is marked down once it has answered none for
//! [`SILENT_TO_DOWN`], and at least [`FAILURES_TO_DOWN`] batches. A busy
//! machine makes a few batches miss their deadline, not a node silent for a
//! second: a slow batch answers its own items with their failure policies and
//! marks nothing. While a node is down no lease waits on it: its keys take the
//! rule's failure policy at once, and a background probe (not a user's batch)
//! finds when it answers again. The other nodes' keys are untouched: health is
//! per node.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// Consecutive failed (timed-out) batches that mark a node down, with
/// [`SILENT_TO_DOWN`].
pub(crate) const FAILURES_TO_DOWN: u32 = 3;
/// How long a node's batches must all have timed out, none answered, before
/// it is marked down. The trade-off: for this long a stalled node's batches
/// each wait their deadline (the store deadline, 3 ms by default) before their
/// failure policies answer, rather than at once.
pub(crate) const SILENT_TO_DOWN: Duration = Duration::from_secs(1);
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
    /// The first of the failures in a row.
    failing_since: Option<Instant>,
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
        let since = *h.failing_since.get_or_insert(now);
        let silent = h.failures >= FAILURES_TO_DOWN
            && now.saturating_duration_since(since) >= SILENT_TO_DOWN;
        if h.down_since.is_none() && (lost || silent) {
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
    fn a_lost_connection_marks_a_node_down_at_once_and_timeouts_after_a_silent_second() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut h = Health::default();
        assert!(h.failed("dead", t0, true));
        assert!(h.is_down("dead"));
        assert!(!h.failed("dead", t0, true), "already down");
        // A busy machine: a run of batches past their deadline, then one
        // answered. Nothing is marked down, and the run starts over.
        for i in 0..10 {
            assert!(!h.failed("busy", t0 + ms(i * 50), false));
        }
        assert_eq!(h.succeeded("busy", t0 + ms(500)), None);
        assert!(!h.failed("busy", t0 + ms(1_100), false), "a new run");
        assert!(!h.is_down("busy"));
        // A stalled node: every batch for a second times out.
        assert!(!h.failed("slow", t0, false));
        assert!(!h.failed("slow", t0 + ms(400), false));
        assert!(!h.failed("slow", t0 + ms(800), false));
        assert!(!h.is_down("slow"), "three batches, not yet a second");
        assert!(h.failed("slow", t0 + SILENT_TO_DOWN, false));
        assert!(h.is_down("slow") && !h.is_down("other"));
        let later = t0 + SILENT_TO_DOWN + ms(300);
        assert_eq!(h.succeeded("slow", later), Some(ms(300)));
        assert!(!h.is_down("slow"));
        assert_eq!(h.forget("dead", later), Some(SILENT_TO_DOWN + ms(300)));
        assert!(!h.any_down());
    }
}
