//! What the agent keeps of the log in memory: the node's last
//! [`RECENT_RECORDS`] records (a ring), and per rule the keys with the most
//! decisions, Space-Saving counters over [`HOT_KEYS`] keys in all (a key that
//! enters by evicting the smallest counter inherits its count, so counts are
//! upper bounds).

use std::collections::{HashMap, VecDeque};

use meshlimit_core::Outcome;
use serde::Serialize;

use super::LogLine;

/// Records the ring keeps (about 400 bytes each).
pub const RECENT_RECORDS: usize = 1_024;
/// A key's recent records shown by `GET /v1/explain`, at most.
pub const RECENT_SHOWN: usize = 20;
/// Keys counted for `GET /v1/hot`, over every rule.
pub const HOT_KEYS: usize = 256;
/// Keys shown by `GET /v1/hot`, at most.
pub const HOT_SHOWN: usize = 20;

/// One of a rule's hottest keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotKey {
    pub key_id: String,
    /// Decisions, estimated: rejections, plus each sampled allowed record ÷
    /// its sample rate.
    pub decisions: u64,
    pub rejections: u64,
    /// Tokens left as the key's last record saw them (0 while it is denied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
    /// When that record was decided.
    pub last: String,
}

#[derive(Debug, Default)]
pub(super) struct Counter {
    decisions: f64,
    rejections: u64,
    tokens: Option<u32>,
    last: String,
}

#[derive(Debug, Default)]
pub(super) struct Recent {
    pub(super) ring: VecDeque<LogLine>,
    pub(super) hot: HashMap<(String, String), Counter>,
}

impl Recent {
    pub(super) fn push(&mut self, line: LogLine) {
        self.count(&line);
        if self.ring.len() >= RECENT_RECORDS {
            self.ring.pop_front();
        }
        self.ring.push_back(line);
    }

    fn count(&mut self, line: &LogLine) {
        let time = &line.time;
        let line = &line.record;
        let rejected = !matches!(
            line.decision,
            Outcome::Allowed | Outcome::FailedOpen | Outcome::FailedLocal
        ) || line.retry_after_ms.is_some();
        let weight = if line.sample_rate > 0.0 {
            1.0 / line.sample_rate
        } else {
            1.0
        };
        let id = (line.rule.clone(), line.key_id.clone());
        if !self.hot.contains_key(&id) && self.hot.len() >= HOT_KEYS {
            let smallest = self
                .hot
                .iter()
                .min_by(|a, b| a.1.decisions.total_cmp(&b.1.decisions))
                .map(|(k, c)| (k.clone(), c.decisions, c.rejections));
            if let Some((evicted, decisions, rejections)) = smallest {
                self.hot.remove(&evicted);
                self.hot.insert(
                    id.clone(),
                    Counter {
                        decisions,
                        rejections,
                        ..Counter::default()
                    },
                );
            }
        }
        let c = self.hot.entry(id).or_default();
        c.decisions += weight;
        c.rejections += u64::from(rejected);
        c.tokens = line.tokens;
        c.last.clone_from(time);
    }

    pub(super) fn of_key(&self, rule: &str, key_id: &str) -> Vec<LogLine> {
        self.ring
            .iter()
            .rev()
            .filter(|l| l.record.rule == rule && l.record.key_id == key_id)
            .take(RECENT_SHOWN)
            .cloned()
            .collect()
    }

    pub(super) fn hot(&self, rule: &str) -> Vec<HotKey> {
        let mut keys: Vec<HotKey> = self
            .hot
            .iter()
            .filter(|((r, _), _)| r == rule)
            .map(|((_, id), c)| HotKey {
                key_id: id.clone(),
                decisions: c.decisions.round() as u64,
                rejections: c.rejections,
                tokens: c.tokens,
                last: c.last.clone(),
            })
            .collect();
        keys.sort_by(|a, b| {
            (b.rejections, b.decisions, &a.key_id).cmp(&(a.rejections, a.decisions, &b.key_id))
        });
        keys.truncate(HOT_SHOWN);
        keys
    }
}
