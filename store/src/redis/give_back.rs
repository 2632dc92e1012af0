//! A stopping agent's unspent tokens handed back ([`Buckets::give_back`]):
//! the items grouped by the node owning their bucket, one pipeline of
//! [`GIVE_BACK_SCRIPT`] calls per node on a connection of its own, under the
//! store's deadline, never retried. It runs once, at shutdown, so it keeps out
//! of the lease batchers.
//!
//! [`Buckets::give_back`]: crate::Buckets::give_back

use redis::Value;

use super::batcher::server_error;
use super::script::GIVE_BACK_SCRIPT;
use super::*;
use crate::{GiveBack, GivenBack};

impl RedisStore {
    /// [`Buckets::give_back`] for the Redis stores.
    pub(super) async fn give_back_all(&self, items: &[GiveBack]) -> Vec<GivenBack> {
        if let Err(e) = self.ensure_topology().await {
            return vec![Err(e); items.len()];
        }
        let map = self.slot_map();
        let unowned = StoreError::Unavailable("no node owns this hash slot".into());
        let mut answers: Vec<GivenBack> = vec![Err(unowned); items.len()];
        let mut by_node: HashMap<String, Vec<(usize, String)>> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let key = keys::bucket(&self.shared.cfg.key_ids, &item.key);
            if let Some(node) = map.node_of(hash_slot(&key)).and_then(|n| map.nodes.get(n)) {
                by_node.entry(node.clone()).or_default().push((i, key));
            }
        }
        for (node, keyed) in by_node {
            let sent: Vec<(&GiveBack, &str)> = keyed
                .iter()
                .filter_map(|(i, key)| Some((items.get(*i)?, key.as_str())))
                .collect();
            let results = match self.give_back_on(&node, &sent).await {
                Ok(results) => results,
                Err(e) => vec![Err(e); sent.len()],
            };
            for ((i, _), result) in keyed.iter().zip(results) {
                if let Some(answer) = answers.get_mut(*i) {
                    *answer = result;
                }
            }
        }
        answers
    }

    /// One pipeline of give-backs to `node` on its control connection (made
    /// within [`CONTROL_TIMEOUT`] if there is none yet), answered within the
    /// store's deadline.
    async fn give_back_on(
        &self,
        node: &str,
        items: &[(&GiveBack, &str)],
    ) -> Result<Vec<GivenBack>, StoreError> {
        let mut conn = match timeout(CONTROL_TIMEOUT, self.shared.control_conn(node)).await {
            Ok(conn) => conn?,
            Err(_) => return Err(StoreError::Timeout(CONTROL_TIMEOUT)),
        };
        let mut p = redis::pipe();
        p.ignore_errors();
        for (item, key) in items {
            let l = &item.limit;
            p.cmd("EVAL")
                .arg(GIVE_BACK_SCRIPT)
                .arg(1)
                .arg(*key)
                .arg(l.requests())
                .arg(l.per_ns() / 1_000_000)
                .arg(l.burst())
                .arg(item.share)
                .arg(item.tokens);
        }
        let deadline = self.shared.cfg.batch.deadline;
        let values: Vec<Value> = match timeout(deadline, p.query_async(&mut conn)).await {
            Ok(Ok(values)) => values,
            Ok(Err(e)) => return Err(StoreError::Unavailable(format!("{node}: {e}"))),
            Err(_) => return Err(StoreError::Timeout(deadline)),
        };
        Ok(values.iter().map(taken).collect())
    }
}

/// The tokens a give-back script call says its bucket took.
fn taken(value: &Value) -> GivenBack {
    match value {
        Value::Int(n) => u32::try_from(*n)
            .map_err(|_| StoreError::Failed(format!("give-back script: answered {n}"))),
        Value::ServerError(e) => Err(server_error(e)),
        v => Err(StoreError::Failed(format!(
            "give-back script: unexpected reply {v:?}"
        ))),
    }
}
