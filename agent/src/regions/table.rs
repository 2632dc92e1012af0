//! The shares a region enforces, as its rebalancer published them and its agents
//! cache them: per descriptor key, the region's share and the key's demand over
//! every region in that period (which ranks keys for the bounded metrics).

use std::collections::{BTreeMap, HashMap};

use meshlimit_core::DescriptorKey;

/// One key's published entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    /// The region's share of the limit, 0 to 1.
    pub share: f64,
    /// Tokens offered for the key in the period, summed over every region.
    pub demand: f64,
}

/// A region's shares for one period.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareTable {
    /// The period (wall clock second) whose demand they follow; `None` before the
    /// first read.
    pub(crate) period: Option<u64>,
    entries: HashMap<String, Entry>,
}

/// Per rule: keys with a published share and their mean share.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct RuleSummary {
    pub(crate) keys: usize,
    pub(crate) mean_share: f64,
}

impl Entry {
    /// The value stored in the shares hash: `"<share> <demand>"` (shortest
    /// round-trip decimal forms, so every region reads back the exact float).
    pub(crate) fn encode(&self) -> String {
        format!("{} {}", self.share, self.demand)
    }

    /// Reads a stored value; `None` when it is not two numbers with a share in 0..=1.
    pub(crate) fn decode(text: &str) -> Option<Entry> {
        let (share, demand) = text.split_once(' ')?;
        let share: f64 = share.parse().ok()?;
        let demand: f64 = demand.parse().ok()?;
        ((0.0..=1.0).contains(&share) && demand.is_finite()).then_some(Entry { share, demand })
    }
}

impl ShareTable {
    pub fn new(period: Option<u64>, entries: HashMap<String, Entry>) -> Self {
        Self { period, entries }
    }

    /// Builds a table from stored `(key, value)` fields; unreadable values are
    /// skipped (the key then takes the floor).
    pub(crate) fn from_fields(
        period: Option<u64>,
        fields: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        let entries = fields
            .into_iter()
            .filter_map(|(k, v)| Entry::decode(&v).map(|e| (k, e)))
            .collect();
        Self { period, entries }
    }

    pub(crate) fn get(&self, key: &str) -> Option<Entry> {
        self.entries.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys and mean share per rule (the key's rule name prefix).
    pub(crate) fn by_rule(&self) -> BTreeMap<String, RuleSummary> {
        let mut out: BTreeMap<String, RuleSummary> = BTreeMap::new();
        for (key, e) in &self.entries {
            let rule = DescriptorKey::from_wire(key.clone()).rule().to_string();
            let s = out.entry(rule).or_default();
            s.mean_share += e.share;
            s.keys += 1;
        }
        for s in out.values_mut() {
            s.mean_share /= s.keys.max(1) as f64;
        }
        out
    }

    /// The `n` keys with the most demand over all regions, most first.
    pub(crate) fn top(&self, n: usize) -> Vec<(&str, Entry)> {
        let mut all: Vec<(&str, Entry)> =
            self.entries.iter().map(|(k, e)| (k.as_str(), *e)).collect();
        all.sort_by(|a, b| b.1.demand.total_cmp(&a.1.demand).then(a.0.cmp(b.0)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_exactly_and_bad_ones_are_refused() {
        let e = Entry {
            share: 0.1 + 0.7 * (2.0 / 3.0),
            demand: 1234.5,
        };
        assert_eq!(Entry::decode(&e.encode()), Some(e));
        for bad in ["", "0.5", "1.5 3", "x 3", "0.5 inf", "-0.1 2"] {
            assert_eq!(Entry::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn summaries_and_top_keys() {
        let t = ShareTable::from_fields(
            Some(9),
            [
                ("a|1".to_string(), "0.8 300".to_string()),
                ("a|2".to_string(), "0.2 10".to_string()),
                ("b|x".to_string(), "0.5 50".to_string()),
                ("b|y".to_string(), "garbage".to_string()),
            ],
        );
        assert_eq!(t.len(), 3);
        assert!(!t.is_empty());
        assert!(ShareTable::default().is_empty());
        let by_rule = t.by_rule();
        assert_eq!(by_rule["a"].keys, 2);
        assert!((by_rule["a"].mean_share - 0.5).abs() < 1e-12);
        let top: Vec<&str> = t.top(2).into_iter().map(|(k, _)| k).collect();
        assert_eq!(top, vec!["a|1", "b|x"]);
    }
}
