//! When misses skip the agent: the back-off after failed agent calls, kept in
//! shared data so every worker of this Envoy sees it. Plain code over the
//! [`Host`] trait (tested natively over `testing::MemoryHost`); `http.rs` and
//! `root.rs` call it.

use std::time::Duration;

use crate::host::Host;
use crate::state::{
    AGENT_ALIVE_NS, AGENT_DOWN_KEY, AGENT_FAILURES_KEY, AGENT_FAILURES_TO_BACK_OFF, AGENT_OK_KEY,
};

/// True while misses skip the agent (a back-off is running at `now`).
pub fn backing_off<H: Host>(host: &H, now: u64) -> bool {
    let (bytes, _) = host.shared_get(AGENT_DOWN_KEY);
    bytes
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .is_some_and(|until| until > now)
}

/// A failed agent call. Each failing request takes its policy at once; after
/// [`AGENT_FAILURES_TO_BACK_OFF`] failures in a row (the agent is down, not just
/// slow once) misses skip the agent for `backoff`.
pub fn failed<H: Host>(host: &H, backoff: Duration) {
    let (bytes, _) = host.shared_get(AGENT_FAILURES_KEY);
    let failures = bytes
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
        + 1;
    // An agent that answered another request moments ago is alive: its
    // slow answers are one store node's trouble (their keys took the failure
    // policy), not a reason to take every other key off the agent.
    let now = host.now_ns();
    let (ok, _) = host.shared_get(AGENT_OK_KEY);
    let recent_ok = ok
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .is_some_and(|at| now.saturating_sub(at) < AGENT_ALIVE_NS);
    if failures < AGENT_FAILURES_TO_BACK_OFF || recent_ok {
        let _ = host.shared_set(AGENT_FAILURES_KEY, &failures.to_le_bytes(), None);
        return;
    }
    let _ = host.shared_set(AGENT_FAILURES_KEY, &0u32.to_le_bytes(), None);
    let until = now.saturating_add(crate::config::nanos(backoff));
    let _ = host.shared_set(AGENT_DOWN_KEY, &until.to_le_bytes(), None);
}

/// Whether a lease call that brought no answers was the agent's failure (no
/// answer at all, or a 5xx), which counts toward the back-off. A 4xx is the
/// agent refusing what this filter sent: the call's items take their failure
/// policies, but an agent that answers is not down, and backing off would put
/// every other key of this Envoy on its failure policy too.
pub fn agent_failed(status: Option<u32>) -> bool {
    !matches!(status, Some(400..=499))
}

/// A successful agent call ends a run of failures, and dates the agent's
/// last answer ([`AGENT_OK_KEY`]) when the date there is older than a
/// quarter of [`AGENT_ALIVE_NS`]. `seen_ok` is the latest date this VM read
/// or wrote there: a date only moves forward, so while that one is younger
/// than a quarter the one in shared data is too, and it is not read (a new
/// key's call is answered once a request, and the read was one of its
/// shared-data reads).
pub fn answered<H: Host>(host: &H, seen_ok: &mut u64) {
    let now = host.now_ns();
    let fresh = |at: u64| now.saturating_sub(at) < AGENT_ALIVE_NS / 4;
    if !fresh(*seen_ok) {
        let (ok, _) = host.shared_get(AGENT_OK_KEY);
        match ok.and_then(|b| b.try_into().ok()).map(u64::from_le_bytes) {
            Some(at) if fresh(at) => *seen_ok = at,
            _ => {
                let _ = host.shared_set(AGENT_OK_KEY, &now.to_le_bytes(), None);
                *seen_ok = now;
            }
        }
    }
    let (bytes, _) = host.shared_get(AGENT_FAILURES_KEY);
    let failures = bytes
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes);
    if failures != 0 {
        let _ = host.shared_set(AGENT_FAILURES_KEY, &0u32.to_le_bytes(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryHost;

    const MS: u64 = 1_000_000;
    const BACKOFF: Duration = Duration::from_millis(500);

    #[test]
    fn only_no_answer_or_a_server_error_is_the_agents_failure() {
        assert!(agent_failed(None));
        assert!(agent_failed(Some(500)));
        assert!(agent_failed(Some(503)));
        assert!(agent_failed(Some(200)), "a 200 with no readable answers");
        assert!(!agent_failed(Some(400)));
        assert!(!agent_failed(Some(413)));
    }

    #[test]
    fn three_failures_in_a_row_back_off_for_the_configured_time() {
        let host = MemoryHost::default();
        host.set_now(1_000 * MS);
        assert!(!backing_off(&host, host.now_ns()));
        failed(&host, BACKOFF);
        failed(&host, BACKOFF);
        assert!(
            !backing_off(&host, host.now_ns()),
            "two failures are not down"
        );
        failed(&host, BACKOFF);
        assert!(backing_off(&host, 1_000 * MS));
        assert!(backing_off(&host, 1_499 * MS));
        assert!(!backing_off(&host, 1_500 * MS), "back-off ends on time");
    }

    #[test]
    fn an_answer_ends_a_run_of_failures() {
        let host = MemoryHost::default();
        host.set_now(1_000 * MS);
        failed(&host, BACKOFF);
        failed(&host, BACKOFF);
        answered(&host, &mut 0);
        // Well past the alive window, two more failures are not three in a row.
        host.set_now(2_000 * MS);
        failed(&host, BACKOFF);
        failed(&host, BACKOFF);
        assert!(!backing_off(&host, host.now_ns()));
        failed(&host, BACKOFF);
        assert!(backing_off(&host, host.now_ns()));
    }

    /// The time of the last answer, as shared data holds it.
    fn alive_stamp(host: &MemoryHost) -> Option<u64> {
        let (bytes, _) = host.shared_get(AGENT_OK_KEY);
        bytes
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    }

    #[test]
    fn answers_rewrite_the_shared_stamp_at_most_every_quarter_of_the_alive_window() {
        let host = MemoryHost::default();
        let t0 = 1_000 * MS;
        host.set_now(t0);
        answered(&host, &mut 0);
        assert_eq!(alive_stamp(&host), Some(t0));
        // Within a quarter of the window the stamp is fresh enough: no write.
        host.set_now(t0 + AGENT_ALIVE_NS / 4 - 1);
        answered(&host, &mut 0);
        assert_eq!(alive_stamp(&host), Some(t0));
        host.set_now(t0 + AGENT_ALIVE_NS / 4);
        answered(&host, &mut 0);
        assert_eq!(alive_stamp(&host), Some(t0 + AGENT_ALIVE_NS / 4));
        // The refreshed stamp keeps failures soon after it from counting.
        host.set_now(t0 + AGENT_ALIVE_NS + AGENT_ALIVE_NS / 8);
        for _ in 0..3 {
            failed(&host, BACKOFF);
        }
        assert!(!backing_off(&host, host.now_ns()));
    }

    #[test]
    fn an_answer_clears_the_count_so_a_later_single_failure_is_one_of_a_new_run() {
        let host = MemoryHost::default();
        host.set_now(1_000 * MS);
        failed(&host, BACKOFF);
        failed(&host, BACKOFF);
        answered(&host, &mut 0);
        // Past the alive window: one failure after the answer is not the third.
        host.set_now(2_000 * MS);
        failed(&host, BACKOFF);
        assert!(!backing_off(&host, host.now_ns()));
    }

    #[test]
    fn failures_just_after_an_answer_do_not_back_off() {
        let host = MemoryHost::default();
        host.set_now(1_000 * MS);
        answered(&host, &mut 0);
        // Within the alive window the agent is up: one slow store node's keys
        // fail, the rest keep asking.
        host.set_now(1_000 * MS + AGENT_ALIVE_NS - 1);
        for _ in 0..5 {
            failed(&host, BACKOFF);
        }
        assert!(!backing_off(&host, host.now_ns()));
        // Past the window the run counts: the next failure backs off.
        host.set_now(1_000 * MS + AGENT_ALIVE_NS);
        failed(&host, BACKOFF);
        assert!(backing_off(&host, host.now_ns()));
    }

    #[test]
    fn a_vm_reads_the_stamp_only_once_the_date_it_saw_there_is_a_quarter_old() {
        let host = MemoryHost::default();
        let t0 = 1_000 * MS;
        host.set_now(t0);
        host.count_reads(AGENT_OK_KEY);
        let mut seen = 0;
        answered(&host, &mut seen);
        assert_eq!((host.reads_counted(), seen), (1, t0));
        // Another worker's newer stamp: this VM keeps the one it saw.
        host.shared_set(AGENT_OK_KEY, &(t0 + MS).to_le_bytes(), None)
            .unwrap();
        host.set_now(t0 + AGENT_ALIVE_NS / 4 - 1);
        answered(&host, &mut seen);
        assert_eq!(host.reads_counted(), 1, "fresh: no read");
        assert_eq!(alive_stamp(&host), Some(t0 + MS));
        // A quarter past the date it saw, it reads the newer one, still
        // fresh: no write.
        host.count_reads(AGENT_OK_KEY);
        host.set_now(t0 + AGENT_ALIVE_NS / 4);
        answered(&host, &mut seen);
        assert_eq!((host.reads_counted(), seen), (1, t0 + MS));
        assert_eq!(alive_stamp(&host), Some(t0 + MS));
        host.count_reads(AGENT_OK_KEY);
        host.set_now(t0 + MS + AGENT_ALIVE_NS / 4);
        answered(&host, &mut seen);
        assert_eq!(host.reads_counted(), 1);
        assert_eq!(alive_stamp(&host), Some(t0 + MS + AGENT_ALIVE_NS / 4));
    }
}
