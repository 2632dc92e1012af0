//! How a store is named (`memory`, `redis://…`, `redis+cluster://…`, `rediss` for
//! TLS: the agent's `--store`, a peer region's URL, the `meshlimit` commands
//! that reach the store), and the Redis password file.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::redis::client::{EmptyPassword, Password};

/// Which store backend `--store` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    Memory,
    Redis(String),
    RedisCluster(Vec<String>),
    /// `rediss://`: a single Redis over TLS.
    RedisTls(String),
    /// `rediss+cluster://`: a Redis Cluster over TLS (every node, and the nodes
    /// `CLUSTER SLOTS` names: run the cluster with `tls-cluster yes`).
    RedisClusterTls(Vec<String>),
}

/// A Redis deployment named by a [`StoreSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// The single Redis, or the cluster's seeds (`host:port`).
    pub nodes: Vec<String>,
    pub cluster: bool,
    pub tls: bool,
}

/// Why a Redis password file was refused: unreadable, or empty.
#[derive(Debug, thiserror::Error)]
pub enum PasswordFileError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Empty {
        path: PathBuf,
        source: EmptyPassword,
    },
}

/// Why `--store` (or a peer region's URL) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreSpecError {
    /// A cluster URL whose nodes are not `HOST:PORT,HOST:PORT,…`.
    #[error("`{text}`: expected {scheme}HOST:PORT,HOST:PORT,…")]
    ClusterNodes { text: String, scheme: &'static str },
    /// A single Redis URL that is not `HOST:PORT`.
    #[error("`{text}`: expected {scheme}HOST:PORT")]
    Node { text: String, scheme: &'static str },
    #[error("unknown store `{0}`: expected memory, redis://HOST:PORT or redis+cluster://HOST:PORT,… (rediss for TLS)")]
    Unknown(String),
}

/// Reads a password file: its text without one trailing newline.
pub fn read_password_file(path: &Path) -> Result<Password, PasswordFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PasswordFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    Password::parse(text).map_err(|source| PasswordFileError::Empty {
        path: path.to_path_buf(),
        source,
    })
}

impl StoreSpec {
    /// Parses `--store`. Only the shape is checked here; reaching Redis is the
    /// store's business.
    pub fn parse(text: &str) -> Result<StoreSpec, StoreSpecError> {
        let text = text.trim();
        if text == "memory" {
            return Ok(StoreSpec::Memory);
        }
        for (scheme, tls) in [("redis+cluster://", false), ("rediss+cluster://", true)] {
            if let Some(nodes) = text.strip_prefix(scheme) {
                let nodes: Vec<String> = nodes.split(',').map(|n| n.trim().to_string()).collect();
                if nodes.iter().any(|n| !is_host_port(n)) {
                    return Err(StoreSpecError::ClusterNodes {
                        text: text.to_string(),
                        scheme,
                    });
                }
                return Ok(if tls {
                    StoreSpec::RedisClusterTls(nodes)
                } else {
                    StoreSpec::RedisCluster(nodes)
                });
            }
        }
        for (scheme, tls) in [("redis://", false), ("rediss://", true)] {
            if let Some(rest) = text.strip_prefix(scheme) {
                let node = rest.trim_end_matches('/');
                if !is_host_port(node) {
                    return Err(StoreSpecError::Node {
                        text: text.to_string(),
                        scheme,
                    });
                }
                return Ok(if tls {
                    StoreSpec::RedisTls(node.to_string())
                } else {
                    StoreSpec::Redis(node.to_string())
                });
            }
        }
        Err(StoreSpecError::Unknown(text.to_string()))
    }

    /// The Redis deployment named, or `None` for the memory store.
    pub fn redis(&self) -> Option<RedisTarget> {
        let (nodes, cluster, tls) = match self {
            StoreSpec::Memory => return None,
            StoreSpec::Redis(n) => (vec![n.clone()], false, false),
            StoreSpec::RedisTls(n) => (vec![n.clone()], false, true),
            StoreSpec::RedisCluster(n) => (n.clone(), true, false),
            StoreSpec::RedisClusterTls(n) => (n.clone(), true, true),
        };
        Some(RedisTarget {
            nodes,
            cluster,
            tls,
        })
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Redis(node) => write!(f, "redis://{node}"),
            StoreSpec::RedisCluster(nodes) => write!(f, "redis+cluster://{}", nodes.join(",")),
            StoreSpec::RedisTls(node) => write!(f, "rediss://{node}"),
            StoreSpec::RedisClusterTls(nodes) => {
                write!(f, "rediss+cluster://{}", nodes.join(","))
            }
        }
    }
}

fn is_host_port(node: &str) -> bool {
    match node.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}
