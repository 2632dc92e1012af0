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
//! lease never outlives [`MAX_LEASE_TTL_NS`] from now. The lease itself (tokens,
//! denial, spend rate, the call in flight) is [`crate::lease::Lease`].

use crate::bucket::{Bucket, Take};
use crate::lease::{Lease, Spend};
use crate::limit::Limit;

const FORMAT: u8 = 5;
/// The bytes of an encoded slot.
pub const ENCODED_LEN: usize = 110;
/// The longest a lease may be kept, whatever the agent or a stepped clock says.
pub const MAX_LEASE_TTL_NS: u64 = 2_000_000_000;

/// One key's local state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlotState {
    pub fingerprint: u64,
    /// The lease: tokens the agent granted, the cached denial, the spend rate,
    /// the call in flight (one per key for every worker of this Envoy).
    pub lease: Lease,
    /// The store's remaining tokens when the lease was granted, and when its bucket
    /// is full again: what the RateLimit fields report between agent calls.
    pub store_remaining: u32,
    pub store_reset_at_ns: u64,
    /// The fail-local bucket, created on the first failure.
    pub fallback: Option<Bucket>,
    /// When the fail-local bucket is full again (0: no bucket): until then the
    /// slot is not given to another key.
    pub fallback_full_ns: u64,
}

/// What local state alone can decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalCheck {
    /// The denial cache holds the key until `retry_after_ns` from now.
    Denied { retry_after_ns: u64 },
    /// Tokens were taken from the lease. `refill`: the lease crossed its refill
    /// mark and is marked in flight; the caller starts the call for more.
    Taken {
        remaining: u32,
        reset_ns: u64,
        refill: bool,
    },
    /// Nothing local to spend: the agent must be asked (`in_flight`: a call for
    /// the key is already on its way, from some worker of this Envoy).
    Miss { in_flight: bool },
    /// The key's cached denial ended a moment ago ([`Lease::denial_just_ended`])
    /// and its next answer is not in: the request is denied for the
    /// `retry_after_ns` that answer may take, rather than wait on it. `refill`:
    /// this check marked the key's call in flight; the caller starts it.
    Held { retry_after_ns: u64, refill: bool },
}

impl SlotState {
    /// Empty state for the key with `fingerprint`.
    pub fn empty(fingerprint: u64) -> Self {
        Self {
            fingerprint,
            lease: Lease::default(),
            store_remaining: 0,
            store_reset_at_ns: 0,
            fallback: None,
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
        self.encoded().to_vec()
    }

    /// [`SlotState::encode`] on the stack: the filter writes a slot at
    /// every step of a new key's request (its miss, its call, its answer,
    /// the request's tokens), and a vector for each cost an allocation and
    /// its free.
    pub fn encoded(&self) -> [u8; ENCODED_LEN] {
        let mut out = [0u8; ENCODED_LEN];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            if let Some(to) = out.get_mut(at..at + bytes.len()) {
                to.copy_from_slice(bytes);
            }
            at += bytes.len();
        };
        let l = &self.lease;
        put(&[FORMAT]);
        put(&self.fingerprint.to_le_bytes());
        put(&l.tokens.to_le_bytes());
        put(&l.expires_ns.to_le_bytes());
        put(&self.store_remaining.to_le_bytes());
        put(&self.store_reset_at_ns.to_le_bytes());
        put(&l.denied_until_ns.to_le_bytes());
        let (tokens, updated) = self.fallback.map_or((0.0, 0), |b| b.parts());
        put(&[u8::from(self.fallback.is_some())]);
        put(&tokens.to_le_bytes());
        put(&updated.to_le_bytes());
        put(&l.granted.to_le_bytes());
        put(&l.granted_at_ns.to_le_bytes());
        put(&l.demand_at_ns.to_le_bytes());
        put(&l.demand.to_le_bytes());
        put(&self.fallback_full_ns.to_le_bytes());
        put(&l.call_started_ns.to_le_bytes());
        put(&l.call_deadline_ns.to_le_bytes());
        put(&l.rtt_us.to_le_bytes());
        out
    }

    /// Decides from local state, taking `cost` lease tokens when it can. A cached
    /// denial longer than `max_wait_ns` (the longest the rule can make anyone
    /// wait) is cut to it, and a lease dated beyond [`MAX_LEASE_TTL_NS`] from now
    /// is dropped: a clock that stepped back extends neither. A take that
    /// crosses the refill mark marks a call in flight until `refill_timeout_ns`
    /// from now (`None`: no refill ahead); a call marked further ahead than
    /// [`MAX_LEASE_TTL_NS`] is forgotten. `hold`: a key whose denial just
    /// ended is held at it until its next answer ([`LocalCheck::Held`]); false
    /// where its limit may have changed since (a schedule edge).
    pub fn check(
        &mut self,
        now_ns: u64,
        cost: u32,
        max_wait_ns: u64,
        refill_timeout_ns: Option<u64>,
        hold: bool,
    ) -> LocalCheck {
        let l = &mut self.lease;
        if l.expires_ns > now_ns.saturating_add(MAX_LEASE_TTL_NS) {
            l.drop_tokens();
        }
        if l.call_deadline_ns > now_ns.saturating_add(MAX_LEASE_TTL_NS) {
            l.failed();
        }
        l.denied_until_ns = l.denied_until_ns.min(now_ns.saturating_add(max_wait_ns));
        match l.take(now_ns, cost, refill_timeout_ns) {
            Spend::Taken { left, refill } => LocalCheck::Taken {
                remaining: self.store_remaining.saturating_add(left),
                reset_ns: self.store_reset_at_ns.saturating_sub(now_ns),
                refill,
            },
            Spend::Denied { retry_after_ns } => LocalCheck::Denied { retry_after_ns },
            // A key denied a moment ago is still over its limit until its next
            // answer says otherwise: its requests are not made to wait for it.
            // Only where the holder refills ahead (never on an exact rule).
            Spend::Empty { in_flight } => match refill_timeout_ns {
                Some(timeout) if hold && max_wait_ns > 0 && l.denial_just_ended(now_ns) => {
                    let refill = !in_flight && self.begin_call(now_ns, timeout);
                    let retry_after_ns = self
                        .lease
                        .call_deadline_ns
                        .saturating_sub(now_ns)
                        .min(max_wait_ns)
                        .max(1);
                    LocalCheck::Held {
                        retry_after_ns,
                        refill,
                    }
                }
                _ => LocalCheck::Miss { in_flight },
            },
        }
    }

    /// Takes `cost` for a request that waited on the key's call, from what its
    /// answer left (its demand was counted by its first check).
    pub fn take_answered(&mut self, now_ns: u64, cost: u32) -> LocalCheck {
        match self.lease.spend(now_ns, cost, None) {
            Spend::Taken { left, .. } => LocalCheck::Taken {
                remaining: self.store_remaining.saturating_add(left),
                reset_ns: self.store_reset_at_ns.saturating_sub(now_ns),
                refill: false,
            },
            Spend::Denied { retry_after_ns } => LocalCheck::Denied { retry_after_ns },
            Spend::Empty { in_flight } => LocalCheck::Miss { in_flight },
        }
    }

    /// Marks a call for the key in flight; false when one already is. The
    /// mark lasts the call's timeout, at most [`MAX_LEASE_TTL_NS`]: `check`
    /// takes a deadline further ahead for a stepped clock's and drops it, so
    /// a longer mark (a `timeout_ms` over 2 s) would be dropped by the next
    /// request, which would call again, or start cold again, while the first
    /// call is out. Past 2 s a second call may go; the first still ends at
    /// its own timeout.
    pub fn begin_call(&mut self, now_ns: u64, call_timeout_ns: u64) -> bool {
        self.lease
            .begin_call(now_ns, call_timeout_ns.min(MAX_LEASE_TTL_NS))
    }

    /// A cold start: when the slot knows nothing of its key (never granted,
    /// never denied, no call started, no fail-local bucket), marks the key's
    /// call in flight and returns true; the request that asked is admitted and
    /// the call's grant pays for it. False, changing nothing, for a key it
    /// knows.
    pub fn cold_start(&mut self, now_ns: u64, call_timeout_ns: u64) -> bool {
        let l = &self.lease;
        let known = l.granted_at_ns != 0
            || l.denied_until_ns != 0
            || l.call_started_ns != 0
            || self.fallback.is_some();
        !known && self.begin_call(now_ns, call_timeout_ns)
    }

    /// Records a grant of which `cost` went to the current request (0 for a
    /// refill); the rest joins the lease. Expired leftovers are dropped, never
    /// carried over.
    pub fn grant(
        &mut self,
        now_ns: u64,
        tokens: u32,
        cost: u32,
        ttl_ns: u64,
        store_remaining: u32,
        reset_ns: u64,
    ) {
        self.lease
            .grant(now_ns, tokens, cost, ttl_ns.min(MAX_LEASE_TTL_NS));
        self.store_remaining = store_remaining;
        self.store_reset_at_ns = now_ns.saturating_add(reset_ns);
        // The agent answers for the key again: the next outage starts its
        // fail-local bucket afresh (one request, the key being in use), not
        // from a bucket that refilled to full meanwhile.
        self.fallback = None;
        self.fallback_full_ns = 0;
    }

    /// After a grant: once its tokens are spent, the key is rejected locally
    /// until `wait_ns` from now (the agent's turn for this filter).
    pub fn deny_after_tokens(&mut self, now_ns: u64, wait_ns: u64) {
        self.lease.deny_after_tokens(now_ns, wait_ns);
    }

    /// Records a denial: the key is rejected locally until `retry_after_ns` from now.
    pub fn deny(&mut self, now_ns: u64, retry_after_ns: u64) {
        self.lease.deny(now_ns, retry_after_ns);
    }

    /// The call for the key failed: the next request may call again.
    pub fn call_failed(&mut self) {
        self.lease.failed();
    }

    /// Takes `cost` from the fail-local bucket of `limit` (the node's slice of the
    /// rule's limit). A key nobody was spending starts with a full bucket; a key
    /// this Envoy was spending from leases starts with one request's worth: its
    /// leases already out are its head start, so the ceiling's rate holds from
    /// the first request after the agent went away, not a burst on top.
    pub fn fallback_take(&mut self, limit: &Limit, now_ns: u64, cost: u32) -> Take {
        // Demand beyond this request's own ask (counted by its local check).
        let others = self.lease.demand_per_sec(now_ns) - f64::from(cost);
        let in_use = others >= 0.5 || self.lease.granted > 0;
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
            lease: Lease {
                tokens: u32_at(9)?,
                expires_ns: u64_at(13)?,
                denied_until_ns: u64_at(33)?,
                granted: u32_at(58)?,
                granted_at_ns: u64_at(62)?,
                demand_at_ns: u64_at(70)?,
                demand: f32::from_bits(u32_at(78)?),
                call_started_ns: u64_at(90)?,
                call_deadline_ns: u64_at(98)?,
                rtt_us: u32_at(106)?,
            },
            store_remaining: u32_at(21)?,
            store_reset_at_ns: u64_at(25)?,
            fallback,
            fallback_full_ns: u64_at(82)?,
        })
    }
}

#[cfg(test)]
mod tests;
