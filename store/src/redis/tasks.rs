//! The store's background work, off the request path: the hash slot map refresher,
//! connecting a new owner before its first lease, and probing a node that is
//! down until it answers again.

use std::sync::Weak;

use tokio::time::{timeout, Instant};

use super::*;

/// Reads the hash slot map off the request path: at once when woken (a node went
/// down, a MOVED answer), every [`health::PROBE_EVERY`] while a node is down (so
/// a promotion is seen within that) or slots are moving ([`MOVING_WATCH`]),
/// else every [`REFRESH_EVERY`].
pub(super) async fn refresher(shared: Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let _ = s.refresh().await;
        let moving = s
            .moving_until
            .lock()
            .is_ok_and(|u| u.is_some_and(|u| Instant::now() < u));
        let every = if moving || s.health.lock().is_ok_and(|h| h.any_down()) {
            health::PROBE_EVERY
        } else {
            REFRESH_EVERY
        };
        let woken = async {
            s.wake.notified().await;
        };
        let _ = timeout(every, woken).await;
    }
}

/// Opens the connection of a node that just took hash slots (a promoted replica),
/// so its first leases do not wait for it.
pub(super) async fn prewarm(shared: Weak<Shared>, node: String) {
    let Some(s) = shared.upgrade() else { return };
    let Ok(client) = client(&node, &s.cfg) else {
        return;
    };
    drop(s);
    let connect = ConnectionManager::new_with_config(client, connection_config());
    if let Ok(Ok(conn)) = timeout(CONTROL_TIMEOUT, connect).await {
        if let Some(s) = shared.upgrade() {
            let known = s.batchers.read().is_ok_and(|b| b.contains_key(&node));
            if !known {
                s.install(&node, conn);
            }
        }
    }
}

/// Watches a down node: a PING on a fresh connection every
/// [`health::PROBE_EVERY`]; once it answers, that connection becomes the node's
/// batcher's and its keys go to it again. Stops when the node leaves the hash slot
/// map (a replica took its hash slots) or the store is dropped.
pub(super) async fn probe(shared: Weak<Shared>, node: String) {
    loop {
        tokio::time::sleep(health::PROBE_EVERY).await;
        let Some(s) = shared.upgrade() else { return };
        let mapped = s.map.read().is_ok_and(|m| m.nodes.contains(&node));
        if !mapped {
            let down = s
                .health
                .lock()
                .ok()
                .and_then(|mut h| h.forget(&node, Instant::now()));
            if let Some(down) = down {
                tracing::info!(
                    node,
                    ?down,
                    "Redis node replaced in the hash slot map: its hash slots are served again"
                );
                (s.events)(StoreEvent::NodeReplaced(down));
            }
            return;
        }
        let Ok(client) = client(&node, &s.cfg) else {
            continue;
        };
        let ping = async {
            let mut conn = ConnectionManager::new_with_config(client, connection_config()).await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
            Ok::<_, redis::RedisError>(conn)
        };
        if let Ok(Ok(conn)) = timeout(CONTROL_TIMEOUT, ping).await {
            s.install(&node, conn);
            let down = s
                .health
                .lock()
                .ok()
                .and_then(|mut h| h.succeeded(&node, Instant::now()));
            let down = down.unwrap_or_default();
            tracing::info!(
                node,
                ?down,
                "Redis node answers again: its hash slots are served again"
            );
            (s.events)(StoreEvent::NodeUp(down));
            s.wake.notify_one();
            return;
        }
    }
}

pub(super) async fn cluster_slots(s: &Shared, node: &str) -> Result<HashSlotMap, StoreError> {
    let mut c = s.control_conn(node).await?;
    let rows: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut c)
        .await
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    let mut out = Vec::new();
    for row in rows {
        let redis::Value::Array(parts) = row else {
            continue;
        };
        let (
            Some(redis::Value::Int(first)),
            Some(redis::Value::Int(last)),
            Some(redis::Value::Array(master)),
        ) = (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_string(),
            _ => continue,
        };
        let Some(redis::Value::Int(port)) = master.get(1) else {
            continue;
        };
        let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
            continue;
        };
        out.push((first, last, format!("{host}:{port}")));
    }
    if out.is_empty() {
        return Err(StoreError::Unavailable(format!(
            "{node}: CLUSTER SLOTS is empty"
        )));
    }
    Ok(HashSlotMap::from_rows(out))
}
