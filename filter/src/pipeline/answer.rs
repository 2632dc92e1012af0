//! What the agent's answer for one key does to the key's slot in shared data.

use meshlimit_core::slot::SlotState;
use meshlimit_core::wire::LeaseAnswer;
use meshlimit_core::NANOS_PER_MS;

use super::{Item, KeyResult};
use crate::config::FilterConfig;
use crate::host::Host;
use crate::slots;

/// What [`apply_answer`] did: the key's result, and the clock it read, which
/// the requests waiting on the key are decided at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Applied {
    pub result: KeyResult,
    pub now_ns: u64,
    /// The slot holds the grant or denial, with what `then` did in the same
    /// write; false when that write was not made (no slot for the key, or
    /// every attempt lost its race), and what `then` did is void.
    pub written: bool,
}

/// Applies one item's answer to its key's slot: a grant joins the lease (the
/// waiting requests take from it), a denial is cached; anything else ends the
/// key's call in flight so the next request may call again. After a grant or
/// a denial, `then` runs on the same state in the same compare-and-swap
/// write (again on each retry): the waiting requests' takes, so a new key's
/// answer and its request's tokens are one read and one write of its slot.
pub fn apply_answer<H: Host>(
    host: &H,
    cfg: &FilterConfig,
    item: &Item,
    answer: Option<LeaseAnswer>,
    mut then: impl FnMut(&mut SlotState, u64),
) -> Applied {
    let now = host.now_ns();
    let fp = item.fingerprint;
    let (result, written) = match answer {
        Some(LeaseAnswer::Grant {
            tokens,
            ttl_ms,
            remaining,
            reset_ms,
            local: false,
            from,
            next_ask_ms,
        }) => {
            let reset_ns = reset_ms.saturating_mul(NANOS_PER_MS);
            let ttl_ns = ttl_ms.saturating_mul(NANOS_PER_MS);
            let written = slots::update(host, now, fp, cfg.slots, |s| {
                s.grant(now, tokens, item.prepaid, ttl_ns, remaining, reset_ns);
                if let Some(ms) = next_ask_ms {
                    s.deny_after_tokens(now, ms.saturating_mul(NANOS_PER_MS));
                }
                then(s, now);
            });
            (KeyResult::Answered(from), written.is_some())
        }
        Some(LeaseAnswer::Deny {
            retry_after_ms,
            local: false,
            from,
        }) => {
            let retry_after_ns = retry_after_ms.saturating_mul(NANOS_PER_MS);
            let written = slots::update(host, now, fp, cfg.slots, |s| {
                s.deny(now, retry_after_ns);
                then(s, now);
            });
            (KeyResult::Answered(from), written.is_some())
        }
        other => {
            slots::update(host, now, fp, cfg.slots, |s| s.call_failed());
            let result = match other {
                // The agent's own fail-local bucket denied (its store is down).
                Some(LeaseAnswer::Deny { retry_after_ms, .. }) => KeyResult::AgentLocalDeny {
                    retry_after_ns: retry_after_ms.saturating_mul(NANOS_PER_MS),
                },
                // The agent's fail-local bucket admitted: the request must pass
                // this filter's bucket too. When a lease call times out the
                // filter decides alone from that bucket, and two buckets spent
                // apart would admit up to twice the ceiling.
                _ => KeyResult::Failed,
            };
            (result, false)
        }
    };
    Applied {
        result,
        now_ns: now,
        written,
    }
}
