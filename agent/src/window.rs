//! The fail-open ratio's sliding window: the last 60 seconds of decision counts in a
//! ring of per-second slots. A ratio over a window (not since start) is what an alert
//! needs: a limiter that silently fails open for a minute must show it within that
//! minute, and recover to 0 once it is healthy again.

use std::collections::HashMap;

/// The window's length in seconds.
pub(crate) const WINDOW_SECS: u64 = 60;

/// Decision counts of one rule over the last [`WINDOW_SECS`] seconds. Time is a
/// parameter (whole seconds on any monotonic clock), so tests need no clock.
#[derive(Debug, Clone)]
pub(crate) struct SlidingWindow {
    slots: [Slot; WINDOW_SECS as usize],
}

/// Sliding windows by rule label.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuleWindows {
    windows: HashMap<String, SlidingWindow>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The second this slot counts, plus one (0: never used).
    stamp: u64,
    failed_open: u64,
    total: u64,
}

impl SlidingWindow {
    pub fn new() -> Self {
        Self {
            slots: [Slot::default(); WINDOW_SECS as usize],
        }
    }

    /// Adds `total` decisions, `failed_open` of them failed open, at second `now`.
    pub(crate) fn add(&mut self, now: u64, failed_open: u64, total: u64) {
        let stamp = now.saturating_add(1);
        let slot = &mut self.slots[(now % WINDOW_SECS) as usize];
        if slot.stamp != stamp {
            // The slot still holds a second that left the window: start it afresh.
            *slot = Slot {
                stamp,
                ..Slot::default()
            };
        }
        slot.failed_open = slot.failed_open.saturating_add(failed_open);
        slot.total = slot.total.saturating_add(total);
    }

    /// `(failed_open, total)` over the seconds `now - 59 ..= now`.
    pub(crate) fn totals(&self, now: u64) -> (u64, u64) {
        self.slots
            .iter()
            .filter(|s| s.stamp != 0 && s.stamp <= now + 1 && now + 1 - s.stamp < WINDOW_SECS)
            .fold((0, 0), |(fo, all), s| {
                (
                    fo.saturating_add(s.failed_open),
                    all.saturating_add(s.total),
                )
            })
    }

    /// failed_open / all over the window; 0 when there were no decisions.
    pub(crate) fn ratio(&self, now: u64) -> f64 {
        match self.totals(now) {
            (_, 0) => 0.0,
            (fo, all) => (fo as f64 / all as f64).min(1.0),
        }
    }

    pub fn is_empty(&self, now: u64) -> bool {
        self.totals(now).1 == 0
    }
}

impl Default for SlidingWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl RuleWindows {
    pub(crate) fn add(&mut self, rule: &str, now: u64, failed_open: u64, total: u64) {
        if let Some(w) = self.windows.get_mut(rule) {
            w.add(now, failed_open, total);
            return;
        }
        let mut w = SlidingWindow::new();
        w.add(now, failed_open, total);
        self.windows.insert(rule.to_string(), w);
    }

    /// The ratio of `rule` at `now`; 0 for a rule never seen.
    pub(crate) fn ratio(&self, rule: &str, now: u64) -> f64 {
        self.windows.get(rule).map_or(0.0, |w| w.ratio(now))
    }

    /// Forgets windows with nothing left in them, so rules removed from the rules
    /// file stop costing memory a minute later.
    pub(crate) fn prune(&mut self, now: u64) {
        self.windows.retain(|_, w| !w.is_empty(now));
    }

    /// `(failed_open, total)` of `rule` over the window; zeros for a rule never seen.
    pub(crate) fn totals(&self, rule: &str, now: u64) -> (u64, u64) {
        self.windows.get(rule).map_or((0, 0), |w| w.totals(now))
    }

    /// Rule labels with decisions in the window.
    pub(crate) fn rules(&self) -> impl Iterator<Item = &str> {
        self.windows.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_zero() {
        assert_eq!(SlidingWindow::new().ratio(0), 0.0);
        assert_eq!(RuleWindows::default().ratio("r", 100), 0.0);
    }

    #[test]
    fn counts_leave_the_window_after_sixty_seconds() {
        let mut w = SlidingWindow::new();
        w.add(0, 3, 4);
        assert_eq!(w.ratio(0), 0.75);
        w.add(30, 0, 4);
        assert_eq!(w.ratio(30), 3.0 / 8.0);
        assert_eq!(w.ratio(59), 3.0 / 8.0);
        assert_eq!(w.ratio(60), 0.0, "second 0 has left the window");
        assert_eq!(w.totals(60), (0, 4));
        assert_eq!(w.ratio(89), 0.0);
        assert!(w.is_empty(90));
    }

    #[test]
    fn a_reused_slot_starts_afresh() {
        let mut w = SlidingWindow::new();
        w.add(5, 10, 10);
        w.add(65, 0, 10);
        assert_eq!(w.totals(65), (0, 10));
    }

    #[test]
    fn same_second_adds_up() {
        let mut w = SlidingWindow::new();
        w.add(7, 1, 2);
        w.add(7, 1, 2);
        assert_eq!(w.totals(7), (2, 4));
        // A clock reading from before the slot's second does not see the future.
        assert_eq!(w.totals(6), (0, 0));
    }

    #[test]
    fn prune_drops_idle_rules() {
        let mut ws = RuleWindows::default();
        ws.add("a", 0, 1, 1);
        ws.add("b", 50, 0, 1);
        ws.prune(70);
        assert_eq!(ws.rules().collect::<Vec<_>>(), vec!["b"]);
    }
}
