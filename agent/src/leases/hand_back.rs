//! The node pool's unspent tokens handed back to the store as the agent
//! stops (an upgrade on the node: docs/operations/upgrading.md), so that the
//! tokens it leased and had not handed out are not lost to the region's limit.
//! Tokens the filters hold are theirs: they expire with their lease.

use meshlimit_store::{GiveBack, GivenBack};

use super::LeaseService;

/// What [`LeaseService::hand_back`] did with the node pool's tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandedBack {
    /// Keys that had tokens pooled.
    pub keys: usize,
    /// Tokens their buckets took.
    pub tokens: u64,
    /// Tokens their buckets had no room for (full to their burst).
    pub capped: u64,
    /// Tokens of the keys whose hand-back failed: they expire with their lease.
    pub failed: u64,
}

impl HandedBack {
    /// Both hand-backs' figures together.
    pub fn and(self, other: HandedBack) -> HandedBack {
        HandedBack {
            keys: self.keys + other.keys,
            tokens: self.tokens + other.tokens,
            capped: self.capped + other.capped,
            failed: self.failed + other.failed,
        }
    }
}

impl LeaseService {
    /// Hands the node pool's unspent token-bucket tokens back to the store
    /// (one call, the store's deadline, never retried) and counts them by
    /// result in `meshlimit_pool_handed_back_tokens_total`; the pool fetches
    /// nothing ahead after. `run` calls it when shutdown begins, while the
    /// open connections are still served (pooled tokens live a lease TTL,
    /// shorter than the handover), and again once the server has drained, for
    /// what the asks served in between left pooled.
    pub async fn hand_back(&self) -> HandedBack {
        let rules = self.rules.get();
        let items = self.pools.hand_back(self.now_ns(), |key| {
            let rule = rules.as_deref()?.rule(key.rule())?;
            Some(self.shares.share(rule, key))
        });
        let mut done = HandedBack {
            keys: items.len(),
            ..HandedBack::default()
        };
        if items.is_empty() {
            return done;
        }
        let answers = self.store.give_back(&items).await;
        for (item, answer) in items.iter().zip(answers) {
            self.count_handed_back(item, answer, &mut done);
        }
        self.metrics.pool_handed_back("ok", done.tokens);
        self.metrics.pool_handed_back("capped", done.capped);
        done
    }

    /// Adds one key's hand-back to `done` (a failure to its metric at once),
    /// logged at debug level by the key's id.
    fn count_handed_back(&self, item: &GiveBack, answer: GivenBack, done: &mut HandedBack) {
        let offered = u64::from(item.tokens);
        let taken = match &answer {
            Ok(taken) => u64::from(*taken).min(offered),
            Err(e) => {
                self.metrics.pool_handed_back(e.metric_result(), offered);
                done.failed += offered;
                0
            }
        };
        if answer.is_ok() {
            done.tokens += taken;
            done.capped += offered - taken;
        }
        tracing::debug!(
            rule = item.key.rule(),
            key = %self.metrics.key_id(&item.key),
            offered,
            taken,
            ok = answer.is_ok(),
            "pooled tokens handed back"
        );
    }
}
