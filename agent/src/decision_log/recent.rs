//! What the agent keeps of the log in memory: the node's last
//! [`RECENT_RECORDS`] records (a ring), and per rule the keys with the most
//! decisions, Space-Saving counters over [`HOT_KEYS`] keys in all (a key that
//! enters by evicting the smallest counter inherits its count, so counts are
//! upper bounds).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use meshlimit_core::wire::DecisionRecord;
use meshlimit_core::Outcome;
use serde::Serialize;

use super::LogLine;
use meshlimit_core::log_line::utc_millis;

/// Records the ring keeps (about 400 bytes each).
pub const RECENT_RECORDS: usize = 1_024;
/// Bytes the ring keeps at most ([`Kept::bytes`]): 1,024 ordinary records fit;
/// records near the API's field bounds (~1.5 KiB) push the oldest out sooner.
pub const RECENT_BYTES: usize = 1 << 20;
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
    /// When the key's last record was decided (ms since the Unix epoch).
    last_ms: u64,
}

/// A record as the ring keeps it: the filter's record and the VM that sent it
/// (shared by its batch); the line's time and node are added when shown.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) filter: Arc<str>,
    pub(super) record: DecisionRecord,
}

impl Kept {
    /// What it holds: itself and its strings (the batch's filter id counted
    /// whole in each of its records, an upper bound).
    pub(super) fn bytes(&self) -> usize {
        let r = &self.record;
        let text = [
            Some(&r.rule),
            Some(&r.rules_version),
            Some(&r.key_id),
            r.key.as_ref(),
            r.request_id.as_ref(),
        ];
        std::mem::size_of::<Kept>()
            + self.filter.len()
            + text.iter().flatten().map(|s| s.capacity()).sum::<usize>()
    }
}

/// The ring and the hot keys. A record costs no allocation here once its key
/// is counted: the hot keys are looked up by rule and key id as borrowed.
#[derive(Debug, Default)]
pub(super) struct Recent {
    pub(super) ring: VecDeque<Kept>,
    /// What the ring's records hold ([`Kept::bytes`]), at most [`RECENT_BYTES`].
    pub(super) bytes: usize,
    /// Per rule, per key id.
    pub(super) hot: HashMap<String, HashMap<String, Counter>>,
    /// Keys counted over every rule (at most [`HOT_KEYS`]).
    pub(super) hot_keys: usize,
}

impl Recent {
    pub(super) fn push(&mut self, kept: Kept) {
        self.count(&kept.record);
        let size = kept.bytes();
        while self.ring.len() >= RECENT_RECORDS
            || (!self.ring.is_empty() && self.bytes + size > RECENT_BYTES)
        {
            if let Some(old) = self.ring.pop_front() {
                self.bytes -= old.bytes();
            }
        }
        self.bytes += size;
        self.ring.push_back(kept);
    }

    fn count(&mut self, record: &DecisionRecord) {
        let rejected = !matches!(
            record.decision,
            Outcome::Allowed | Outcome::FailedOpen | Outcome::FailedLocal
        ) || record.retry_after_ms.is_some();
        let weight = if record.sample_rate > 0.0 {
            1.0 / record.sample_rate
        } else {
            1.0
        };
        let c = match self.counter(&record.rule, &record.key_id) {
            Some(c) => c,
            None => self.insert(&record.rule, &record.key_id),
        };
        c.decisions += weight;
        c.rejections += u64::from(rejected);
        c.tokens = record.tokens;
        c.last_ms = record.at_ms;
    }

    fn counter(&mut self, rule: &str, key_id: &str) -> Option<&mut Counter> {
        self.hot.get_mut(rule)?.get_mut(key_id)
    }

    /// Counts a new key: when [`HOT_KEYS`] are counted, it takes the place
    /// (and the counts) of the key with the fewest decisions.
    fn insert(&mut self, rule: &str, key_id: &str) -> &mut Counter {
        let mut inherited = Counter::default();
        if self.hot_keys >= HOT_KEYS {
            let smallest = self
                .hot
                .iter()
                .flat_map(|(r, keys)| keys.iter().map(move |(k, c)| (r, k, c)))
                .min_by(|a, b| a.2.decisions.total_cmp(&b.2.decisions))
                .map(|(r, k, _)| (r.clone(), k.clone()));
            if let Some((r, k)) = smallest {
                if let Some(keys) = self.hot.get_mut(&r) {
                    if let Some(c) = keys.remove(&k) {
                        inherited.decisions = c.decisions;
                        inherited.rejections = c.rejections;
                    }
                    if keys.is_empty() {
                        self.hot.remove(&r);
                    }
                }
                self.hot_keys -= 1;
            }
        }
        self.hot_keys += 1;
        self.hot
            .entry(rule.to_string())
            .or_default()
            .entry(key_id.to_string())
            .or_insert(inherited)
    }

    pub(super) fn of_key(&self, node: &str, rule: &str, key_id: &str) -> Vec<LogLine> {
        self.ring
            .iter()
            .rev()
            .filter(|k| k.record.rule == rule && k.record.key_id == key_id)
            .take(RECENT_SHOWN)
            .map(|k| LogLine::new(k.record.clone(), node, &k.filter))
            .collect()
    }

    pub(super) fn hot(&self, rule: &str) -> Vec<HotKey> {
        let mut keys: Vec<HotKey> = self
            .hot
            .get(rule)
            .into_iter()
            .flatten()
            .map(|(id, c)| HotKey {
                key_id: id.clone(),
                decisions: c.decisions.round() as u64,
                rejections: c.rejections,
                tokens: c.tokens,
                last: utc_millis(c.last_ms),
            })
            .collect();
        keys.sort_by(|a, b| {
            (b.rejections, b.decisions, &a.key_id).cmp(&(a.rejections, a.decisions, &b.key_id))
        });
        keys.truncate(HOT_SHOWN);
        keys
    }
}
