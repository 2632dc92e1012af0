//! This VM's share of the decision log: every rejection of a rule and a sample
//! of its allowed decisions (the rule's `log_sample`) become records kept in a
//! bounded buffer, which the root context hands to the agent in batches on its
//! tick (`POST /v1/decisions`), never one call per request. A full buffer drops
//! the new record and counts it (`meshlimit.decision_log_dropped`, and the next
//! batch tells the agent how many).

use meshlimit_core::fingerprint::uniform;
use meshlimit_core::rules::LogKey;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::wire::{
    DecisionRecord, DecisionsRequest, MAX_BODY_BYTES, MAX_DECISION_RECORDS, WIRE_VERSION,
};
use meshlimit_core::{Outcome, RuleVerdict, NANOS_PER_MS};

use crate::decided::Decided;
use crate::pipeline::{Evaluation, Logged};

/// Records one VM holds between two flushes (one tick, `sync_interval_ms`);
/// past it new records are dropped and counted.
pub const BUFFER_RECORDS: usize = 1024;
/// The request header a record carries, when the request has it.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// The longest request id kept (a longer one is cut).
const MAX_REQUEST_ID: usize = 128;
/// A batch's body stays below the agent's body cap with room to spare.
const MAX_BATCH_BYTES: usize = MAX_BODY_BYTES / 2;

/// One VM's buffered records.
#[derive(Default)]
pub struct DecisionLog {
    records: Vec<DecisionRecord>,
    /// The records' sizes summed (`size`), so a whole batch is seen without
    /// walking the buffer on every request.
    bytes: usize,
    /// Dropped since the last batch taken.
    dropped: u64,
    /// Dropped and not yet added to the Envoy counter.
    uncounted: u64,
    /// The sampler's state (seeded on first use).
    rng: u64,
    /// The batch in flight (its call's token and record count). One at a
    /// time, so the agent writes a VM's records in their order.
    in_flight: Option<(u32, usize)>,
}

/// The share of decisions like `d` the log keeps: every rejection, and its
/// rule's `log_sample` of allowed ones.
fn sample_rate(d: &Logged<'_>) -> f64 {
    match d.verdict {
        RuleVerdict::Allow { .. } => d.rule.log_sample,
        _ => 1.0,
    }
}

impl DecisionLog {
    /// Records the decisions of `eval` the log keeps: every rejection
    /// (`limited`, `shadow_limited`, `failed_closed`, a `failed_local` that
    /// rejected) and each allowed decision with its rule's `log_sample`.
    /// The deciding rule's key id is taken from `decided`, not hashed again;
    /// the request id is looked up (`request_id`) only for a record kept.
    pub fn record<'r>(
        &mut self,
        key_ids: &KeyIds,
        eval: &Evaluation,
        decided: Option<&Decided<'_>>,
        request_id: impl Fn() -> Option<&'r str>,
        now_ns: u64,
    ) {
        for d in eval.logged() {
            if self.sampled(sample_rate(&d), now_ns) {
                self.keep(key_ids, eval, decided, &request_id, now_ns, &d);
            }
        }
    }

    /// Buffers the record of the decision `d` (or counts it dropped, the
    /// buffer full). Out of the loop over a request's decisions, most of
    /// which are not sampled.
    #[inline(never)]
    fn keep<'r>(
        &mut self,
        key_ids: &KeyIds,
        eval: &Evaluation,
        decided: Option<&Decided<'_>>,
        request_id: &impl Fn() -> Option<&'r str>,
        now_ns: u64,
        d: &Logged<'_>,
    ) {
        if self.records.len() >= BUFFER_RECORDS {
            self.dropped += 1;
            self.uncounted += 1;
            return;
        }
        let (tokens, retry_after_ms) = match d.verdict {
            RuleVerdict::Allow { remaining, .. } if d.outcome != Outcome::FailedOpen => {
                (Some(remaining), None)
            }
            RuleVerdict::Allow { .. } | RuleVerdict::Unavailable => (None, None),
            RuleVerdict::Deny { retry_after_ns } => {
                (Some(0), Some(retry_after_ns.div_ceil(NANOS_PER_MS)))
            }
        };
        let record = DecisionRecord {
            at_ms: now_ns / NANOS_PER_MS,
            rule: d.rule.name.clone(),
            rules_version: eval.rules_version().to_string(),
            decision: d.outcome,
            key_id: match decided.and_then(|x| x.id_of(d.key)) {
                Some(id) => id.to_string(),
                None => key_ids.id(d.key).to_string(),
            },
            key: (d.rule.log_key == LogKey::Clear).then(|| d.key.as_str().to_string()),
            source: d.source,
            tokens,
            retry_after_ms,
            sample_rate: sample_rate(d),
            request_id: request_id().map(|r| cut(r, MAX_REQUEST_ID).to_string()),
        };
        self.bytes += size(&record);
        self.records.push(record);
    }

    /// Whether a decision is kept at `rate` (a rejection's is 1: always).
    fn sampled(&mut self, rate: f64, now_ns: u64) -> bool {
        if rate >= 1.0 {
            return true;
        }
        if rate <= 0.0 {
            return false;
        }
        if self.rng == 0 {
            self.rng = now_ns | 1;
        }
        uniform(&mut self.rng) < rate
    }

    /// The next batch for the agent (at most [`MAX_DECISION_RECORDS`] records
    /// and half the agent's body cap), or `None` with nothing to send. The
    /// first batch carries the count of records dropped since the last one.
    pub fn take_batch(&mut self, filter_id: &str) -> Option<DecisionsRequest> {
        if self.records.is_empty() && self.dropped == 0 {
            return None;
        }
        let n = self.batch_len();
        let records: Vec<DecisionRecord> = self.records.drain(..n).collect();
        self.bytes = self
            .bytes
            .saturating_sub(records.iter().map(size).sum::<usize>());
        Some(DecisionsRequest {
            v: WIRE_VERSION,
            filter_id: filter_id.to_string(),
            records,
            dropped: std::mem::take(&mut self.dropped),
        })
    }

    /// Whether a whole batch waits (the record or the byte cap reached) and
    /// none is in flight: it is sent at once, where a part batch waits for
    /// the tick and fills up meanwhile.
    pub fn batch_due(&self) -> bool {
        self.in_flight.is_none()
            && (self.records.len() >= MAX_DECISION_RECORDS || self.bytes > MAX_BATCH_BYTES)
    }

    /// Whether a batch is in flight (the next waits for its answer).
    pub fn sending(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The batch of `n` records went out as call `token`.
    pub fn sent(&mut self, token: u32, n: usize) {
        self.in_flight = Some((token, n));
    }

    /// If `token` is the batch in flight: it is over, and how many records it
    /// carried.
    pub fn answered(&mut self, token: u32) -> Option<usize> {
        self.in_flight.take_if(|(t, _)| *t == token).map(|(_, n)| n)
    }

    /// How many of the first records go in one batch: at most
    /// [`MAX_DECISION_RECORDS`] and [`MAX_BATCH_BYTES`], at least one.
    fn batch_len(&self) -> usize {
        let mut bytes = 0;
        let mut n = 0;
        for r in self.records.iter().take(MAX_DECISION_RECORDS) {
            let size = size(r);
            if n > 0 && bytes + size > MAX_BATCH_BYTES {
                break;
            }
            bytes += size;
            n += 1;
        }
        n
    }

    /// Records lost with a batch the agent did not take: counted as dropped.
    pub fn lost(&mut self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.dropped = self.dropped.saturating_add(n);
        self.uncounted = self.uncounted.saturating_add(n);
    }

    /// Drops not yet added to the Envoy counter (and forgets them).
    pub fn take_uncounted(&mut self) -> u64 {
        std::mem::take(&mut self.uncounted)
    }

    /// Records waiting for the next flush.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// A record's serialized size, at most: the fixed fields, names and numbers
/// take at most 300 bytes (escaping may double a key or request id).
fn size(r: &DecisionRecord) -> usize {
    300 + r.rule.len()
        + 2 * r.key.as_ref().map_or(0, String::len)
        + 2 * r.request_id.as_ref().map_or(0, String::len)
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests;
