//! A worker's allowance of something a second: a bucket of `per_second`
//! tokens, full to begin with, in the VM's own memory. Two use it:
//!
//! - **Cold starts**: requests admitted at once, before the agent answers,
//!   because their rule says `cold_start: admit` and this Envoy held nothing
//!   for their key. The allowance bounds what such requests can cost a limit,
//!   whatever the key churn: at most the filter's `cold_starts_per_second` a
//!   worker. Past it, a cold key's request waits for the agent like any miss.
//! - **Usage answers**: the usage path reads shared data for each limit it
//!   lists; at most `usage_per_second` answers a worker bound what callers
//!   can make the filter do there (past it, a 429).

use std::num::{NonZeroU32, NonZeroU64};

use meshlimit_core::bucket::{Bucket, Take};
use meshlimit_core::{Limit, NANOS_PER_SEC};

#[derive(Debug, Default)]
pub struct Allowance {
    /// Created on the first take; `None` reads as full.
    bucket: Option<Bucket>,
}

impl Allowance {
    /// Whether one more is allowed at `now_ns` (taking nothing).
    pub fn available(&self, per_second: u32, now_ns: u64) -> bool {
        match (allowance(per_second), &self.bucket) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(limit), Some(b)) => b.tokens_at(&limit, now_ns) >= 1.0,
        }
    }

    /// Counts one.
    pub fn take(&mut self, per_second: u32, now_ns: u64) {
        let Some(limit) = allowance(per_second) else {
            return;
        };
        let bucket = self
            .bucket
            .get_or_insert_with(|| Bucket::full(&limit, now_ns));
        let _: Take = bucket.take(&limit, now_ns, 1, 1);
    }
}

/// `per_second` a second, as many at once; `None` for 0 (off).
fn allowance(per_second: u32) -> Option<Limit> {
    let n = NonZeroU32::new(per_second)?;
    let per = NonZeroU64::new(NANOS_PER_SEC)?;
    Some(Limit::new(n, per, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowance_is_a_bucket_of_that_many_a_second() {
        let mut c = Allowance::default();
        for _ in 0..3 {
            assert!(c.available(3, 0));
            c.take(3, 0);
        }
        assert!(!c.available(3, 0), "three a second, three at once");
        assert!(!c.available(3, NANOS_PER_SEC / 4));
        assert!(
            c.available(3, NANOS_PER_SEC / 3 + 1),
            "one back after a third of a second"
        );
    }

    #[test]
    fn zero_turns_cold_starts_off() {
        let c = Allowance::default();
        assert!(!c.available(0, 0));
    }
}
