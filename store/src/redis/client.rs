//! The one place Redis clients are built, for the lease store (one client per
//! node) and for the region tasks (a single Redis or a cluster client): the
//! address, the ACL credentials and TLS.
//!
//! TLS is chosen by the URL's scheme (`rediss://`, `rediss+cluster://`) and uses
//! rustls; the CA (else the system's roots) and an optional client certificate
//! come from PEM files read once at start. Hostnames (or IP addresses) are
//! verified against the server's certificate: there is no insecure mode.
//!
//! Secrets never reach a log line: [`Password`] prints as `<redacted>`, and
//! every error here names the node only.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

/// Why a Redis client cannot be built: it names the node or the file, never
/// a credential.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--redis-cert and --redis-key go together")]
    CertWithoutKey,
    #[error("{0}: not HOST:PORT")]
    NotHostPort(String),
    #[error("{0}: bad port")]
    BadPort(String),
    #[error("{0}: bad address")]
    BadAddress(String),
    #[error("{node}: cannot build a client: {source}")]
    Client {
        node: String,
        source: redis::RedisError,
    },
    #[error("cannot build a cluster client: {0}")]
    Cluster(redis::RedisError),
}

/// A secret (a Redis password): its `Debug` and `Display` print `<redacted>`,
/// so no log line, error or config dump can carry it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

/// A password must not be empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an empty password")]
pub struct EmptyPassword;

impl Password {
    /// Any non-empty text (clap's parser of `--redis-password`).
    pub fn parse(text: &str) -> Result<Password, EmptyPassword> {
        if text.is_empty() {
            return Err(EmptyPassword);
        }
        Ok(Password(text.to_string()))
    }

    /// The secret itself, for the AUTH command only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Password {
    fn from(text: &str) -> Self {
        Password(text.to_string())
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How to connect to one deployment's Redis nodes: credentials and TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connect {
    /// Redis ACL user, if the server asks for one.
    pub username: Option<String>,
    pub password: Option<Password>,
    /// Connect with TLS (the URL was `rediss://` or `rediss+cluster://`).
    pub tls: bool,
    /// What TLS trusts and presents; `None` with `tls`: the system's roots, no
    /// client certificate.
    pub tls_files: Option<TlsFiles>,
}

/// PEM material for TLS, read from files at start. Its `Debug` shows which parts
/// are set, never their bytes.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificates the server's certificate must chain to.
    pub(crate) ca: Option<Vec<u8>>,
    /// A client certificate (chain) and its private key, for servers that ask.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca.as_ref().map(|_| "<set>"))
            .field("client", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl TlsFiles {
    /// Reads the CA and the client certificate and key; the certificate and key
    /// go together. `None` when no file is named.
    pub fn load(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<TlsFiles>, ClientError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| ClientError::File {
                path: p.to_path_buf(),
                source,
            })
        };
        let client = match (cert, key) {
            (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
            (None, None) => None,
            _ => return Err(ClientError::CertWithoutKey),
        };
        let ca = ca.map(read).transpose()?;
        Ok((ca.is_some() || client.is_some()).then_some(TlsFiles { ca, client }))
    }

    fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        }
    }
}

/// Connection details of `host:port` (address, TLS, credentials).
pub(crate) fn connection_info(node: &str, c: &Connect) -> Result<ConnectionInfo, ClientError> {
    let (host, port) = node
        .rsplit_once(':')
        .ok_or_else(|| ClientError::NotHostPort(node.to_string()))?;
    let port: u16 = port
        .parse()
        .map_err(|_| ClientError::BadPort(node.to_string()))?;
    let addr = if c.tls {
        ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.to_string(), port)
    };
    let mut settings = redis::RedisConnectionInfo::default();
    if let Some(user) = &c.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &c.password {
        settings = settings.set_password(password.expose());
    }
    Ok(addr
        .into_connection_info()
        .map_err(|_| ClientError::BadAddress(node.to_string()))?
        .set_redis_settings(settings))
}

/// A client for one node.
pub fn client(node: &str, c: &Connect) -> Result<redis::Client, ClientError> {
    let info = connection_info(node, c)?;
    let client = match (&c.tls_files, c.tls) {
        (Some(files), true) => redis::Client::build_with_tls(info, files.certificates()),
        _ => redis::Client::open(info),
    };
    client.map_err(|source| ClientError::Client {
        node: node.to_string(),
        source,
    })
}

/// A cluster client over the seed `nodes`; every call within `deadline`, never
/// retried.
pub fn cluster_client(
    nodes: &[String],
    c: &Connect,
    deadline: Duration,
) -> Result<ClusterClient, ClientError> {
    let infos = nodes
        .iter()
        .map(|n| connection_info(n, c))
        .collect::<Result<Vec<_>, _>>()?;
    let mut builder = ClusterClientBuilder::new(infos)
        .connection_timeout(deadline)
        .response_timeout(deadline)
        .retries(0);
    if let (Some(files), true) = (&c.tls_files, c.tls) {
        builder = builder.certs(files.certificates());
    }
    builder.build().map_err(ClientError::Cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_debug() {
        let c = Connect {
            username: Some("app".into()),
            password: Some(Password::from("hunter2")),
            tls: true,
            tls_files: Some(TlsFiles {
                ca: Some(b"CA".to_vec()),
                client: Some((b"CERT".to_vec(), b"PRIVATE KEY".to_vec())),
            }),
        };
        let text = format!("{c:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("PRIVATE"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn the_scheme_picks_tls() {
        let plain = connection_info("127.0.0.1:6379", &Connect::default());
        assert!(matches!(
            plain.map(|i| i.addr().clone()),
            Ok(ConnectionAddr::Tcp(_, 6379))
        ));
        let tls = Connect {
            tls: true,
            ..Connect::default()
        };
        assert!(matches!(
            connection_info("h:1", &tls).map(|i| i.addr().clone()),
            Ok(ConnectionAddr::TcpTls {
                insecure: false,
                ..
            })
        ));
    }
}
