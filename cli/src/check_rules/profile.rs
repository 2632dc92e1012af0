//! `check-rules --profile`: where a rules file is deployed, and what cannot
//! work there. A gateway (Envoy at the edge, an ingress gateway) sees the
//! client's address and routes to outbound clusters; a sidecar's inbound side
//! sees the calling pod's address (the ingress gateway's, for every outside
//! client) and names its cluster `inbound|PORT||`. A rule that reads either
//! the wrong way for its place limits the wrong thing, or nothing, without
//! an error anywhere else: here it is one.

use std::sync::Arc;

use meshlimit_core::rules::config::{KeyPartConfig, RuleConfig, RulesConfig};
use meshlimit_core::rules::{RuleError, RuleSet};

pub use crate::args::Profile;

/// Whether `port` is one, as an inbound cluster name writes it.
fn is_port(port: &str) -> bool {
    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
}

/// Whether a `match.cluster` pattern (a name, or `*` then a suffix) can name
/// the cluster of some inbound port, `inbound|PORT||`.
fn may_name_inbound(pattern: &str) -> bool {
    let Some(suffix) = pattern.strip_prefix('*') else {
        return pattern
            .strip_prefix("inbound|")
            .and_then(|rest| rest.strip_suffix("||"))
            .is_some_and(is_port);
    };
    if "||".ends_with(suffix) {
        return true;
    }
    let Some(body) = suffix.strip_suffix("||") else {
        return false;
    };
    // What stands before `||`: the port's last digits, or the port whole
    // after the end of `inbound|`.
    match body.rsplit_once('|') {
        None => body.bytes().all(|b| b.is_ascii_digit()),
        Some((before, port)) => is_port(port) && "inbound".ends_with(before),
    }
}

/// Whether a pattern can name anything but an inbound cluster: every other
/// cluster name ends in its service's host or its own name, never in `||`.
fn may_name_other(pattern: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => !suffix.ends_with("||"),
        None => !may_name_inbound(pattern),
    }
}

/// `set` when it can work at `profile` (or no profile is given), else every
/// problem it has there.
pub(super) fn fits(
    set: Arc<RuleSet>,
    profile: Option<Profile>,
    file: &str,
) -> Result<Arc<RuleSet>, Vec<RuleError>> {
    let found = match (profile, set.config()) {
        (Some(profile), Some(config)) => problems(config, profile, file),
        _ => Vec::new(),
    };
    if found.is_empty() {
        Ok(set)
    } else {
        Err(found)
    }
}

/// Every problem of `config` for `profile`, as errors naming rule and field.
fn problems(config: &RulesConfig, profile: Profile, file: &str) -> Vec<RuleError> {
    let mut found = Vec::new();
    for (i, rule) in config.rules.iter().enumerate() {
        let mut err = |field: String, message: String| {
            found.push(RuleError {
                file: file.to_string(),
                line: None,
                column: None,
                rule: Some(rule.name.clone()),
                path: format!("rules[{i}].{field}"),
                field,
                message,
            });
        };
        match profile {
            Profile::Sidecar => sidecar(rule, &mut err),
            Profile::Gateway => gateway(rule, &mut err),
        }
    }
    found
}

fn sidecar(rule: &RuleConfig, err: &mut impl FnMut(String, String)) {
    for (i, part) in rule.key.iter().enumerate() {
        if *part == KeyPartConfig::ClientIp {
            err(
                format!("key[{i}]"),
                "client_ip at a sidecar is the calling pod's address, and for outside traffic \
                 the ingress gateway's: every outside client would share one bucket. Key on an \
                 identity the mesh verified (a JWT claim), or limit per client at a gateway \
                 (check those rules with --profile gateway)"
                    .into(),
            );
        }
    }
    if let Some(pattern) = cluster_of(rule) {
        if !may_name_inbound(pattern) {
            err(
                "match.cluster".into(),
                format!(
                    "{pattern:?} never names a cluster at a sidecar's inbound side, where Envoy \
                     names it inbound|PORT|| (no service name): scope by port (\"inbound|9080||\"), \
                     and pick the workloads with the WasmPlugin's selector"
                ),
            );
        }
    }
}

fn gateway(rule: &RuleConfig, err: &mut impl FnMut(String, String)) {
    if let Some(pattern) = cluster_of(rule) {
        if !may_name_other(pattern) {
            err(
                "match.cluster".into(),
                format!(
                    "{pattern:?} names only a sidecar's inbound clusters, which a gateway never \
                     routes to: name the upstream (under Istio \
                     \"*|SERVICE.NAMESPACE.svc.cluster.local\")"
                ),
            );
        }
    }
}

fn cluster_of(rule: &RuleConfig) -> Option<&str> {
    rule.matches.as_ref()?.cluster.as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_names_are_told_from_outbound_ones() {
        for p in ["inbound|9080||", "*|9080||", "*0||", "*||", "*"] {
            assert!(may_name_inbound(p), "{p}");
        }
        for p in [
            "*|reviews.shop.svc.cluster.local",
            "outbound|9080||reviews.shop.svc.cluster.local",
            "*.shop.svc.cluster.local",
            "inbound|http||",
            "backend",
        ] {
            assert!(!may_name_inbound(p), "{p}");
        }
        for p in ["inbound|9080||", "*|9080||", "*||"] {
            assert!(!may_name_other(p), "{p}");
        }
        for p in ["*", "*|reviews.shop.svc.cluster.local", "backend"] {
            assert!(may_name_other(p), "{p}");
        }
    }
}
