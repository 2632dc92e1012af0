//! A stable sort done a bounded step at a time: runs of [`RUN`] items sorted one
//! per step, then merged pairwise, one pair per step (a bottom-up merge sort).
//! Sorting the paths or names of 20,000 rules in one go takes the filter several
//! milliseconds; a step takes a fraction of one, so a host that must not stall
//! runs one step per turn of its loop. The result is exactly `sort_by`'s.

use std::cmp::Ordering;

/// Items sorted per step in the first phase.
pub(super) const RUN: usize = 1_024;

#[derive(Debug, Clone)]
pub(super) struct StepSort<T> {
    items: Vec<T>,
    /// The merge's output, swapped with `items` after each pass.
    spare: Vec<T>,
    /// The sorted run length so far (0 while runs are still being sorted).
    width: usize,
    /// Where the next run or pair starts.
    at: usize,
}

impl<T: Copy> StepSort<T> {
    pub(super) fn new(items: Vec<T>) -> Self {
        Self {
            items,
            spare: Vec::new(),
            width: 0,
            at: 0,
        }
    }

    /// Whether the items are sorted.
    pub(super) fn done(&self) -> bool {
        self.width >= self.items.len() && (self.width > 0 || self.at >= self.items.len())
    }

    /// One step: sorts the next run, or merges the next pair of runs. `cmp`
    /// must order the items the same way at every step.
    pub(super) fn step(&mut self, mut cmp: impl FnMut(&T, &T) -> Ordering) {
        if self.done() {
            return;
        }
        let n = self.items.len();
        if self.width == 0 {
            let end = (self.at + RUN).min(n);
            if let Some(run) = self.items.get_mut(self.at..end) {
                run.sort_by(&mut cmp);
            }
            self.at = end;
            if self.at >= n {
                self.width = RUN;
                self.at = 0;
                self.spare = self.items.clone();
            }
            return;
        }
        let mid = (self.at + self.width).min(n);
        let end = (self.at + 2 * self.width).min(n);
        let left = self.items.get(self.at..mid).unwrap_or_default();
        let right = self.items.get(mid..end).unwrap_or_default();
        if let Some(out) = self.spare.get_mut(self.at..end) {
            merge(left, right, out, &mut cmp);
        }
        self.at = end;
        if self.at >= n {
            std::mem::swap(&mut self.items, &mut self.spare);
            self.width *= 2;
            self.at = 0;
        }
    }

    /// Runs the steps left.
    pub(super) fn finish(mut self, mut cmp: impl FnMut(&T, &T) -> Ordering) -> Vec<T> {
        while !self.done() {
            self.step(&mut cmp);
        }
        self.items
    }
}

/// Merges two sorted runs into `out` (as long as both), the left first on ties.
fn merge<T: Copy>(
    left: &[T],
    right: &[T],
    out: &mut [T],
    cmp: &mut impl FnMut(&T, &T) -> Ordering,
) {
    let (mut l, mut r) = (left.iter().peekable(), right.iter().peekable());
    for slot in out.iter_mut() {
        let take_right = match (l.peek(), r.peek()) {
            (Some(a), Some(b)) => cmp(b, a) == Ordering::Less,
            (None, Some(_)) => true,
            _ => false,
        };
        if let Some(v) = if take_right { r.next() } else { l.next() } {
            *slot = *v;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn stepping_gives_the_stable_sort(items in proptest::collection::vec((0u8..20, any::<u16>()), 0..5_000)) {
            // Sorted by the first field only: the second shows stability.
            let mut expected = items.clone();
            expected.sort_by_key(|x| x.0);
            let mut sort = StepSort::new(items);
            let mut steps = 0;
            while !sort.done() {
                sort.step(|a, b| a.0.cmp(&b.0));
                steps += 1;
            }
            prop_assert!(steps <= 2 * (expected.len() / RUN + 1) + 1, "{} steps", steps);
            prop_assert_eq!(sort.finish(|a, b| a.0.cmp(&b.0)), expected);
        }
    }

    #[test]
    fn a_step_sorts_one_run_or_merges_one_pair() {
        let items: Vec<u32> = (0..(3 * RUN as u32)).rev().collect();
        let mut sort = StepSort::new(items);
        let mut steps = 0;
        while !sort.done() {
            sort.step(u32::cmp);
            steps += 1;
        }
        // Three runs, then a pass of two merges (the second the odd run
        // alone), then one merge of the two runs left.
        assert_eq!(steps, 3 + 2 + 1);
        assert_eq!(
            sort.finish(u32::cmp),
            (0..(3 * RUN as u32)).collect::<Vec<_>>()
        );
        assert!(StepSort::<u32>::new(Vec::new()).done());
    }
}
