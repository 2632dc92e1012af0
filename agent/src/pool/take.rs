//! What the node pool can do for one ask ([`PoolTake`]), the answer of
//! [`Pools::take`](super::Pools::take), and how a key's entry finds it.

use meshlimit_core::pool_entry::{Ask, Take};
use tokio::sync::broadcast;

use super::Entry;

/// What the pool can do for one ask: [`Take`], a wait holding the receiver
/// the store call's end is told on (it is sent to or closed then; then the
/// ask takes again).
pub type PoolTake = Take<broadcast::Receiver<()>>;

impl Entry {
    /// Serves `ask` from the pool if it can; otherwise it is turned away, waits
    /// on the store call in flight, or starts one (whose end the asks that
    /// come meanwhile wait on).
    pub(super) fn take(&mut self, ask: &Ask) -> PoolTake {
        let take = self.key.take(ask, self.call.is_some());
        if take.starts_call() {
            self.call = Some(broadcast::channel(1).0);
        }
        // `take` waits only when told there is a call to wait on.
        take.with_wait(|()| {
            self.call
                .get_or_insert_with(|| broadcast::channel(1).0)
                .subscribe()
        })
    }
}
