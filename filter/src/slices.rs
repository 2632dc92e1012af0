//! A worker's slices of its node's leases. Envoy runs one VM per worker
//! thread; a key hot at a worker takes a slice of the node's lease (in shared
//! data, one get and compare-and-set) and keeps it here, in the VM's own
//! memory, so its next requests are decided with no host call at all.
//! `meshlimit_core::policy::worker_slice` sizes a slice and states what a
//! worker may hold unspent. Only allowing leases are sliced: a denial is
//! cached in shared data, where every worker answers from it once its slice
//! is spent (granted tokens are spent before a cached denial, as in
//! `meshlimit_core::lease`). A slice never outlives the lease it came from.

use meshlimit_core::slot::MAX_LEASE_TTL_NS;

/// Entries of [`Slices`]: direct-mapped by fingerprint, so a VM's memory for
/// them is fixed (64 of 40 bytes), whatever keys an attacker sends.
const ENTRIES: usize = 64;

/// Tokens a worker took from its node's lease beyond one request's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    pub fingerprint: u64,
    /// Unspent tokens, usable until `expires_ns` (the lease's expiry).
    pub tokens: u32,
    pub expires_ns: u64,
    /// What the RateLimit fields report beside the slice's own tokens: the
    /// store's remaining tokens and the lease's, when it was taken.
    pub base_remaining: u32,
    /// When the store's bucket is full again.
    pub reset_at_ns: u64,
}

/// What a slice gave a request: the quota its response reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    pub remaining: u32,
    pub reset_ns: u64,
}

/// One VM's slices.
pub struct Slices {
    entries: Box<[Option<Slice>]>,
}

impl Default for Slices {
    fn default() -> Self {
        Slices {
            entries: vec![None; ENTRIES].into_boxed_slice(),
        }
    }
}

impl Slices {
    /// Keeps `slice`; a slice of another key in its entry is dropped (its
    /// tokens are lost, as a lease's expired tokens are: never hoarded).
    pub fn keep(&mut self, slice: Slice) {
        if let Some(entry) = self.entries.get_mut(at(slice.fingerprint)) {
            *entry = Some(slice);
        }
    }

    /// Takes `cost` tokens of the key `fingerprint`'s slice at `now_ns`;
    /// `None` when the slice is missing, spent or expired (or dated beyond
    /// [`MAX_LEASE_TTL_NS`] from now, by a clock that stepped back): the
    /// request goes to the shared lease.
    pub fn take(&mut self, fingerprint: u64, now_ns: u64, cost: u32) -> Option<Spent> {
        let entry = self.entries.get_mut(at(fingerprint))?;
        let slice = entry.as_mut().filter(|s| s.fingerprint == fingerprint)?;
        let live = slice.expires_ns > now_ns
            && slice.expires_ns <= now_ns.saturating_add(MAX_LEASE_TTL_NS);
        if !live {
            *entry = None;
            return None;
        }
        if slice.tokens < cost {
            return None;
        }
        slice.tokens -= cost;
        Some(Spent {
            remaining: slice.base_remaining.saturating_add(slice.tokens),
            reset_ns: slice.reset_at_ns.saturating_sub(now_ns),
        })
    }
}

fn at(fingerprint: u64) -> usize {
    usize::try_from(fingerprint % ENTRIES as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(fingerprint: u64, tokens: u32, expires_ns: u64) -> Slice {
        Slice {
            fingerprint,
            tokens,
            expires_ns,
            base_remaining: 50,
            reset_at_ns: 900,
        }
    }

    #[test]
    fn a_slice_is_spent_until_empty_or_expired_and_only_by_its_key() {
        let mut s = Slices::default();
        s.keep(slice(7, 2, 1_000));
        assert_eq!(s.take(7 + ENTRIES as u64, 10, 1), None, "another key");
        let spent = s.take(7, 100, 1).unwrap();
        assert_eq!((spent.remaining, spent.reset_ns), (51, 800));
        assert_eq!(s.take(7, 100, 2), None, "one token left, two asked");
        assert_eq!(s.take(7, 100, 1).unwrap().remaining, 50);
        assert_eq!(s.take(7, 100, 1), None, "spent");
        s.keep(slice(7, 5, 1_000));
        assert_eq!(s.take(7, 1_000, 1), None, "expired with its lease");
        assert_eq!(s.take(7, 10, 1), None, "and dropped");
    }

    #[test]
    fn a_slice_dated_past_a_leases_longest_life_is_dropped() {
        let mut s = Slices::default();
        s.keep(slice(3, 5, 10 + MAX_LEASE_TTL_NS + 1));
        assert_eq!(s.take(3, 10, 1), None);
        s.keep(slice(3, 5, 10 + MAX_LEASE_TTL_NS));
        assert!(s.take(3, 10, 1).is_some());
    }

    #[test]
    fn a_newer_key_takes_its_entry_over() {
        let mut s = Slices::default();
        s.keep(slice(1, 5, 1_000));
        s.keep(slice(1 + ENTRIES as u64, 5, 1_000));
        assert_eq!(s.take(1, 10, 1), None);
        assert!(s.take(1 + ENTRIES as u64, 10, 1).is_some());
    }
}
