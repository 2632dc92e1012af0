//! A rules change on trial as the store keeps it: its clock, by the store's
//! time, and what an operator does to it. The agent records, reads and
//! applies trials; these are the records.

use meshlimit_core::rules::trial::TrialPlan;

/// A trial's clock as the store keeps it (milliseconds of the store's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialClock {
    pub start_ms: u64,
    pub period_ms: u64,
    /// Ended early by an operator at this time.
    pub ended_ms: Option<u64>,
    /// Held by an operator: the trial lasts until it is ended.
    pub held: bool,
}

impl TrialClock {
    /// How long the trial still runs at `now_ms` (the store's clock): `None`
    /// once it is over, `u64::MAX` while held.
    pub fn left_ms(&self, now_ms: u64) -> Option<u64> {
        if self.ended_ms.is_some() {
            return None;
        }
        if self.held {
            return Some(u64::MAX);
        }
        self.start_ms
            .saturating_add(self.period_ms)
            .checked_sub(now_ms)
            .filter(|left| *left > 0)
    }

    /// When it ends as planned (Unix ms), whatever a hold says.
    pub fn planned_end_ms(&self) -> u64 {
        self.ended_ms
            .unwrap_or(self.start_ms.saturating_add(self.period_ms))
    }
}

/// A trial read from the store, with the store's time of the reading.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTrial {
    /// What is on trial (absent when only the clock was asked for).
    pub plan: Option<TrialPlan>,
    pub clock: TrialClock,
    pub now_ms: u64,
}

impl StoredTrial {
    /// How long it still runs, as [`TrialClock::left_ms`] at the reading.
    pub fn left_ms(&self) -> Option<u64> {
        self.clock.left_ms(self.now_ms)
    }
}

/// What an operator does to the trial running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialAction {
    /// End it now: the version enforces as written.
    End,
    /// Keep it on past its period, until it is ended.
    Hold,
}

/// How long the store keeps a trial's record after its planned end (a
/// restarted agent finding it over enforces the version as written).
pub const KEEP_AFTER_MS: u64 = 86_400_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_runs_its_period_unless_ended_and_a_hold_keeps_it_on() {
        let c = TrialClock {
            start_ms: 1_000,
            period_ms: 500,
            ended_ms: None,
            held: false,
        };
        assert_eq!(c.left_ms(1_000), Some(500));
        assert_eq!(c.left_ms(1_499), Some(1));
        assert_eq!(c.left_ms(1_500), None);
        let held = TrialClock { held: true, ..c };
        assert_eq!(held.left_ms(9_000), Some(u64::MAX));
        let ended = TrialClock {
            ended_ms: Some(1_200),
            ..held
        };
        assert_eq!(ended.left_ms(1_100), None);
        assert_eq!(ended.planned_end_ms(), 1_200);
        // A stored trial answers at the store's reading.
        let stored = StoredTrial {
            plan: None,
            clock: c,
            now_ms: 1_100,
        };
        assert_eq!(stored.left_ms(), Some(400));
    }
}
