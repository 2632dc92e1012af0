//! What a store keeps per key: a token bucket or a window's counts, by the
//! limit's [`Algorithm`]. One type for the agent's embedded store, `replay` and
//! the simulator's judge, so each runs the same reference maths.

use serde::{Deserialize, Serialize};

use crate::bucket::{Bucket, Take};
use crate::limit::{Algorithm, Limit};
use crate::window::Window;

/// A key's state under its limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Counter {
    Bucket(Bucket),
    Window(Window),
}

impl Counter {
    /// An unseen key: a full bucket, or a window with nothing counted.
    pub fn fresh(limit: &Limit, now_ns: u64) -> Self {
        match limit.algorithm() {
            Algorithm::TokenBucket => Counter::Bucket(Bucket::full(limit, now_ns)),
            Algorithm::FixedWindow | Algorithm::SlidingWindow => Counter::Window(Window::empty()),
        }
    }

    /// Takes between `min` and `max` (see [`Bucket::take`], [`Window::take`]). A
    /// state of the other kind (the rule changed algorithm) starts fresh, as an
    /// unseen key would.
    pub fn take(&mut self, limit: &Limit, now_ns: u64, min: u32, max: u32) -> Take {
        if !self.fits(limit) {
            *self = Counter::fresh(limit, now_ns);
        }
        match self {
            Counter::Bucket(b) => b.take(limit, now_ns, min, max),
            Counter::Window(w) => w.take(limit, now_ns, min, max),
        }
    }

    /// True when the state is what an unseen key starts as (a full bucket, a
    /// window with nothing left weighing on the limit): a store may forget it
    /// without granting anything extra.
    pub fn is_idle(&self, limit: &Limit, now_ns: u64) -> bool {
        match self {
            _ if !self.fits(limit) => true,
            Counter::Bucket(b) => b.is_full(limit, now_ns),
            Counter::Window(w) => w.is_idle(limit, now_ns),
        }
    }

    fn fits(&self, limit: &Limit) -> bool {
        matches!(
            (self, limit.algorithm().is_window()),
            (Counter::Bucket(_), false) | (Counter::Window(_), true)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::limit;
    use crate::NANOS_PER_SEC;

    #[test]
    fn each_algorithm_gets_its_own_state_and_a_change_of_algorithm_starts_fresh() {
        let bucket = limit(2, NANOS_PER_SEC, 2);
        let fixed = bucket.with_algorithm(Algorithm::FixedWindow);
        let mut c = Counter::fresh(&bucket, 0);
        assert!(matches!(c, Counter::Bucket(_)));
        assert!(matches!(
            c.take(&bucket, 0, 2, 2),
            Take::Granted { tokens: 2, .. }
        ));
        assert!(matches!(c.take(&bucket, 0, 1, 1), Take::Denied { .. }));
        assert!(!c.is_idle(&bucket, 0));
        // The rule now counts a fixed window: the drained bucket is not carried over.
        assert!(c.is_idle(&fixed, 0));
        assert!(matches!(
            c.take(&fixed, 0, 1, 1),
            Take::Granted { tokens: 1, .. }
        ));
        assert!(matches!(c, Counter::Window(_)));
        assert!(!c.is_idle(&fixed, 0));
        assert!(c.is_idle(&fixed, NANOS_PER_SEC));
    }
}
