//! The keys rejected most, with bounded memory and bounded label cardinality:
//! the Space-Saving algorithm (Metwally et al.) over a fixed number of counters.
//! A key that enters by evicting the smallest counter inherits its count, so
//! counts are upper bounds and any key rejected more than total / capacity times
//! is sure to be present. Only the top ten become labels.

use std::collections::HashMap;

/// Counters kept; the top ten of them are exported.
pub(crate) const CAPACITY: usize = 64;
/// Keys exported as labels.
pub(crate) const EXPORTED: usize = 10;

/// Space-Saving counters of rejections by (rule, key).
#[derive(Debug, Default)]
pub(crate) struct TopKeys {
    counts: HashMap<(String, String), u64>,
}

impl TopKeys {
    /// Counts `n` rejections of `key` under `rule`.
    pub(crate) fn record(&mut self, rule: &str, key: &str, n: u64) {
        let id = (rule.to_string(), key.to_string());
        if let Some(c) = self.counts.get_mut(&id) {
            *c += n;
            return;
        }
        if self.counts.len() < CAPACITY {
            self.counts.insert(id, n);
            return;
        }
        let smallest = self
            .counts
            .iter()
            .min_by_key(|(_, c)| **c)
            .map(|(k, c)| (k.clone(), *c));
        if let Some((evicted, floor)) = smallest {
            self.counts.remove(&evicted);
            self.counts.insert(id, floor + n);
        }
    }

    /// The `EXPORTED` most rejected (rule, key, count), most first.
    pub(crate) fn top(&self) -> Vec<(String, String, u64)> {
        let mut all: Vec<_> = self
            .counts
            .iter()
            .map(|((r, k), c)| (r.clone(), k.clone(), *c))
            .collect();
        all.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
        all.truncate(EXPORTED);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_hitters_surface_among_many_keys() {
        let mut t = TopKeys::default();
        for i in 0..10_000u64 {
            t.record("r", &format!("noise-{i}"), 1);
            if i % 10 == 0 {
                t.record("r", "abuser", 1);
            }
        }
        let top = t.top();
        assert_eq!(top.len(), EXPORTED);
        assert_eq!(top[0].1, "abuser");
        assert!(top[0].2 >= 1_000);
        assert!(t.counts.len() <= CAPACITY);
    }
}
