//! What the node pool can do for one ask ([`PoolTake`]), the answer of
//! [`Pools::take`](super::Pools::take), and how a key's entry finds it.

use meshlimit_core::pool_entry::{Ask, Take};
use tokio::sync::broadcast;

use super::Entry;

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

impl Entry {
    /// Serves `ask` from the pool if it can; otherwise it is turned away, waits
    /// on the store call in flight, or starts one (whose end the asks that
    /// come meanwhile wait on).
    pub(super) fn take(&mut self, ask: &Ask) -> PoolTake {
        let take = self.key.take(ask, self.call.is_some());
        match take {
            Take::Served {
                tokens,
                remaining,
                reset_ns,
                refill,
                next_ask_ns,
            } => {
                if refill {
                    self.call = Some(broadcast::channel(1).0);
                }
                PoolTake::Served {
                    tokens,
                    remaining,
                    reset_ns,
                    refill,
                    next_ask_ns,
                }
            }
            Take::Denied { retry_after_ns } => PoolTake::Denied { retry_after_ns },
            Take::Wait => match &self.call {
                Some(tx) => PoolTake::Wait(tx.subscribe()),
                // Not reached (`take` waits only when told there is a call
                // to wait on); were it, asking the store is correct, only
                // costlier.
                None => {
                    self.call = Some(broadcast::channel(1).0);
                    PoolTake::Miss {
                        demand_per_sec: self.key.demand(ask.now_ns),
                        dropped: 0,
                        waited: 0,
                    }
                }
            },
            Take::Miss {
                demand_per_sec,
                dropped,
                waited,
            } => {
                self.call = Some(broadcast::channel(1).0);
                PoolTake::Miss {
                    demand_per_sec,
                    dropped,
                    waited,
                }
            }
        }
    }
}
