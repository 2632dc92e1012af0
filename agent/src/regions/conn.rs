//! A connection to one region's Redis (a single Redis or a Redis Cluster) for the
//! background region tasks, separate from the lease path's batchers so that a
//! slow peer can never hold up a lease. Every call has a deadline and is never
//! retried: the next tick is the retry. A call that finds its connection lost
//! starts a probe instead: a `PING` every [`PROBE_EVERY`], each under the
//! deadline, until one is answered, so the connection is made again while the
//! region is away and the first call after it returns finds one (without it,
//! that call would fail on the connection the outage broke, and the shares
//! would wait a period more). A probe sends no command of the region's; one
//! runs at a time per connection.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::{Cmd, FromRedisValue, Pipeline};
use tokio::sync::Mutex;
use tokio::time::timeout;

use crate::config::StoreSpec;
use meshlimit_store::redis::client::{self, Connect};

/// Why a region's Redis could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    #[error("region {region}: no answer within {after:?}")]
    Timeout { region: String, after: Duration },
    #[error("region {region}: {reason}")]
    Redis { region: String, reason: String },
    #[error("region {region}: {reason}")]
    Config { region: String, reason: String },
    /// The region's rebalancer had not sealed the period's demand in time (it is
    /// dead, late, or cannot reach its own Redis).
    #[error("region {region}: demand of period {period} not sealed in time")]
    NotSealed { region: String, period: u64 },
}

/// How often a lost connection is probed until it answers.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

/// One region's Redis.
pub struct RegionConn {
    region: String,
    deadline: Duration,
    kind: Kind,
    /// A probe of a lost connection runs.
    probing: Arc<AtomicBool>,
}

#[derive(Clone)]
enum Kind {
    Single(ConnectionManager),
    /// Connected on first use and again after a failure, so an agent starts while
    /// a peer is down.
    Cluster(Arc<Cluster>),
}

struct Cluster {
    client: ClusterClient,
    conn: Mutex<Option<ClusterConnection>>,
}

impl RegionConn {
    /// Opens nothing yet: connections are made on first use.
    pub fn new(
        region: &str,
        spec: &StoreSpec,
        connect: &Connect,
        deadline: Duration,
    ) -> Result<Self, RegionError> {
        let config_error = |reason: String| RegionError::Config {
            region: region.to_string(),
            reason,
        };
        let Some(target) = spec.redis() else {
            return Err(config_error("regions need a Redis store".into()));
        };
        // The URL's scheme decides TLS, whatever the caller built.
        let connect = &Connect {
            tls: target.tls,
            ..connect.clone()
        };
        let kind = if target.cluster {
            let client = client::cluster_client(&target.nodes, connect, deadline)
                .map_err(|e| config_error(e.to_string()))?;
            Kind::Cluster(Arc::new(Cluster {
                client,
                conn: Mutex::new(None),
            }))
        } else {
            let node = target.nodes.first().map(String::as_str).unwrap_or_default();
            let client = client::client(node, connect).map_err(|e| config_error(e.to_string()))?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(deadline))
                .set_response_timeout(None)
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(500));
            let conn = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|e| config_error(e.to_string()))?;
            Kind::Single(conn)
        };
        Ok(Self {
            region: region.to_string(),
            deadline,
            kind,
            probing: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    /// Runs one command within the deadline.
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RegionError> {
        self.run(|c| async move {
            match c {
                Conn::Single(mut c) => cmd.query_async(&mut c).await,
                Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
            }
        })
        .await
    }

    /// Runs one pipeline within the deadline; with a cluster, every key of the
    /// pipeline must be in one hash slot.
    pub(crate) async fn pipe<T: FromRedisValue>(&self, p: &Pipeline) -> Result<T, RegionError> {
        self.run(|c| async move {
            match c {
                Conn::Single(mut c) => p.query_async(&mut c).await,
                Conn::Cluster(mut c) => p.query_async(&mut c).await,
            }
        })
        .await
    }

    async fn run<T, F, Fut>(&self, f: F) -> Result<T, RegionError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let call = async {
            let result = f(self.kind.conn().await?).await;
            if let Err(e) = &result {
                if connection_lost(e) {
                    self.kind.forget().await;
                    self.probe();
                }
            }
            result
        };
        match timeout(self.deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(RegionError::Redis {
                region: self.region.clone(),
                reason: e.to_string(),
            }),
            Err(_) => Err(RegionError::Timeout {
                region: self.region.clone(),
                after: self.deadline,
            }),
        }
    }

    /// Starts the probe of a lost connection, unless one runs.
    fn probe(&self) {
        if self.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        let (kind, probing, deadline) = (self.kind.clone(), self.probing.clone(), self.deadline);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                let ping = async {
                    let conn = kind.conn().await?;
                    let cmd = redis::cmd("PING");
                    match conn {
                        Conn::Single(mut c) => cmd.query_async::<()>(&mut c).await,
                        Conn::Cluster(mut c) => cmd.query_async::<()>(&mut c).await,
                    }
                };
                match timeout(deadline, ping).await {
                    Ok(Ok(())) => break,
                    Ok(Err(e)) if connection_lost(&e) => kind.forget().await,
                    _ => {}
                }
            }
            probing.store(false, Ordering::SeqCst);
        });
    }
}

impl Kind {
    /// Drops a cluster's lost connection, to be made again on next use (a
    /// single Redis's manager makes its own again).
    async fn forget(&self) {
        if let Kind::Cluster(cluster) = self {
            *cluster.conn.lock().await = None;
        }
    }

    async fn conn(&self) -> redis::RedisResult<Conn> {
        match self {
            Kind::Single(c) => Ok(Conn::Single(c.clone())),
            Kind::Cluster(cluster) => {
                let mut held = cluster.conn.lock().await;
                if let Some(c) = held.as_ref() {
                    return Ok(Conn::Cluster(c.clone()));
                }
                let c = cluster.client.get_async_connection().await?;
                *held = Some(c.clone());
                Ok(Conn::Cluster(c))
            }
        }
    }
}

/// True when the call's connection is gone (the errors on which a single
/// Redis's manager connects again).
fn connection_lost(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// A cheap clone of a multiplexed connection.
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}
