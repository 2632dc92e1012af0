//! Token bucket with lazy refill. The same maths runs in three places: the agent's
//! embedded store, the filter's fail-local bucket, and (in Lua) the Redis script, so
//! tokens are an `f64` as they are in Lua and time is passed in, never read.

use serde::{Deserialize, Serialize};

use crate::limit::Limit;

/// Bucket state: tokens held at `updated_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    tokens: f64,
    updated_ns: u64,
}

/// The result of asking a bucket for tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Take {
    /// `tokens` were taken; `remaining` whole tokens are left; the bucket is full
    /// again after `reset_ns`.
    Granted {
        tokens: u32,
        remaining: u32,
        reset_ns: u64,
    },
    /// Not enough tokens: the minimum asked for exists after `retry_after_ns`.
    Denied { retry_after_ns: u64 },
}

impl Bucket {
    /// A full bucket, as an unseen key starts.
    pub fn full(limit: &Limit, now_ns: u64) -> Self {
        Self {
            tokens: f64::from(limit.burst()),
            updated_ns: now_ns,
        }
    }

    /// Rebuilds a bucket from stored parts (see [`Bucket::parts`]).
    pub fn from_parts(tokens: f64, updated_ns: u64) -> Self {
        let tokens = if tokens.is_finite() {
            tokens.max(0.0)
        } else {
            0.0
        };
        Self { tokens, updated_ns }
    }

    /// The stored parts: tokens held at the last update, and its time.
    pub fn parts(&self) -> (f64, u64) {
        (self.tokens, self.updated_ns)
    }

    /// Tokens held at `now_ns`, after refill (fractional).
    pub fn tokens_at(&self, limit: &Limit, now_ns: u64) -> f64 {
        // A clock that steps backwards refills nothing rather than draining.
        let elapsed = now_ns.saturating_sub(self.updated_ns) as f64;
        (self.tokens + elapsed * limit.rate_per_ns()).min(f64::from(limit.burst()))
    }

    /// True when the bucket is full at `now_ns`: it is then indistinguishable from an
    /// absent one, so a store may forget it without granting anything extra.
    pub fn is_full(&self, limit: &Limit, now_ns: u64) -> bool {
        self.tokens_at(limit, now_ns) >= f64::from(limit.burst())
    }

    /// Takes between `min` and `max` whole tokens (as many as are held, up to `max`),
    /// or none and says when `min` will be there. `min` is the request's cost; `max`
    /// is the lease size wanted. A `min` above the burst can never be granted: it is
    /// denied with the time a full bucket would take.
    pub fn take(&mut self, limit: &Limit, now_ns: u64, min: u32, max: u32) -> Take {
        let held = self.tokens_at(limit, now_ns);
        self.tokens = held;
        self.updated_ns = self.updated_ns.max(now_ns);
        let min = f64::from(min.max(1));
        let rate = limit.rate_per_ns();
        // The epsilon absorbs float rounding, so that waiting exactly the retry time
        // we announced is always enough.
        if held + 1e-9 < min {
            let missing = min.min(f64::from(limit.burst())) - held;
            return Take::Denied {
                retry_after_ns: (missing / rate).ceil().max(1.0) as u64,
            };
        }
        let granted = (held + 1e-9).floor().min(f64::from(max.max(1))).max(min);
        self.tokens = (held - granted).max(0.0);
        Take::Granted {
            tokens: granted as u32,
            remaining: self.tokens.floor() as u32,
            reset_ns: ((f64::from(limit.burst()) - self.tokens) / rate).ceil() as u64,
        }
    }
}

#[cfg(test)]
mod tests;
