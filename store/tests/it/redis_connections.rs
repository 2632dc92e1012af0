//! Calls off the lease path (the heartbeat, the fleet override's read,
//! readiness pings, the cluster's slot map) share one connection a node: an
//! agent makes several of them a second, and a connection each would cost
//! Redis a TCP accept (and a TLS handshake) every time, from every agent.

use std::sync::Arc;

use meshlimit_store::redis::RedisStore;
use meshlimit_store::{Backend, Buckets, FleetState};
use meshlimit_tests::{RedisCluster, RedisServer, Resp};

use crate::common::redis_store_config;

/// `total_connections_received` of the server's `INFO stats`, this read's own
/// connection included.
fn received(info: Resp) -> u64 {
    let text = info.text().unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in {text}"))
}

async fn calls_off_the_lease_path(store: &RedisStore, rounds: usize) {
    for _ in 0..rounds {
        store.heartbeat("agent-a").await.unwrap();
        store.fleet_override().await.unwrap();
        store.ping().await.unwrap();
    }
}

#[tokio::test]
async fn a_single_redis_sees_one_connection_for_many_calls() {
    let server = RedisServer::start();
    let store = RedisStore::new(
        redis_store_config(vec![server.addr()], false),
        Arc::new(|_, _, _| {}),
    );
    let before = received(server.cmd(&["INFO", "stats"]));
    calls_off_the_lease_path(&store, 20).await;
    // Less the second INFO's own connection.
    let opened = received(server.cmd(&["INFO", "stats"])) - before - 1;
    assert_eq!(opened, 1, "connections opened for 60 calls");
}

#[tokio::test]
async fn each_cluster_node_sees_one_connection_for_many_calls() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::new(
        redis_store_config(cluster.addrs(), true),
        Arc::new(|_, _, _| {}),
    );
    let nodes = cluster.ports().len();
    let sum = || -> u64 {
        (0..nodes)
            .map(|n| received(cluster.cmd(n, &["INFO", "stats"])))
            .sum()
    };
    let before = sum();
    calls_off_the_lease_path(&store, 10).await;
    for _ in 0..10 {
        store.refresh_topology().await.unwrap();
    }
    // Less the second round of INFO's own connections. Each node gets its
    // control connection, and at most the lease batcher's, opened ahead (in
    // the background) when the node first appears in the slot map.
    let opened = sum() - before - nodes as u64;
    assert!(
        opened <= 2 * nodes as u64,
        "{opened} connections opened for 40 calls to {nodes} nodes"
    );
}
