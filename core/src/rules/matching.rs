//! Which rules apply to a request, and under which key and limit.
//!
//! Clients choose their headers' spelling, so lookups here are defined for every
//! spelling: names are compared case-insensitively with `_` read as `-` (a backend
//! behind a CGI-style gateway reads `x_api_key` as X-Api-Key), `host` is Envoy's
//! `:authority`, and a header a rule keys on that arrives more than once makes
//! the request ambiguous: it is refused ([`RequestError::RepeatedHeader`]) rather
//! than counted under one value while the backend reads another. The same holds
//! for a query parameter a rule keys on ([`crate::query`]); the host is read from
//! `:authority` in one spelling ([`crate::authority`]).

use std::borrow::Cow;

use super::{HeaderMatch, KeyPart, Matcher, PathMatch, Rule, RuleSet};
use crate::header_list::HeaderList;
use crate::key::{DescriptorKey, KeyBuilder};
use crate::limit::Limit;
use crate::metadata::MetadataPath;
use crate::{authority, path, query};

/// What the rules look at in a request, gathered once by the filter (one host call
/// for all headers) so that matching is plain code over plain data.
#[derive(Debug, Clone, Default)]
pub struct RequestInfo {
    /// The normalised path (see [`crate::path`]): no query, one spelling.
    pub path: String,
    /// The raw query (after the first `?` of `:path`, before a `#`), read only
    /// for rules keyed on a query parameter.
    pub query: Vec<u8>,
    /// Upper case; one of HTTP's methods is borrowed, not allocated.
    pub method: Cow<'static, str>,
    /// Header names as the host gives them (lowercase from Envoy); values as
    /// bytes, since clients may send bytes that are not UTF-8. In the host's
    /// own serialized form, read in place (see [`crate::header_list`]).
    pub headers: HeaderList,
    pub client_ip: Option<String>,
    pub route: Option<String>,
    /// The upstream cluster's name (`xds.cluster_name`), read only for rules
    /// with `match.cluster`.
    pub cluster: Option<String>,
    /// Dynamic metadata by filter name: the filter's namespace as a serialized
    /// `google.protobuf.Struct` (see [`crate::metadata`]), read only for the
    /// filters some rule keys on or picks its plan by.
    pub metadata: Vec<(String, Vec<u8>)>,
    /// When the request is decided, ns since the Unix epoch (UTC): which window
    /// of a rule's schedule is in force. The filter sets its host's clock, the
    /// agent's `explain` the instant asked about, `replay` the logged start time.
    pub now_ns: u64,
}

/// A request the rules cannot be applied to as sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A header a rule keys on came more than once (under any spelling): which
    /// value would count is a guess, and a wrong guess mints a fresh bucket.
    #[error("header `{0}` is sent more than once; a rule keys on it")]
    RepeatedHeader(String),
    /// A query parameter a rule keys on came more than once (under any escaping,
    /// after `&` or `;`).
    #[error("query parameter `{0}` is sent more than once; a rule keys on it")]
    RepeatedQuery(String),
    /// A query parameter name, or the value of one a rule keys on, has a `%`
    /// that is not followed by two hex digits: backends decode it differently.
    #[error("the query has a malformed escape where a rule reads parameter `{0}`")]
    MalformedQuery(String),
    /// The proxy's header list did not hold together, so no rule could read
    /// it (a proxy bug, never a client's doing: refused, not guessed at).
    #[error("{0}")]
    MalformedHeaders(#[from] crate::header_list::MalformedHeaders),
}

/// A rule that applies to a request: the key it counts and the limit in force.
#[derive(Debug, Clone)]
pub struct Applicable<'r> {
    pub rule: &'r Rule,
    /// The rule's position in [`RuleSet::rules`].
    pub index: usize,
    pub key: DescriptorKey,
    pub limit: Limit,
    pub plan: Option<&'r str>,
    /// The schedule window in force (its position in the rule's schedule).
    pub window: Option<usize>,
}

/// The method in upper case, as rules name it; HTTP's own methods (nearly
/// every request) without an allocation.
fn upper_case_method(method: &str) -> Cow<'static, str> {
    // As HTTP spells them (and Envoy hands them over): one comparison.
    match method {
        "GET" => Cow::Borrowed("GET"),
        "POST" => Cow::Borrowed("POST"),
        "PUT" => Cow::Borrowed("PUT"),
        "DELETE" => Cow::Borrowed("DELETE"),
        _ => other_method(method),
    }
}

/// [`upper_case_method`] for any other spelling, out of the common path.
#[cold]
#[inline(never)]
fn other_method(method: &str) -> Cow<'static, str> {
    const KNOWN: [&str; 9] = [
        "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE",
    ];
    match KNOWN.iter().find(|m| m.eq_ignore_ascii_case(method)) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(method.to_ascii_uppercase()),
    }
}

impl RequestInfo {
    /// Builds the info from a raw `:path` (normalised here) and the headers.
    pub fn new<V: AsRef<[u8]>>(
        path: impl AsRef<[u8]>,
        method: &str,
        headers: Vec<(String, V)>,
    ) -> Self {
        Self::build(path.as_ref(), method, HeaderList::from_pairs(headers))
    }

    /// Builds the info from a request's headers as the proxy hands them over,
    /// `:path` and `:method` among them: read where they are, not copied out
    /// first (the filter does this on every request).
    pub fn from_headers(headers: HeaderList) -> Self {
        let path = headers.get(":path").unwrap_or_default();
        let method = headers.get(":method").unwrap_or_default();
        let method = crate::text::utf8(method).unwrap_or_default();
        let mut info = Self::build(path, method, HeaderList::default());
        info.headers = headers;
        info
    }

    fn build(path: &[u8], method: &str, headers: HeaderList) -> Self {
        Self {
            path: path::normalize(path),
            query: query::of_path(path).to_vec(),
            method: upper_case_method(method),
            headers,
            client_ip: None,
            route: None,
            cluster: None,
            metadata: Vec::new(),
            now_ns: 0,
        }
    }

    /// The value at `path` in the dynamic metadata, in its one spelling.
    pub fn metadata_value(&self, path: &MetadataPath) -> Option<Cow<'_, [u8]>> {
        let (_, ns) = self.metadata.iter().find(|(f, _)| *f == path.filter)?;
        path.lookup(ns)
    }

    /// Every value of a header, under any spelling of its name.
    fn values<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        let wanted = spelling(name).as_bytes();
        // Only a name of the wanted length, or of `host`'s, can be a spelling.
        self.headers
            .raw()
            .filter(move |(n, _)| {
                (n.len() == wanted.len() || n.len() == 4) && same_spelling(n, wanted)
            })
            .map(|(_, v)| v)
    }

    /// The one value of a header a rule keys on: `Ok(None)` when absent, an error
    /// when sent more than once.
    fn single(&self, name: &str) -> Result<Option<&[u8]>, RequestError> {
        // One walk of the list, the whole of it (a second value is an error).
        let mut found = None;
        for value in self.values(name) {
            if found.is_some() {
                return Err(repeated(name));
            }
            found = Some(value);
        }
        Ok(found)
    }

    /// The value of a query parameter a rule keys on, decoded.
    fn query_param(&self, name: &str) -> Result<Option<Cow<'_, [u8]>>, RequestError> {
        query::single(&self.query, name).map_err(|e| match e {
            query::QueryError::Repeated => RequestError::RepeatedQuery(name.to_string()),
            query::QueryError::Malformed => RequestError::MalformedQuery(name.to_string()),
        })
    }

    /// The request's host, normalised (see [`crate::authority`]); a key
    /// `:authority` sent twice is an error, as any key header is.
    fn authority(&self) -> Result<Option<String>, RequestError> {
        Ok(self.single("host")?.map(authority::normalize))
    }

    /// The first value of a header as text (names compared as in matching).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.values(name).next().and_then(crate::text::utf8)
    }
}

/// The error of a key header sent more than once.
#[cold]
#[inline(never)]
fn repeated(name: &str) -> RequestError {
    RequestError::RepeatedHeader(name.to_string())
}

/// The one spelling of a header name from a rule (lowercase): `host` is
/// `:authority`.
fn spelling(wanted: &str) -> &str {
    if wanted == "host" {
        ":authority"
    } else {
        wanted
    }
}

/// Whether header name `sent` is a spelling of `wanted` (a rule's name in its
/// [`spelling`]): ASCII case and `_`/`-` are not told apart, and `host` is
/// `:authority`. Names of another length are told apart first, and a name
/// sent as the rule spells it (Envoy's are lowercase) by one comparison: a
/// lookup runs this on every header of every request, so its code is out
/// of the walk's.
#[inline(never)]
fn same_spelling(sent: &[u8], wanted: &[u8]) -> bool {
    let sent: &[u8] = if sent.len() == 4 && sent.eq_ignore_ascii_case(b"host") {
        b":authority"
    } else {
        sent
    };
    if sent.len() != wanted.len() {
        return false;
    }
    let fold = |c: u8| {
        if c == b'_' {
            b'-'
        } else {
            c.to_ascii_lowercase()
        }
    };
    sent == wanted || sent.iter().zip(wanted).all(|(&a, &b)| fold(a) == fold(b))
}

impl RuleSet {
    /// Every rule that applies to `req`, strictest first. A rule whose key cannot
    /// be formed (a named header is absent) does not apply; a key header sent
    /// twice makes the request an error.
    ///
    /// Only the rules the index finds for the request's path, and those without a
    /// path condition, are looked at, in the set's order, by the same test as
    /// [`RuleSet::applicable_linear`] (so the answers are the same).
    pub fn applicable<'r>(
        &'r self,
        req: &RequestInfo,
    ) -> Result<Vec<Applicable<'r>>, RequestError> {
        let mut out = Vec::new();
        self.each_applicable(req, |a| out.push(a))?;
        Ok(out)
    }

    /// [`RuleSet::applicable`]'s rules handed to `each` in turn, collected
    /// nowhere (the filter builds its own list from them on every request).
    pub fn each_applicable<'r>(
        &'r self,
        req: &RequestInfo,
        mut each: impl FnMut(Applicable<'r>),
    ) -> Result<(), RequestError> {
        // No rule has a path condition: every rule is a candidate, in order.
        if !self.index.has_paths() {
            for &i in self.index.pathless() {
                if let Some(a) = self.check(i, req)? {
                    each(a);
                }
            }
            return Ok(());
        }
        let mut by_path = Vec::new();
        self.index.by_path(&req.path, &mut by_path);
        by_path.sort_unstable();
        // Merge the two ascending lists of positions (each rule is in one).
        let pathless = self.index.pathless();
        let (mut i, mut j) = (0, 0);
        loop {
            let next = match (by_path.get(i), pathless.get(j)) {
                (Some(a), Some(b)) if a < b => {
                    i += 1;
                    *a
                }
                (_, Some(b)) => {
                    j += 1;
                    *b
                }
                (Some(a), None) => {
                    i += 1;
                    *a
                }
                (None, None) => break,
            };
            if let Some(a) = self.check(next, req)? {
                each(a);
            }
        }
        Ok(())
    }

    /// The same answer as [`RuleSet::applicable`], by testing every rule in turn:
    /// the reference the index is checked against.
    #[cfg(test)]
    pub(crate) fn applicable_linear<'r>(
        &'r self,
        req: &RequestInfo,
    ) -> Result<Vec<Applicable<'r>>, RequestError> {
        let mut out = Vec::new();
        for i in 0..self.rules.len() {
            if let Some(a) = self.check(i, req)? {
                out.push(a);
            }
        }
        Ok(out)
    }

    /// The rule named `name` applied to `req` (its key and limit), when it
    /// applies; `None` also for a request the rules refuse as ambiguous.
    pub fn applicable_rule(&self, name: &str, req: &RequestInfo) -> Option<Applicable<'_>> {
        self.check(self.position(name)?, req).ok().flatten()
    }

    fn check<'r>(
        &'r self,
        index: usize,
        req: &RequestInfo,
    ) -> Result<Option<Applicable<'r>>, RequestError> {
        match self.rules.get(index) {
            Some(rule) => rule.applies(index, req),
            None => Ok(None),
        }
    }
}

impl Rule {
    fn applies<'r>(
        &'r self,
        index: usize,
        req: &RequestInfo,
    ) -> Result<Option<Applicable<'r>>, RequestError> {
        if self.matcher.mismatch(req).is_some() {
            return Ok(None);
        }
        let Ok(key) = self.key(req)? else {
            return Ok(None);
        };
        Ok(Some(self.applicable_with(index, req, key)))
    }

    /// The request's key under this rule, its parts in order; `Err(part)`
    /// names the first part the request does not have (the rule then does
    /// not apply).
    pub(super) fn key(
        &self,
        req: &RequestInfo,
    ) -> Result<Result<DescriptorKey, &KeyPart>, RequestError> {
        let mut key = KeyBuilder::new(&self.name);
        for part in &self.key {
            let value = match part {
                KeyPart::Header(name) => req.single(name)?.map(Cow::Borrowed),
                KeyPart::Query(name) => req.query_param(name)?,
                KeyPart::Method => Some(Cow::Borrowed(req.method.as_bytes())),
                KeyPart::ClientIp => req
                    .client_ip
                    .as_deref()
                    .map(|v| Cow::Borrowed(v.as_bytes())),
                KeyPart::Path => Some(Cow::Borrowed(req.path.as_bytes())),
                KeyPart::Route => req.route.as_deref().map(|v| Cow::Borrowed(v.as_bytes())),
                KeyPart::Authority => req.authority()?.map(|h| Cow::Owned(h.into_bytes())),
                KeyPart::Metadata(m) => req.metadata_value(m),
            };
            let Some(value) = value else {
                return Ok(Err(part));
            };
            key.push(&value);
        }
        Ok(Ok(key.finish()))
    }

    /// The rule applied to `req` under `key`: its key, limit and plan.
    pub(super) fn applicable_with<'r>(
        &'r self,
        index: usize,
        req: &RequestInfo,
        key: DescriptorKey,
    ) -> Applicable<'r> {
        let named: Option<Cow<'_, str>> = match &self.limits {
            super::Limits::Plans {
                by: super::PlanSource::Header(header),
                ..
            } => req.header(header).map(Cow::Borrowed),
            super::Limits::Plans {
                by: super::PlanSource::Metadata(m),
                ..
            } => req
                .metadata_value(m)
                .and_then(|v| String::from_utf8(v.into_owned()).ok())
                .map(Cow::Owned),
            super::Limits::Single(_) => None,
        };
        let in_force = self.limit_in_force(named.as_deref(), req.now_ns);
        Applicable {
            rule: self,
            index,
            key,
            limit: in_force.limit,
            plan: in_force.plan,
            window: in_force.window,
        }
    }
}

/// The first condition of a rule's `match` that a request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mismatch<'m> {
    Path,
    Authority,
    Cluster,
    Route,
    Method,
    Header(&'m str),
}

impl Matcher {
    /// `None` when every condition holds, else the first that does not.
    pub(super) fn mismatch(&self, req: &RequestInfo) -> Option<Mismatch<'_>> {
        let path_ok = match &self.path {
            PathMatch::Any => true,
            PathMatch::Exact(p) => req.path == *p,
            PathMatch::Prefix(p) => req.path.starts_with(p.as_str()),
            // A prefix written with a trailing slash (`/v1/`) covers its directory,
            // `/v1` included (the normal form drops trailing slashes), not `/v1x`.
            PathMatch::Directory(d) => {
                req.path == *d
                    || (req.path.starts_with(d.as_str())
                        && (d.ends_with('/') || req.path.as_bytes().get(d.len()) == Some(&b'/')))
            }
        };
        if !path_ok {
            return Some(Mismatch::Path);
        }
        // Any host sent counts, as for header conditions.
        if let Some(want) = &self.authority {
            if !req
                .values("host")
                .any(|h| want.matches(&authority::normalize(h)))
            {
                return Some(Mismatch::Authority);
            }
        }
        let name_ok = |want: &Option<super::NamePattern>, have: &Option<String>| {
            want.as_ref()
                .is_none_or(|w| have.as_deref().is_some_and(|h| w.matches(h)))
        };
        if !name_ok(&self.cluster, &req.cluster) {
            return Some(Mismatch::Cluster);
        }
        if !name_ok(&self.route, &req.route) {
            return Some(Mismatch::Route);
        }
        if !self
            .methods
            .as_ref()
            .is_none_or(|ms| ms.iter().any(|m| *m == req.method))
        {
            return Some(Mismatch::Method);
        }
        self.headers
            .iter()
            .find(|(name, hm)| match hm {
                // Any value counts: sending a header twice never skips a rule
                // that an honest single value would match.
                HeaderMatch::Present(want) => req.values(name).next().is_some() != *want,
                HeaderMatch::Equals(v) => !req.values(name).any(|x| x == v.as_bytes()),
            })
            .map(|(name, _)| Mismatch::Header(name))
    }
}
