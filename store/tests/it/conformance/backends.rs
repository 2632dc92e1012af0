//! The backends the suite runs against, each started fresh for one test.

use std::sync::Arc;

use meshlimit_store::redis::RedisStore;
use meshlimit_store::MemoryStore;
use meshlimit_tests::{RedisCluster, RedisServer, Resp};

use super::{common, Store};

/// A store under test and whatever it runs on (killed on drop).
pub(crate) struct Backend {
    pub(crate) store: Box<dyn Store>,
    _redis: Option<RedisServer>,
    _cluster: Option<RedisCluster>,
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

pub(crate) async fn redis_cluster() -> Backend {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::new(
        common::redis_store_config(cluster.addrs(), true),
        Arc::new(|_, _, _| {}),
    );
    store.refresh_topology().await.unwrap();
    Backend {
        store: Box::new(store),
        _redis: None,
        _cluster: Some(cluster),
    }
}
