//! Fixed and sliding windows: the reference maths of `algorithm: fixed_window`
//! and `algorithm: sliding_window`, run by the agent's embedded store and (in Lua)
//! by the Redis lease script, which a differential test holds to this code.
//!
//! Windows are `per` long and aligned to the epoch of the caller's clock: window
//! `i` runs from `i × per` to `(i + 1) × per`. The Redis store passes the Unix time
//! of the server (`TIME`), so an `N per 1m` window is a calendar minute there.
//!
//! - **Fixed**: at most `requests` in each window; the count starts again at
//!   each window's start, so up to `2 × requests` may pass around one edge.
//! - **Sliding** (the two-counter approximation): the previous window's count,
//!   weighted by the share of it that still lies within `per` of now, plus the
//!   current window's count, is at most `requests`. It assumes the previous
//!   window's requests were spread evenly; the exact sliding log it stands for
//!   may differ where they were not (published at about 6 % on average for real
//!   traffic; the accuracy scenarios measure it).
//!
//! Counts are whole numbers; the weight is an `f64` as in Lua, with the same
//! 1e-9 allowance for rounding as the token bucket.
//!
//! Leases (`accuracy: fast`). A grant of more than the cost is a lease: the
//! counts are taken from the window now and spent by the holder for up to the
//! lease's life; a fixed window's lease ends with its window (the grant's
//! `reset_ns`, which the agent makes the lease's life when shorter). Error
//! bound: a fixed window's counts are spent past its end only by the time the
//! grant took to reach its holder; a sliding window's leased near its end may
//! be spent in the next window, so each holder of a store lease (a node's
//! pool: at most two of its lease sizes, a lease at most a tenth of `requests`
//! or the cost) may push a window at most one such grant over `requests`;
//! counts leased and never spent are counted and not admitted (under the
//! limit, never over). An exact
//! rule asks for its cost on every request and is never over.

use serde::{Deserialize, Serialize};

use crate::bucket::Take;
use crate::limit::{Algorithm, Limit};

/// A window's counts: `count` in window `index`, `previous` in window `index - 1`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    index: u64,
    count: u64,
    previous: u64,
}

impl Window {
    /// A key with nothing counted, as an unseen key starts.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Rebuilds a window from stored parts (see [`Window::parts`]).
    pub fn from_parts(index: u64, count: u64, previous: u64) -> Self {
        Self {
            index,
            count,
            previous,
        }
    }

    /// The stored parts: the window's index, its count and the previous window's.
    pub fn parts(&self) -> (u64, u64, u64) {
        (self.index, self.count, self.previous)
    }

    /// The counts seen from window `index`: the current and the previous
    /// window's, as they stand (windows with nothing stored count 0).
    fn counts_at(&self, index: u64) -> (u64, u64) {
        if index == self.index {
            (self.count, self.previous)
        } else if index == self.index.saturating_add(1) {
            (0, self.count)
        } else if index > self.index {
            (0, 0)
        } else {
            // A clock that stepped back into an earlier window: the counts of the
            // latest window stay in force (nothing is forgotten, nothing locks
            // the key out for longer than the window it was counted in).
            (self.count, self.previous)
        }
    }

    /// The count the limit is held to at `now_ns`: for a fixed window the current
    /// window's count; for a sliding window the previous one's, weighted by the
    /// share of it still within `per`, plus the current one's.
    pub fn used_at(&self, limit: &Limit, now_ns: u64) -> f64 {
        let per = limit.per_ns();
        let index = now_ns / per;
        let (count, previous) = self.counts_at(index);
        match limit.algorithm() {
            Algorithm::SlidingWindow => {
                let elapsed = (now_ns % per) as f64;
                previous as f64 * ((per as f64 - elapsed) / per as f64) + count as f64
            }
            _ => count as f64,
        }
    }

    /// True when nothing counted at `now_ns` still weighs on the limit: the window
    /// is then indistinguishable from an absent one, so a store may forget it.
    pub fn is_idle(&self, limit: &Limit, now_ns: u64) -> bool {
        let index = now_ns / limit.per_ns();
        let (count, previous) = self.counts_at(index);
        count == 0 && (previous == 0 || limit.algorithm() == Algorithm::FixedWindow)
    }

    /// Counts between `min` and `max` requests (as many as the limit has room
    /// for, up to `max`), or none and says when `min` will fit. `min` is the
    /// request's cost; `max` the lease size wanted. A `min` above `requests` can
    /// never fit: it is denied with the time until the whole limit is free.
    ///
    /// A grant's `reset_ns` is when nothing counted now weighs on the limit any
    /// more: the end of the window for a fixed window; for a sliding window the
    /// end of the next one (the current count weighs on it), or of this one when
    /// only the previous window's count is left.
    pub fn take(&mut self, limit: &Limit, now_ns: u64, min: u32, max: u32) -> Take {
        let per = limit.per_ns();
        let index = now_ns / per;
        let (count, previous) = self.counts_at(index);
        let requests = f64::from(limit.requests());
        let used = self.used_at(limit, now_ns);
        let min_f = f64::from(min.max(1));
        let to_end = (index + 1)
            .saturating_mul(per)
            .saturating_sub(now_ns)
            .max(1);
        if used + min_f > requests + 1e-9 {
            let retry = match limit.algorithm() {
                Algorithm::SlidingWindow => {
                    sliding_retry(limit, now_ns % per, count, previous, min_f.min(requests))
                }
                _ => to_end,
            };
            return Take::Denied {
                retry_after_ns: retry.max(1),
            };
        }
        let room = (requests - used + 1e-9).floor();
        let granted = room.min(f64::from(max.max(1))).max(min_f) as u64;
        // A denial writes nothing; a grant rolls the counts forward to this
        // window (or, on a clock that stepped back, adds to the latest one).
        *self = Self {
            index: index.max(self.index),
            count: count.saturating_add(granted),
            previous,
        };
        let left = (requests - used - granted as f64 + 1e-9).floor().max(0.0);
        let reset_ns = match limit.algorithm() {
            Algorithm::SlidingWindow => to_end.saturating_add(per),
            _ => to_end,
        };
        Take::Granted {
            tokens: u32::try_from(granted).unwrap_or(u32::MAX),
            remaining: left as u32,
            reset_ns,
        }
    }
}

/// When `cost` fits a sliding window again, `elapsed` ns into the current
/// window holding `count`, the previous one `previous`: within this window once
/// enough of the previous one has slid out, or else at the point of the next
/// window where this one's count, weighted, leaves room.
fn sliding_retry(limit: &Limit, elapsed: u64, count: u64, previous: u64, cost: f64) -> u64 {
    let per = limit.per_ns() as f64;
    let requests = f64::from(limit.requests());
    let to_end = per - elapsed as f64;
    let room_now = requests - cost - count as f64;
    if room_now >= -1e-9 && previous > 0 {
        // previous × (per − elapsed − t) / per ≤ room_now
        let t = to_end - room_now.max(0.0) * per / previous as f64;
        if t < to_end {
            return t.max(1.0).ceil() as u64;
        }
    }
    // In the next window, s ns in: count × (per − s) / per ≤ requests − cost.
    let s = if count == 0 {
        0.0
    } else {
        (per - (requests - cost).max(0.0) * per / count as f64).max(0.0)
    };
    (to_end + s).max(1.0).ceil() as u64
}

#[cfg(test)]
mod tests;
