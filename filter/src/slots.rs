//! Read-modify-write of one key's slot in shared data, with compare-and-swap:
//! Envoy runs one VM per worker thread and they share the data, so a write that
//! lost the race reads again and reapplies its change.

use std::ops::Deref;

use meshlimit_core::slot::SlotState;

use crate::host::{Host, SharedError};

/// Attempts before giving up on a contended slot. Giving up is safe: the caller
/// treats it as a miss (the agent decides) or drops a grant's leftover tokens.
const CAS_ATTEMPTS: usize = 8;

/// What every slot's shared-data key starts with.
pub const SLOT_PREFIX: &str = "meshlimit.slot.";

/// The shared-data key of the slot for `fingerprint`: the prefix and the
/// slot's number in decimal. The digits go straight into their place after
/// the prefix, which a constant holds (a new key's request forms its key
/// twice, and in pieces it cost about 320 instructions each: `make
/// wasm-cost`).
pub fn slot_key(fingerprint: u64, slots: u32) -> SlotKey {
    let mut n = fingerprint % u64::from(slots.max(1));
    let digits = n.checked_ilog10().map_or(1, |d| d as usize + 1);
    let len = SLOT_PREFIX.len() + digits;
    let mut bytes = SLOT_KEY_START;
    if let Some(number) = bytes.get_mut(SLOT_PREFIX.len()..len) {
        for digit in number.iter_mut().rev() {
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
    }
    SlotKey { bytes, len }
}

/// The prefix and room for a slot's number (below `u32::MAX`: 10 digits).
const SLOT_KEY_MAX: usize = SLOT_PREFIX.len() + 10;

/// A slot key's bytes before its number is written: the prefix.
const SLOT_KEY_START: [u8; SLOT_KEY_MAX] = {
    let mut bytes = [0; SLOT_KEY_MAX];
    let prefix = SLOT_PREFIX.as_bytes();
    let mut i = 0;
    while i < prefix.len() {
        bytes[i] = prefix[i];
        i += 1;
    }
    bytes
};

/// A slot's shared-data key, on the stack: every request forms one per key.
pub struct SlotKey {
    bytes: [u8; SLOT_KEY_MAX],
    len: usize,
}

impl Deref for SlotKey {
    type Target = str;

    fn deref(&self) -> &str {
        // The prefix and ASCII digits: always text.
        self.bytes
            .get(..self.len)
            .and_then(meshlimit_core::text::utf8)
            .unwrap_or(SLOT_PREFIX)
    }
}

/// Applies `change` to the key's state and stores it. Returns what `change`
/// returned on the attempt that was stored, or `None` when every attempt lost or
/// another key holds the slot (see `SlotState::claim`): nothing was changed.
pub fn update<H: Host, R>(
    host: &H,
    now_ns: u64,
    fingerprint: u64,
    slots: u32,
    mut change: impl FnMut(&mut SlotState) -> R,
) -> Option<R> {
    let key = slot_key(fingerprint, slots);
    for _ in 0..CAS_ATTEMPTS {
        let (bytes, cas) = host.shared_get(&key);
        let mut state = SlotState::claim(bytes.as_deref(), fingerprint, now_ns)?;
        let before = state;
        let out = change(&mut state);
        if state == before {
            return Some(out);
        }
        match host.shared_set(&key, &state.encoded(), cas) {
            Ok(()) => return Some(out),
            Err(SharedError::CasMismatch) => continue,
            Err(SharedError::Host) => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryHost;

    #[test]
    fn a_lost_race_is_retried_on_fresh_state() {
        let host = MemoryHost::default();
        update(&host, host.now_ns(), 7, 16, |s| {
            s.grant(0, 10, 0, 1_000_000, 0, 0)
        });
        // Another worker writes between our read and our write, once.
        host.interfere_once(slot_key(7, 16).to_string(), |bytes| {
            let mut s = SlotState::claim(Some(bytes), 7, 0).unwrap();
            s.lease.tokens -= 4;
            s.encode()
        });
        let taken = update(&host, host.now_ns(), 7, 16, |s| {
            s.check(1, 1, u64::MAX, None, false)
        });
        assert!(taken.is_some());
        let (bytes, _) = host.shared_get(&slot_key(7, 16));
        // 10 - 4 (the other worker) - 1 (ours): neither write was lost.
        assert_eq!(&*slot_key(7, 16), "meshlimit.slot.7");
        let widest = u64::MAX % u64::from(u32::MAX - 1);
        assert_eq!(
            &*slot_key(u64::MAX, u32::MAX - 1),
            format!("meshlimit.slot.{widest}")
        );
        assert_eq!(
            SlotState::claim(bytes.as_deref(), 7, 0)
                .unwrap()
                .lease
                .tokens,
            5
        );
    }

    #[test]
    fn a_slot_key_is_the_prefix_and_the_slot_number_in_decimal() {
        let mut fingerprints = vec![0, 1, 9, 10, 11, 99, 100, 12_345, u64::MAX];
        fingerprints.extend(
            (0..20)
                .map(|p| 10u64.pow(p))
                .flat_map(|t| [t - 1, t, t + 1]),
        );
        for slots in [1, 10, 16, 16_384, 1_000_000, u32::MAX - 1, u32::MAX] {
            for &fp in &fingerprints {
                let want = format!("{SLOT_PREFIX}{}", fp % u64::from(slots));
                assert_eq!(&*slot_key(fp, slots), want, "{fp} of {slots}");
            }
        }
        assert_eq!(&*slot_key(5, 0), "meshlimit.slot.0");
    }
}
