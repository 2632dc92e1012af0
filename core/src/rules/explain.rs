//! "Why was I limited?", offline: every rule of a set in evaluation order, with
//! what it would count a given request under, or why it does not apply. The same
//! matching code as the request path (`matching`), so the answer cannot drift
//! from what the filter does.

use super::matching::Mismatch;
use super::{HeaderMatch, KeyPart, PathMatch, RequestError, RequestInfo, Rule, RuleSet};
use crate::key::DescriptorKey;
use crate::limit::Limit;

/// One rule's part in a request's decision.
#[derive(Debug, Clone)]
pub struct Explanation<'r> {
    pub rule: &'r Rule,
    pub verdict: Explained<'r>,
}

/// Whether a rule applies to the request, and how.
#[derive(Debug, Clone)]
pub enum Explained<'r> {
    /// The rule counts the request under `key` against `limit` (the plan's,
    /// where the rule has plans).
    Applies {
        key: DescriptorKey,
        limit: Limit,
        plan: Option<&'r str>,
        /// The schedule window in force at the request's time, if any.
        window: Option<usize>,
    },
    /// The rule does not apply, and why (one sentence).
    Skipped(String),
}

impl RuleSet {
    /// Every rule, strictest first (the order the filter evaluates them in),
    /// with its verdict for `req`. A request the filter would refuse as
    /// ambiguous (a key header sent twice) is that error.
    pub fn explain<'r>(&'r self, req: &RequestInfo) -> Result<Vec<Explanation<'r>>, RequestError> {
        let mut out = Vec::with_capacity(self.rules.len());
        let now_secs = req.now_ns / crate::NANOS_PER_SEC;
        for (index, rule) in self.rules.iter().enumerate() {
            let verdict = match rule.matcher.mismatch(req) {
                _ if rule.has_expired(now_secs) => Explained::Skipped(format!(
                    "expired at {}: the agent no longer serves it",
                    super::expiry::format_instant(rule.expires_at.unwrap_or_default())
                )),
                Some(m) => Explained::Skipped(describe(rule, m, req)),
                None => match rule.key(req)? {
                    Err(part) => Explained::Skipped(format!(
                        "the request has no {} to key on",
                        part_name(part)
                    )),
                    Ok(key) => {
                        let a = rule.applicable_with(index, req, key);
                        Explained::Applies {
                            key: a.key,
                            limit: a.limit,
                            plan: a.plan,
                            window: a.window,
                        }
                    }
                },
            };
            out.push(Explanation { rule, verdict });
        }
        Ok(out)
    }
}

fn describe(rule: &Rule, m: Mismatch<'_>, req: &RequestInfo) -> String {
    match m {
        Mismatch::Path => match &rule.matcher.path {
            PathMatch::Exact(p) => format!("path `{}` is not `{p}`", req.path),
            PathMatch::Prefix(p) => format!("path `{}` does not start with `{p}`", req.path),
            PathMatch::Directory(d) => format!("path `{}` is not under `{d}/`", req.path),
            PathMatch::Any => "path".to_string(),
        },
        Mismatch::Authority => {
            let wanted = match &rule.matcher.authority {
                Some(crate::authority::HostPattern::Exact(h)) => format!("`{h}`"),
                Some(crate::authority::HostPattern::Suffix(s)) => format!("under `*{s}`"),
                None => String::new(),
            };
            match req.header("host") {
                Some(sent) => format!(
                    "host `{}` is not {wanted}",
                    crate::authority::normalize(sent.as_bytes())
                ),
                None => format!("the request names no host ({wanted} wanted)"),
            }
        }
        Mismatch::Cluster => match (&rule.matcher.cluster, &req.cluster) {
            (Some(want), Some(c)) => format!("upstream cluster `{c}` is not {want}"),
            (Some(want), None) => format!("the request has no upstream cluster ({want} wanted)"),
            (None, _) => "upstream cluster".to_string(),
        },
        Mismatch::Route => match (&rule.matcher.route, &req.route) {
            (Some(want), Some(r)) => format!("route `{r}` is not {want}"),
            (Some(want), None) => format!("the request has no route name ({want} wanted)"),
            (None, _) => "route".to_string(),
        },
        Mismatch::Method => format!(
            "method {} is not one of {}",
            req.method,
            rule.matcher
                .methods
                .as_deref()
                .unwrap_or_default()
                .join(", ")
        ),
        Mismatch::Header(name) => {
            let wanted = rule
                .matcher
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, hm)| hm);
            match wanted {
                Some(HeaderMatch::Present(true)) => format!("header `{name}` is absent"),
                Some(HeaderMatch::Present(false)) => format!("header `{name}` is present"),
                Some(HeaderMatch::Equals(v)) => match req.header(name) {
                    Some(sent) => format!("header `{name}` is `{sent}`, not `{v}`"),
                    None => format!("header `{name}` is absent (`{v}` wanted)"),
                },
                None => format!("header `{name}`"),
            }
        }
    }
}

impl Rule {
    /// The rule's key parts as people name them (`header `x-api-key``,
    /// `method`), in key order; none for `key: []`.
    pub fn key_parts(&self) -> Vec<String> {
        self.key.iter().map(part_name).collect()
    }
}

fn part_name(part: &KeyPart) -> String {
    match part {
        KeyPart::Header(name) => format!("header `{name}`"),
        KeyPart::Method => "method".to_string(),
        KeyPart::ClientIp => "client IP".to_string(),
        KeyPart::Path => "path".to_string(),
        KeyPart::Route => "route name".to_string(),
        KeyPart::Query(name) => format!("query parameter `{name}`"),
        KeyPart::Authority => "host".to_string(),
        KeyPart::Metadata(m) => m.describe(),
    }
}

#[cfg(test)]
mod tests;
