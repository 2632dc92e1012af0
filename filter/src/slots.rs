//! Read-modify-write of one key's slot in shared data, with compare-and-swap:
//! Envoy runs one VM per worker thread and they share the data, so a write that
//! lost the race reads again and reapplies its change.

use std::ops::Deref;

use meshlimit_core::digits::Decimal;
use meshlimit_core::slot::SlotState;
use meshlimit_core::stack_text::StackText;

use crate::host::{Host, SharedError};

/// Attempts before giving up on a contended slot. Giving up is safe: the caller
/// treats it as a miss (the agent decides) or drops a grant's leftover tokens.
const CAS_ATTEMPTS: usize = 8;

/// What every slot's shared-data key starts with.
pub const SLOT_PREFIX: &str = "meshlimit.slot.";

/// The shared-data key of the slot for `fingerprint`.
pub fn slot_key(fingerprint: u64, slots: u32) -> SlotKey {
    let n = Decimal::of(fingerprint % u64::from(slots.max(1)));
    let mut key = StackText::default();
    key.push_str(SLOT_PREFIX);
    key.push_str(n.as_str());
    SlotKey(key)
}

const SLOT_KEY_MAX: usize = SLOT_PREFIX.len() + 20;

/// A slot's shared-data key, on the stack: every request forms one per key.
pub struct SlotKey(StackText<SLOT_KEY_MAX>);

impl Deref for SlotKey {
    type Target = str;

    fn deref(&self) -> &str {
        // The prefix and at most 20 digits: always fits.
        self.0.as_str().unwrap_or(SLOT_PREFIX)
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
}
