//! The backends the suite runs against: a store started fresh for one
//! behaviour, or (Redis Cluster) a fresh store over a cluster shared by the
//! behaviours of one test and emptied before each.

use std::sync::Arc;

use meshlimit_store::redis::RedisStore;
use meshlimit_store::MemoryStore;
use meshlimit_tests::{RedisCluster, RedisServer, Resp};

use super::{common, Store};

/// A store under test and whatever it runs on (killed on drop).
pub(crate) struct Backend {
    pub(crate) store: Box<dyn Store>,
    _redis: Option<RedisServer>,
    _cluster: Option<Arc<RedisCluster>>,
}

impl Backend {
    /// Runs a command on the Redis node holding the `{fleet}` keys, as
    /// someone with write access to Redis but not the deployment secret
    /// would; `None` for the memory store, which nothing outside writes.
    pub(crate) fn raw(&self, args: &[&str]) -> Option<Resp> {
        if let Some(server) = &self._redis {
            return Some(server.cmd(args));
        }
        let cluster = self._cluster.as_ref()?;
        (0..cluster.ports().len())
            .map(|node| cluster.cmd(node, args))
            .find(|r| !matches!(r, Resp::Error(e) if e.starts_with("MOVED")))
    }
}

pub(crate) async fn memory() -> Backend {
    Backend {
        store: Box::new(MemoryStore::new()),
        _redis: None,
        _cluster: None,
    }
}

pub(crate) async fn redis() -> Backend {
    let server = RedisServer::start();
    let store = RedisStore::new(
        common::redis_store_config(vec![server.addr()], false),
        Arc::new(|_, _, _| {}),
    );
    Backend {
        store: Box::new(store),
        _redis: Some(server),
        _cluster: None,
    }
}

/// A fresh store over `cluster`, emptied first (`FLUSHALL` on every node):
/// to a behaviour, the same as a cluster of its own.
pub(crate) async fn redis_cluster_on(cluster: &Arc<RedisCluster>) -> Backend {
    for node in 0..cluster.ports().len() {
        assert_eq!(
            cluster.cmd(node, &["FLUSHALL", "SYNC"]),
            Resp::Simple("OK".into()),
            "FLUSHALL on node {node}"
        );
    }
    let store = RedisStore::new(
        common::redis_store_config(cluster.addrs(), true),
        Arc::new(|_, _, _| {}),
    );
    store.refresh_topology().await.unwrap();
    Backend {
        store: Box::new(store),
        _redis: None,
        _cluster: Some(Arc::clone(cluster)),
    }
}
