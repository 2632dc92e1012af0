//! The usage path: a caller asks which limits count it and what is left of
//! them, and the filter answers from its own state without forwarding the
//! request or spending a token. `remaining` and `reset_seconds` are what this
//! Envoy knows (the store's count at the last grant, plus the tokens it holds):
//! a key it holds no state for reports the rule's full limit.
//!
//! What a caller can make it do is bounded: it lists only the rules that apply
//! to the request it names (or to itself, as sent), through the compiled
//! rules' index like any request, so it never scans the rule set nor shows
//! rules scoped to other paths, hosts, routes or clusters; at most
//! [`MAX_USAGE_LIMITS`] of them (one shared-data read each); and a worker
//! answers at most the filter's `usage_per_second` (past it, a 429), each
//! answer counted in Envoy's `meshlimit.usage.answered` or
//! `meshlimit.usage.limited`.

use meshlimit_core::header_list::HeaderList;
use meshlimit_core::headers::{self, Answer, Protocol};
use meshlimit_core::rules::{Applicable, Mode, RequestError};
use meshlimit_core::slot::SlotState;
use meshlimit_core::{query, RequestInfo, RuleSet, NANOS_PER_SEC};
use serde::Serialize;

use crate::allowance::Allowance;
use crate::config::FilterConfig;
use crate::host::{Host, Metric, Proxy};
use crate::slots;

/// The most limits one answer lists: a request that many rules apply to is
/// rare, and each costs a shared-data read and about 100 bytes of answer.
pub const MAX_USAGE_LIMITS: usize = 32;

/// The answer's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub limits: Vec<UsageLimit>,
    /// More enforcing rules apply than [`MAX_USAGE_LIMITS`]; the first are
    /// listed, in the rules' order.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// One enforcing rule that counts the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageLimit {
    pub rule: String,
    /// The quota as RateLimit-Policy states it: `requests` per `per_seconds`.
    pub requests: u64,
    pub per_seconds: u64,
    pub remaining: u32,
    /// Seconds until the key's bucket is full again (0: it is).
    pub reset_seconds: u64,
}

/// Whether `req` asks the usage path (a GET to it).
pub fn is_usage(cfg: &FilterConfig, req: &RequestInfo) -> bool {
    req.method == "GET" && cfg.usage_path.as_deref() == Some(req.path.as_str())
}

/// The caller's usage: for the request it names (`?method=…&path=…`, method
/// GET when left out, with the caller's own headers, host, client IP, route
/// and cluster), or naming none, for the usage request itself as sent: the
/// enforcing rules that would count it. Reads the keys' slots, changes
/// nothing.
pub fn usage<H: Host>(
    host: &H,
    cfg: &FilterConfig,
    rules: Option<&RuleSet>,
    caller: &RequestInfo,
) -> Result<Usage, RequestError> {
    let Some(rules) = rules else {
        return Ok(Usage {
            limits: Vec::new(),
            truncated: false,
        });
    };
    let applicable = match named(caller)? {
        Some(req) => rules.applicable(&req)?,
        None => rules.applicable(caller)?,
    };
    let now = host.now_ns();
    let mut enforcing = applicable
        .into_iter()
        .filter(|a| a.rule.mode == Mode::Enforce);
    let limits = enforcing
        .by_ref()
        .take(MAX_USAGE_LIMITS)
        .map(|a| line(host, cfg, &a, now))
        .collect();
    Ok(Usage {
        limits,
        truncated: enforcing.next().is_some(),
    })
}

/// A worker's usage answers: the allowance that bounds them and the Envoy
/// counters that count them.
#[derive(Debug, Default)]
pub struct UsageAnswers {
    allowance: Allowance,
    /// `meshlimit.usage.answered` and `meshlimit.usage.limited`, once defined
    /// (`Some(None)`: the host refused it).
    answered: Option<Option<u32>>,
    limited: Option<Option<u32>>,
}

impl UsageAnswers {
    /// Takes one answer from the worker's allowance at `now`: false past it
    /// (the caller gets [`limited`]). Counted either way.
    pub fn admit<H: Proxy>(&mut self, host: &H, per_second: u32, now: u64) -> bool {
        let admitted = self.allowance.available(per_second, now);
        let (cell, name) = if admitted {
            self.allowance.take(per_second, now);
            (&mut self.answered, "meshlimit.usage.answered")
        } else {
            (&mut self.limited, "meshlimit.usage.limited")
        };
        if let Some(id) = *cell.get_or_insert_with(|| host.define_metric(Metric::Counter, name)) {
            host.increment(id, 1);
        }
        admitted
    }
}

/// The answer past the worker's usage allowance: a 429 to retry in a second.
pub fn limited() -> Answer {
    Answer::Http {
        status: 429,
        fields: HeaderList::from_pairs([
            ("content-type", "application/json"),
            ("retry-after", "1"),
        ]),
        body: r#"{"error":"usage_limited"}"#.to_string(),
    }
}

/// The local answer to a usage request: 200 with the JSON [`Usage`], or 400
/// when the question is ambiguous (a parameter or key header sent twice).
pub fn answer<H: Host>(
    host: &H,
    cfg: &FilterConfig,
    rules: Option<&RuleSet>,
    caller: &RequestInfo,
    protocol: Protocol,
) -> Answer {
    match usage(host, cfg, rules, caller) {
        Ok(u) => Answer::Http {
            status: 200,
            fields: HeaderList::from_pairs([
                ("content-type", "application/json"),
                ("cache-control", "no-store"),
            ]),
            body: serde_json::to_string(&u).unwrap_or_default(),
        },
        Err(e) => headers::bad_request(protocol, &e),
    }
}

/// The request the caller names in the usage path's query, if it names one.
fn named(caller: &RequestInfo) -> Result<Option<RequestInfo>, RequestError> {
    let param = |name: &str| {
        query::single(&caller.query, name)
            .map_err(|e| match e {
                query::QueryError::Repeated => RequestError::RepeatedQuery(name.to_string()),
                query::QueryError::Malformed => RequestError::MalformedQuery(name.to_string()),
            })
            .map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned()))
    };
    let method = param("method")?;
    let Some(path) = param("path")? else {
        return Ok(None);
    };
    let method = method.unwrap_or_else(|| "GET".to_string());
    let mut req = RequestInfo::new(path.as_bytes(), &method, Vec::<(String, Vec<u8>)>::new());
    req.headers.clone_from(&caller.headers);
    req.client_ip.clone_from(&caller.client_ip);
    req.route.clone_from(&caller.route);
    req.cluster.clone_from(&caller.cluster);
    req.now_ns = caller.now_ns;
    req.metadata.clone_from(&caller.metadata);
    Ok(Some(req))
}

fn line<H: Host>(host: &H, cfg: &FilterConfig, a: &Applicable<'_>, now: u64) -> UsageLimit {
    let (requests, per_seconds) = a.limit.window_quota();
    let full = a.limit.burst();
    let fp = cfg.slot_hasher.fingerprint(&a.key);
    let (bytes, _) = host.shared_get(&slots::slot_key(fp, cfg.slots));
    let state = SlotState::claim(bytes.as_deref(), fp, now)
        .filter(|s| s.fingerprint == fp && *s != SlotState::empty(fp));
    let (remaining, reset_ns) = match state {
        None => (full, 0),
        Some(s) => {
            let usable = s.lease.usable(now);
            let denied_ns = s.lease.denied_until_ns().saturating_sub(now);
            let reset_ns = s.store_reset_at_ns.saturating_sub(now).max(denied_ns);
            // Past its reset the store's bucket is full again.
            let store = if s.store_reset_at_ns > now {
                s.store_remaining
            } else {
                full
            };
            // Held tokens are spent before a cached denial holds.
            let remaining = if usable == 0 && denied_ns > 0 {
                0
            } else {
                store.saturating_add(usable).min(full)
            };
            (remaining, reset_ns)
        }
    };
    UsageLimit {
        rule: a.rule.name.clone(),
        requests,
        per_seconds,
        remaining,
        reset_seconds: reset_ns.div_ceil(NANOS_PER_SEC),
    }
}

#[cfg(test)]
mod tests;
