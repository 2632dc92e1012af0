//! `--map KEY=TARGET`: what each descriptor key (or key and value) of a peer's
//! configuration stands for in the request.

use std::collections::BTreeMap;

/// What a descriptor key stands for: a request part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    ClientIp,
    Method,
    Path,
    Authority,
    Route,
    Header(String),
    Query(String),
    /// A verified JWT's claim (`claim: NAME`).
    Claim(String),
    /// The upstream cluster (Envoy's `destination_cluster` action): a value
    /// is a `match.cluster`; meshlimit does not key on it.
    Cluster,
}

/// What one constant descriptor value (`generic_key`, `header_match`) stands
/// for: the requests Envoy attached it to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Condition {
    Path(String),
    PathPrefix(String),
    Method(String),
    Authority(String),
    /// A header equal to a value, or (`None`) present.
    Header(String, Option<String>),
    /// Every request the rules see.
    Any,
}

/// A `--map` option that is neither `KEY=TARGET` nor `KEY:VALUE=CONDITION`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--map `{0}`: write KEY=TARGET (TARGET: client_ip, method, path, authority, \
     route, cluster, header:NAME, query:NAME, claim:NAME) or KEY:VALUE=CONDITION (CONDITION: path:/P, \
     path_prefix:/P, method:M, authority:HOST, header:NAME, header:NAME=VALUE, any)"
)]
pub struct MapError(String);

/// The `--map` options, with the defaults under them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mapping {
    pub(super) keys: BTreeMap<String, Target>,
    pub(super) values: BTreeMap<(String, String), Condition>,
}

impl Mapping {
    /// The defaults (`remote_address` is the client IP, `destination_cluster`
    /// the upstream cluster, as Envoy's actions of those names fill them),
    /// then each `--map`.
    pub(crate) fn from_options(options: &[String]) -> Result<Self, MapError> {
        let mut m = Mapping::default();
        m.keys.insert("remote_address".into(), Target::ClientIp);
        m.keys.insert("destination_cluster".into(), Target::Cluster);
        for option in options {
            m.add(option)?;
        }
        Ok(m)
    }

    fn add(&mut self, option: &str) -> Result<(), MapError> {
        let usage = || MapError(option.to_string());
        let (lhs, rhs) = option.split_once('=').ok_or_else(usage)?;
        match lhs.split_once(':') {
            None if !lhs.is_empty() => {
                let target = match rhs.split_once(':') {
                    None => match rhs {
                        "client_ip" => Target::ClientIp,
                        "method" => Target::Method,
                        "path" => Target::Path,
                        "authority" => Target::Authority,
                        "route" => Target::Route,
                        "cluster" => Target::Cluster,
                        _ => return Err(usage()),
                    },
                    Some(("header", name)) if !name.is_empty() => {
                        Target::Header(name.to_ascii_lowercase())
                    }
                    Some(("query", name)) if !name.is_empty() => Target::Query(name.to_string()),
                    Some(("claim", name)) if !name.is_empty() => Target::Claim(name.to_string()),
                    Some(_) => return Err(usage()),
                };
                self.keys.insert(lhs.to_string(), target);
            }
            Some((key, value)) if !key.is_empty() => {
                let condition = match rhs.split_once(':') {
                    None if rhs == "any" => Condition::Any,
                    Some(("path", p)) if p.starts_with('/') => Condition::Path(p.into()),
                    Some(("path_prefix", p)) if p.starts_with('/') => {
                        Condition::PathPrefix(p.into())
                    }
                    Some(("method", m)) if !m.is_empty() => Condition::Method(m.into()),
                    Some(("authority", h)) if !h.is_empty() => Condition::Authority(h.into()),
                    Some(("header", h)) => match h.split_once('=') {
                        Some((name, v)) if !name.is_empty() => {
                            Condition::Header(name.to_ascii_lowercase(), Some(v.into()))
                        }
                        None if !h.is_empty() => Condition::Header(h.to_ascii_lowercase(), None),
                        _ => return Err(usage()),
                    },
                    _ => return Err(usage()),
                };
                self.values
                    .insert((key.to_string(), value.to_string()), condition);
            }
            _ => return Err(usage()),
        }
        Ok(())
    }
}
