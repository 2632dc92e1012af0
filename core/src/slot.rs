//! The filter's per-key local state, as kept in one proxy-wasm shared-data slot:
//! the local lease (tokens the agent granted, until they expire), the denial cache
//! entry (denied until T), and the fail-local bucket used while the agent is
//! unreachable. Pure data and logic here; the filter does the get + CAS set.
//!
//! Slots are chosen by `fingerprint % slots`, so shared data stays bounded whatever
//! the key cardinality. A slot holding another key's state is taken over (its
//! lease tokens dropped, never hoarded; its cached denial forgotten, so the agent
//! is asked again) unless that key's fail-local bucket is still refilling: that
//! bucket is the only memory of what the key spent while the agent was
//! unreachable, so it is never evicted, and the newcomer, finding no room, is
//! decided without local state (a miss for the agent, a denial under fail-local).
//! So a collision never grants a token or refills a bucket.
//!
//! Times here are the host's wall clock, which can step. Whatever a slot says, a
//! cached denial never lasts longer than the rule allows (`max_wait_ns`) and a
//! lease never outlives [`MAX_LEASE_TTL_NS`] from now.

use crate::bucket::{Bucket, Take};
use crate::limit::Limit;

const FORMAT: u8 = 3;
const ENCODED_LEN: usize = 90;
/// The spend rate's time constant.
const SPEND_TAU_NS: f64 = 1e9;
/// The longest a lease may be kept, whatever the agent or a stepped clock says.
pub const MAX_LEASE_TTL_NS: u64 = 2_000_000_000;

/// One key's local state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlotState {
    pub fingerprint: u64,
    /// Unspent leased tokens, usable until `lease_expires_ns`.
    pub lease_tokens: u32,
    pub lease_expires_ns: u64,
    /// The store's remaining tokens when the lease was granted, and when its bucket
    /// is full again: what the RateLimit fields report between agent calls.
    pub store_remaining: u32,
    pub store_reset_at_ns: u64,
    /// Denial cache: requests before this time are rejected without asking.
    pub denied_until_ns: u64,
    /// The fail-local bucket, created on the first failure.
    pub fallback: Option<Bucket>,
    /// The last grant's tokens and time: what this filter spent of it, and how
    /// fast, sizes the next ask (`want`).
    pub lease_granted: u32,
    pub lease_granted_at_ns: u64,
    /// When the last lease ran out (0: it did not).
    pub lease_emptied_ns: u64,
    /// Tokens per second this filter spent while it held tokens (decaying mean).
    pub spend_rate: f32,
    /// When the fail-local bucket is full again (0: no bucket): until then the
    /// slot is not given to another key.
    pub fallback_full_ns: u64,
}

/// What local state alone can decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalCheck {
    /// The denial cache holds the key until `retry_after_ns` from now.
    Denied { retry_after_ns: u64 },
    /// Tokens were taken from the lease.
    Taken { remaining: u32, reset_ns: u64 },
    /// The agent must be asked.
    Miss,
}

impl SlotState {
    /// Empty state for the key with `fingerprint`.
    pub fn empty(fingerprint: u64) -> Self {
        Self {
            fingerprint,
            lease_tokens: 0,
            lease_expires_ns: 0,
            store_remaining: 0,
            store_reset_at_ns: 0,
            denied_until_ns: 0,
            fallback: None,
            lease_granted: 0,
            lease_granted_at_ns: 0,
            lease_emptied_ns: 0,
            spend_rate: 0.0,
            fallback_full_ns: 0,
        }
    }

    /// Reads a slot for the key with `fingerprint`: its own state, or an empty
    /// one where the slot is free (nothing there, garbage, an old format, or
    /// another key with nothing worth keeping). `None` when another key's
    /// fail-local bucket is still refilling at `now_ns`: the slot is not ours.
    pub fn claim(bytes: Option<&[u8]>, fingerprint: u64, now_ns: u64) -> Option<Self> {
        match bytes.and_then(Self::decode_exact) {
            Some(s) if s.fingerprint == fingerprint => Some(s),
            Some(other) if other.fallback.is_some() && now_ns < other.fallback_full_ns => None,
            _ => Some(Self::empty(fingerprint)),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENCODED_LEN);
        out.push(FORMAT);
        out.extend_from_slice(&self.fingerprint.to_le_bytes());
        out.extend_from_slice(&self.lease_tokens.to_le_bytes());
        out.extend_from_slice(&self.lease_expires_ns.to_le_bytes());
        out.extend_from_slice(&self.store_remaining.to_le_bytes());
        out.extend_from_slice(&self.store_reset_at_ns.to_le_bytes());
        out.extend_from_slice(&self.denied_until_ns.to_le_bytes());
        let (tokens, updated) = self.fallback.map_or((0.0, 0), |b| b.parts());
        out.push(u8::from(self.fallback.is_some()));
        out.extend_from_slice(&tokens.to_le_bytes());
        out.extend_from_slice(&updated.to_le_bytes());
        out.extend_from_slice(&self.lease_granted.to_le_bytes());
        out.extend_from_slice(&self.lease_granted_at_ns.to_le_bytes());
        out.extend_from_slice(&self.lease_emptied_ns.to_le_bytes());
        out.extend_from_slice(&self.spend_rate.to_le_bytes());
        out.extend_from_slice(&self.fallback_full_ns.to_le_bytes());
        out
    }

    /// Tokens to ask for: what this filter spends in half a lease TTL at its
    /// recent spend rate. `None` before it has spent a lease.
    pub fn want(&self) -> Option<u32> {
        let ttl = self
            .lease_expires_ns
            .saturating_sub(self.lease_granted_at_ns) as f64;
        let want = (f64::from(self.spend_rate) * ttl / 2e9).ceil();
        (want >= 1.0).then(|| want.min(f64::from(u32::MAX)) as u32)
    }

    /// Folds the lease being replaced into the spend rate.
    fn measure_lease(&mut self, now_ns: u64) {
        if self.lease_granted == 0 {
            return;
        }
        let end = if self.lease_emptied_ns > 0 {
            self.lease_emptied_ns
        } else {
            now_ns.min(self.lease_expires_ns)
        };
        let elapsed = end.saturating_sub(self.lease_granted_at_ns).max(1_000_000) as f64;
        let spent = f64::from(self.lease_granted.saturating_sub(self.lease_tokens));
        let sample = spent * 1e9 / elapsed;
        let weight = 1.0 - (-elapsed / SPEND_TAU_NS).exp();
        let rate = f64::from(self.spend_rate);
        self.spend_rate = (rate + weight * (sample - rate)) as f32;
    }

    /// Decides from local state, taking `cost` lease tokens when it can. A cached
    /// denial longer than `max_wait_ns` (the longest the rule can make anyone
    /// wait) is cut to it, and a lease dated beyond [`MAX_LEASE_TTL_NS`] from now
    /// is dropped: a clock that stepped back extends neither.
    pub fn check(&mut self, now_ns: u64, cost: u32, max_wait_ns: u64) -> LocalCheck {
        if self.lease_expires_ns > now_ns.saturating_add(MAX_LEASE_TTL_NS) {
            self.lease_tokens = 0;
            self.lease_expires_ns = 0;
        }
        self.denied_until_ns = self.denied_until_ns.min(now_ns.saturating_add(max_wait_ns));
        // Granted tokens first: a denial answering a concurrent ask must not
        // strand tokens the store already handed to this node.
        if self.lease_expires_ns > now_ns && self.lease_tokens >= cost {
            self.lease_tokens -= cost;
            if self.lease_tokens < cost {
                self.lease_emptied_ns = now_ns;
            }
            return LocalCheck::Taken {
                remaining: self.store_remaining.saturating_add(self.lease_tokens),
                reset_ns: self.store_reset_at_ns.saturating_sub(now_ns),
            };
        }
        if self.denied_until_ns > now_ns {
            return LocalCheck::Denied {
                retry_after_ns: self.denied_until_ns - now_ns,
            };
        }
        LocalCheck::Miss
    }

    /// Records a grant of which `cost` went to the current request; the rest joins
    /// the lease. Expired leftovers are dropped, never carried over.
    pub fn grant(
        &mut self,
        now_ns: u64,
        tokens: u32,
        cost: u32,
        ttl_ns: u64,
        store_remaining: u32,
        reset_ns: u64,
    ) {
        self.measure_lease(now_ns);
        let carried = if self.lease_expires_ns > now_ns {
            self.lease_tokens
        } else {
            0
        };
        self.lease_tokens = carried.saturating_add(tokens.saturating_sub(cost));
        self.lease_expires_ns = now_ns.saturating_add(ttl_ns.min(MAX_LEASE_TTL_NS));
        self.store_remaining = store_remaining;
        self.store_reset_at_ns = now_ns.saturating_add(reset_ns);
        self.denied_until_ns = 0;
        self.lease_granted = carried.saturating_add(tokens);
        self.lease_granted_at_ns = now_ns;
        self.lease_emptied_ns = 0;
        // The agent answers for the key again: the next outage starts its
        // fail-local bucket afresh (one request, the key being in use), not
        // from a bucket that refilled to full meanwhile.
        self.fallback = None;
        self.fallback_full_ns = 0;
    }

    /// Records a denial: the key is rejected locally until `retry_after_ns` from now.
    pub fn deny(&mut self, now_ns: u64, retry_after_ns: u64) {
        self.denied_until_ns = now_ns.saturating_add(retry_after_ns);
        if self.lease_expires_ns <= now_ns {
            self.lease_tokens = 0;
        }
    }

    /// Takes `cost` from the fail-local bucket of `limit` (the node's slice of the
    /// rule's limit). A key nobody was spending starts with a full bucket; a key
    /// this Envoy was spending from leases starts with one request's worth: its
    /// leases already out are its head start, so the ceiling's rate holds from
    /// the first request after the agent went away, not a burst on top.
    pub fn fallback_take(&mut self, limit: &Limit, now_ns: u64, cost: u32) -> Take {
        let in_use = self.spend_rate > 0.0 || self.lease_granted > 0;
        let bucket = self.fallback.get_or_insert_with(|| {
            let start = if in_use {
                f64::from(cost)
            } else {
                f64::from(limit.burst())
            };
            Bucket::from_parts(start.min(f64::from(limit.burst())), now_ns)
        });
        let take = bucket.take(limit, now_ns, cost, cost);
        let missing = f64::from(limit.burst()) - bucket.tokens_at(limit, now_ns);
        let refill_ns = (missing.max(0.0) / limit.rate_per_ns()).ceil();
        self.fallback_full_ns = if refill_ns.is_finite() {
            now_ns.saturating_add(refill_ns as u64)
        } else {
            u64::MAX
        };
        take
    }

    fn decode_exact(b: &[u8]) -> Option<Self> {
        if b.len() != ENCODED_LEN || b.first() != Some(&FORMAT) {
            return None;
        }
        let u64_at = |i: usize| {
            b.get(i..i + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let u32_at = |i: usize| {
            b.get(i..i + 4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let fallback = match b.get(41)? {
            0 => None,
            _ => Some(Bucket::from_parts(f64::from_bits(u64_at(42)?), u64_at(50)?)),
        };
        Some(Self {
            fingerprint: u64_at(1)?,
            lease_tokens: u32_at(9)?,
            lease_expires_ns: u64_at(13)?,
            store_remaining: u32_at(21)?,
            store_reset_at_ns: u64_at(25)?,
            denied_until_ns: u64_at(33)?,
            fallback,
            lease_granted: u32_at(58)?,
            lease_granted_at_ns: u64_at(62)?,
            lease_emptied_ns: u64_at(70)?,
            spend_rate: f32::from_bits(u32_at(78)?),
            fallback_full_ns: u64_at(82)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::limit;

    #[test]
    fn round_trips_and_ignores_other_keys() {
        let mut s = SlotState::empty(42);
        s.grant(10, 5, 1, 100, 7, 1_000);
        let _ = s.fallback_take(&limit(3, 1_000, 3), 10, 1);
        let bytes = s.encode();
        assert_eq!(bytes.len(), ENCODED_LEN);
        assert_eq!(SlotState::claim(Some(&bytes), 42, 10), Some(s));
        // Another key's refilling fail-local bucket keeps the slot; once full
        // again, the slot is free.
        assert_eq!(SlotState::claim(Some(&bytes), 43, 10), None);
        assert_eq!(
            SlotState::claim(Some(&bytes), 43, s.fallback_full_ns),
            Some(SlotState::empty(43))
        );
        assert_eq!(
            SlotState::claim(Some(b"junk"), 42, 0),
            Some(SlotState::empty(42))
        );
        assert_eq!(SlotState::claim(None, 42, 0), Some(SlotState::empty(42)));
        // A lease alone does not hold a slot against another key.
        let mut leased = SlotState::empty(42);
        leased.grant(10, 5, 1, 100, 7, 1_000);
        assert_eq!(
            SlotState::claim(Some(&leased.encode()), 43, 11),
            Some(SlotState::empty(43))
        );
    }

    #[test]
    fn lease_tokens_are_spent_then_expire() {
        let mut s = SlotState::empty(1);
        s.grant(0, 3, 1, 100, 10, 50);
        assert!(matches!(
            s.check(1, 1, u64::MAX),
            LocalCheck::Taken { remaining: 11, .. }
        ));
        assert!(matches!(
            s.check(2, 1, u64::MAX),
            LocalCheck::Taken { remaining: 10, .. }
        ));
        assert_eq!(s.check(3, 1, u64::MAX), LocalCheck::Miss);
        s.grant(10, 5, 1, 100, 0, 0);
        // Past its expiry the lease is worth nothing.
        assert_eq!(s.check(200, 1, u64::MAX), LocalCheck::Miss);
    }

    #[test]
    fn denial_cache_rejects_until_its_time() {
        let mut s = SlotState::empty(1);
        s.deny(100, 50);
        assert_eq!(
            s.check(120, 1, u64::MAX),
            LocalCheck::Denied { retry_after_ns: 30 }
        );
        assert_eq!(s.check(150, 1, u64::MAX), LocalCheck::Miss);
    }

    #[test]
    fn the_next_ask_is_sized_by_the_spend_rate_of_the_last_lease() {
        const MS: u64 = 1_000_000;
        let mut s = SlotState::empty(1);
        assert_eq!(s.want(), None, "nothing spent yet");
        // 101 tokens for a second, 100 of them leased; spent by 500 ms.
        s.grant(0, 101, 1, 1_000 * MS, 0, 0);
        for i in 1..=100 {
            assert!(matches!(
                s.check(i * 5 * MS, 1, u64::MAX),
                LocalCheck::Taken { .. }
            ));
        }
        assert_eq!(s.lease_emptied_ns, 500 * MS);
        assert_eq!(s.check(550 * MS, 1, u64::MAX), LocalCheck::Miss);
        // The next grant folds the last lease in: 101 tokens in 0.5 s is 202/s,
        // weighted 1 - e^-0.5 against the previous rate (0).
        s.grant(600 * MS, 10, 1, 1_000 * MS, 0, 0);
        let expected = 202.0 * (1.0 - (-0.5f64).exp());
        assert!(
            (f64::from(s.spend_rate) - expected).abs() < 1e-3,
            "{} against {expected}",
            s.spend_rate
        );
        // Half a lease TTL (1 s) at 79.5/s: 40 tokens.
        assert_eq!(s.want(), Some(40));
    }

    #[test]
    fn a_lease_is_good_until_its_expiry_and_no_later() {
        let mut s = SlotState::empty(1);
        s.grant(0, 5, 1, 100, 0, 0);
        assert!(matches!(s.check(99, 1, u64::MAX), LocalCheck::Taken { .. }));
        assert_eq!(s.check(100, 1, u64::MAX), LocalCheck::Miss);
        // A lease of the longest TTL is kept in full.
        let mut s = SlotState::empty(1);
        s.grant(0, 5, 1, MAX_LEASE_TTL_NS, 0, 0);
        assert!(matches!(s.check(0, 1, u64::MAX), LocalCheck::Taken { .. }));
    }

    #[test]
    fn granted_tokens_are_spent_before_a_cached_denial() {
        // A grant, then a denial answering a concurrent ask: the tokens the
        // store already handed to this node are spent first...
        let mut s = SlotState::empty(1);
        s.grant(0, 3, 1, 1_000, 10, 50);
        s.deny(5, 500);
        assert!(matches!(s.check(10, 1, u64::MAX), LocalCheck::Taken { .. }));
        assert!(matches!(s.check(11, 1, u64::MAX), LocalCheck::Taken { .. }));
        // ...and only then does the cached denial answer.
        assert_eq!(
            s.check(12, 1, u64::MAX),
            LocalCheck::Denied {
                retry_after_ns: 493
            }
        );
    }

    #[test]
    fn a_colliding_key_never_evicts_a_refilling_fail_local_bucket() {
        let l = limit(2, 1_000_000_000, 2);
        let mut victim = SlotState::empty(1);
        for _ in 0..2 {
            assert!(matches!(
                victim.fallback_take(&l, 0, 1),
                Take::Granted { .. }
            ));
        }
        let bytes = victim.encode();
        // The attacker's key cannot have the slot while the bucket refills...
        assert_eq!(SlotState::claim(Some(&bytes), 2, 1), None);
        // ...so the first key still finds its bucket empty.
        let mut again = SlotState::claim(Some(&bytes), 1, 2).unwrap();
        assert!(matches!(again.fallback_take(&l, 2, 1), Take::Denied { .. }));
        // A second later it is full again, and the slot may change hands.
        assert!(SlotState::claim(Some(&again.encode()), 2, 1_000_000_002).is_some());
    }

    #[test]
    fn a_clock_stepped_back_extends_neither_a_denial_nor_a_lease() {
        let hour = 3_600_000_000_000u64;
        let mut s = SlotState::empty(1);
        s.deny(10 * hour, 1_000);
        // The clock steps back an hour: the denial lasts at most max_wait.
        assert_eq!(
            s.check(9 * hour, 1, 5_000),
            LocalCheck::Denied {
                retry_after_ns: 5_000
            }
        );
        let mut s = SlotState::empty(1);
        s.grant(10 * hour, 10, 1, 300_000_000, 0, 0);
        assert_eq!(s.check(9 * hour, 1, u64::MAX), LocalCheck::Miss);
        // A lease asked to live a day lives MAX_LEASE_TTL_NS.
        let mut s = SlotState::empty(1);
        s.grant(0, 10, 1, 24 * hour, 0, 0);
        assert_eq!(s.lease_expires_ns, MAX_LEASE_TTL_NS);
    }

    #[test]
    fn a_key_in_use_starts_its_fail_local_bucket_without_a_full_head_start() {
        let l = limit(40, 1_000_000_000, 40);
        let mut cold = SlotState::empty(1);
        let mut hot = SlotState::empty(2);
        hot.spend_rate = 30.0;
        let granted = |s: &mut SlotState| {
            (0..50)
                .filter(|_| matches!(s.fallback_take(&l, 0, 1), Take::Granted { .. }))
                .count()
        };
        assert_eq!(granted(&mut cold), 40);
        assert_eq!(granted(&mut hot), 1, "its leases were its head start");
        let mut leased = SlotState::empty(3);
        leased.grant(0, 5, 1, 300_000_000, 0, 0);
        assert_eq!(granted(&mut leased), 1, "a key with a lease is in use");
    }
}
