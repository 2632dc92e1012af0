//! Which rules apply to a request, and under which key and limit.

use super::{HeaderMatch, KeyPart, Matcher, PathMatch, Rule, RuleSet};
use crate::key::DescriptorKey;
use crate::limit::Limit;

/// What the rules look at in a request, gathered once by the filter (one host call
/// for all headers) so that matching is plain code over plain data.
#[derive(Debug, Clone, Default)]
pub struct RequestInfo {
    /// The path without the query string.
    pub path: String,
    pub method: String,
    /// Header names lowercased, as HTTP/2 and Envoy deliver them.
    pub headers: Vec<(String, String)>,
    pub client_ip: Option<String>,
    pub route: Option<String>,
}

/// A rule that applies to a request: the key it counts and the limit in force.
#[derive(Debug, Clone)]
pub struct Applicable<'r> {
    pub rule: &'r Rule,
    pub key: DescriptorKey,
    pub limit: Limit,
    pub plan: Option<&'r str>,
}

impl RequestInfo {
    /// Builds the info from a raw `:path` (query stripped here).
    pub fn new(path: &str, method: &str, headers: Vec<(String, String)>) -> Self {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        Self {
            path: path.to_string(),
            method: method.to_ascii_uppercase(),
            headers,
            client_ip: None,
            route: None,
        }
    }

    /// The first value of a header (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl RuleSet {
    /// Every rule that applies to `req`, strictest first. A rule whose key cannot
    /// be formed (a named header is absent) does not apply.
    pub fn applicable<'r>(&'r self, req: &RequestInfo) -> Vec<Applicable<'r>> {
        self.rules
            .iter()
            .filter_map(|rule| rule.applies(req))
            .collect()
    }
}

impl Rule {
    fn applies<'r>(&'r self, req: &RequestInfo) -> Option<Applicable<'r>> {
        if !self.matcher.matches(req) {
            return None;
        }
        let mut parts = Vec::with_capacity(self.key.len());
        for part in &self.key {
            parts.push(match part {
                KeyPart::Header(name) => req.header(name)?,
                KeyPart::Method => req.method.as_str(),
                KeyPart::ClientIp => req.client_ip.as_deref()?,
                KeyPart::Path => req.path.as_str(),
                KeyPart::Route => req.route.as_deref()?,
            });
        }
        let plan_header = match &self.limits {
            super::Limits::Plans { header, .. } => req.header(header),
            super::Limits::Single(_) => None,
        };
        let (limit, plan) = self.limit_for_plan(plan_header);
        Some(Applicable {
            rule: self,
            key: DescriptorKey::new(&self.name, parts),
            limit,
            plan,
        })
    }
}

impl Matcher {
    fn matches(&self, req: &RequestInfo) -> bool {
        let path_ok = match &self.path {
            PathMatch::Any => true,
            PathMatch::Exact(p) => req.path == *p,
            PathMatch::Prefix(p) => req.path.starts_with(p.as_str()),
        };
        let method_ok = self
            .methods
            .as_ref()
            .is_none_or(|ms| ms.contains(&req.method));
        path_ok
            && method_ok
            && self.headers.iter().all(|(name, hm)| match hm {
                HeaderMatch::Present(want) => req.header(name).is_some() == *want,
                HeaderMatch::Equals(v) => req.header(name) == Some(v.as_str()),
            })
    }
}
