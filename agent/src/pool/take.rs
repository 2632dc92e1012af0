//! What the node pool can do for one ask ([`PoolTake`]), the answer of
//! [`Pools::take`](super::Pools::take).

use tokio::sync::broadcast;

/// What the pool can do for one ask.
#[derive(Debug)]
pub enum PoolTake {
    /// Served from the pool: `tokens` for the filter. `refill`: the pool fell
    /// below its refill mark and has a store call marked in flight; the caller
    /// starts it (in the background) and reports its end.
    Served {
        tokens: u32,
        remaining: u32,
        reset_ns: u64,
        refill: bool,
        /// The filter's next turn, for a node far over its share (see
        /// [`Pools::fill_then_hold`](super::Pools::fill_then_hold)): it asks again no sooner.
        next_ask_ns: Option<u64>,
    },
    /// The node knows the key is over its limit until `retry_after_ns` from now.
    Denied { retry_after_ns: u64 },
    /// A store call for the key is in flight: wait for its end (the receiver
    /// is sent to or closed then), then take again.
    Wait(broadcast::Receiver<()>),
    /// Ask the store (the call is marked in flight: report its end);
    /// `demand_per_sec` is this node's recent demand for the key; `dropped`
    /// pooled tokens expired unspent; `waited`: asks that waited on the last
    /// call and may still want tokens (the lease should cover them too).
    Miss {
        demand_per_sec: f64,
        dropped: u32,
        waited: u32,
    },
}

impl PartialEq for PoolTake {
    /// Equal answers; two waits are never equal (their calls differ).
    fn eq(&self, other: &Self) -> bool {
        use PoolTake::*;
        match (self, other) {
            (
                Served {
                    tokens: a,
                    remaining: b,
                    reset_ns: c,
                    refill: d,
                    next_ask_ns: i,
                },
                Served {
                    tokens: e,
                    remaining: f,
                    reset_ns: g,
                    refill: h,
                    next_ask_ns: j,
                },
            ) => (a, b, c, d, i) == (e, f, g, h, j),
            (Denied { retry_after_ns: a }, Denied { retry_after_ns: b }) => a == b,
            (
                Miss {
                    demand_per_sec: a,
                    dropped: b,
                    waited: c,
                },
                Miss {
                    demand_per_sec: d,
                    dropped: e,
                    waited: f,
                },
            ) => (a, b, c) == (d, e, f),
            _ => false,
        }
    }
}
