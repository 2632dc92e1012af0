//! The filter–agent wire protocol (JSON over HTTP/1.1 on localhost). Every body
//! carries `v`; an agent refuses a version it does not speak with a 400, so a
//! filter and an agent of different releases fail loudly, not subtly.

use serde::{Deserialize, Serialize};

use crate::decision::Outcome;
use crate::key::DescriptorKey;
use crate::rules::RulesConfig;

mod answer;
mod json;

pub use json::{read_lease_response, ReadError};

/// The protocol version this build speaks.
pub const WIRE_VERSION: u32 = 1;
/// The largest request body the agent reads.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The most items in one lease request; a filter splits its batches here and
/// at [`MAX_BODY_BYTES`].
pub const MAX_LEASE_ITEMS: usize = 64;
/// The longest descriptor key the agent accepts (defined with the keys).
pub use crate::key::MAX_KEY_BYTES;
/// The longest `rules_version` a sync report may carry into a metric label; the
/// agent's own versions are content hashes far shorter. Longer ones are shown as
/// `invalid`.
pub const MAX_VERSION_LABEL: usize = 64;

pub const LEASE_PATH: &str = "/v1/lease";
pub const SYNC_PATH: &str = "/v1/sync";
pub const RULES_PATH: &str = "/v1/rules";
pub const DECISIONS_PATH: &str = "/v1/decisions";
/// The most decision records one `POST /v1/decisions` carries.
pub const MAX_DECISION_RECORDS: usize = 128;

/// `POST /v1/lease`: tokens for the keys a filter could not decide locally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    pub v: u32,
    /// The filter's rules version, for the agent's skew metrics.
    #[serde(default)]
    pub rules_version: String,
    pub items: Vec<LeaseItem>,
}

/// The JSON of a [`LeaseRequest`] of `items` under `rules_version`, written
/// from the items where they are ([`LeaseFields`]): a filter's queued items
/// hold their fields in a form of their own, and building the request first
/// copied each one's rule, key and plan, and the version, on every call
/// (every new key's request). Written
/// by hand (`json`), byte for byte what serde_json writes for the request
/// (a property test holds the two together).
pub fn lease_request_json<T: LeaseFields>(rules_version: &str, items: &[T]) -> Vec<u8> {
    json::write_lease_request(rules_version, items)
}

/// [`lease_request_json`] written into `out` (emptied first): a filter
/// keeps one buffer a VM for its calls' bodies, which the host copies.
pub fn lease_request_json_into<T: LeaseFields>(out: &mut String, rules_version: &str, items: &[T]) {
    json::write_lease_request_into(out, rules_version, items);
}

/// How many of `items`, from the first, one lease request under
/// `rules_version` carries: at most [`MAX_LEASE_ITEMS`], and no more than keep
/// its JSON within [`MAX_BODY_BYTES`] (counted as the most bytes each string
/// can take escaped, without writing it). At least one when there is any: an
/// item's key is at most [`MAX_KEY_BYTES`], far inside the body's limit. A
/// filter sends its queued items in such batches, so the agent never refuses a
/// call for its size and no item fails for its neighbours.
pub fn lease_batch_len<T: LeaseFields>(rules_version: &str, items: &[T]) -> usize {
    // The first item always goes: one alone is its batch, without sizing
    // its strings (a new key's call, which holds just its own item).
    if items.len() <= 1 {
        return items.len();
    }
    // `{"v":4294967295,"rules_version":"…","items":[` … `]}`
    let mut bytes = 48 + json_str_bound(rules_version);
    let mut n = 0;
    for item in items.iter().take(MAX_LEASE_ITEMS) {
        // `{"rule":"…","key":"…","cost":N,"plan":"…","want":N},`
        let size = 72
            + json_str_bound(item.rule())
            + json_str_bound(item.key().as_str())
            + item.plan().map_or(0, json_str_bound);
        if n > 0 && bytes + size > MAX_BODY_BYTES {
            break;
        }
        bytes += size;
        n += 1;
    }
    n
}

/// The most bytes `s` takes as a JSON string's contents: a quote or backslash
/// doubles, a control character takes six (`\u00XX`).
fn json_str_bound(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// One key to lease for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseItem {
    pub rule: String,
    pub key: DescriptorKey,
    /// Tokens the current request needs; a grant holds at least this many.
    pub cost: u32,
    /// The plan the filter selected, for rules with plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Tokens the filter expects to spend in half a lease life (its own
    /// recent demand): the agent sizes the filter's share of a lease by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub want: Option<u32>,
}

/// The fields of one item of a lease request, as its JSON and its size are
/// written from them: a [`LeaseItem`]'s, or those of an item a filter holds
/// in a form of its own (which names its rule without a copy of the name).
pub trait LeaseFields {
    fn rule(&self) -> &str;
    fn key(&self) -> &DescriptorKey;
    fn cost(&self) -> u32;
    fn plan(&self) -> Option<&str>;
    fn want(&self) -> Option<u32>;
}

impl LeaseFields for LeaseItem {
    fn rule(&self) -> &str {
        &self.rule
    }

    fn key(&self) -> &DescriptorKey {
        &self.key
    }

    fn cost(&self) -> u32 {
        self.cost
    }

    fn plan(&self) -> Option<&str> {
        self.plan.as_deref()
    }

    fn want(&self) -> Option<u32> {
        self.want
    }
}

/// The answers, in the order of the request's items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseResponse {
    pub v: u32,
    pub items: Vec<LeaseAnswer>,
}

/// The answer for one key. Read by hand ([`answer`]): the derived reader of
/// an internally tagged enum buffers the whole object first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum LeaseAnswer {
    /// `tokens` granted (the request's cost included), usable for `ttl_ms`;
    /// the store kept `remaining` and is full again after `reset_ms`.
    Grant {
        tokens: u32,
        ttl_ms: u64,
        remaining: u32,
        reset_ms: u64,
        /// Decided by the agent's fail-local bucket (the store is unreachable):
        /// the filter counts it as `failed_local` and keeps no lease.
        #[serde(default, skip_serializing_if = "is_false")]
        local: bool,
        /// Where the agent found the answer (for the decision log); absent
        /// from agents of earlier releases.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<AnsweredFrom>,
        /// The filter's next turn at a node far over its share of the limit:
        /// once these tokens are spent, the key is denied until this many
        /// milliseconds from now, when the node will hold tokens for it again
        /// (without it, a filter asks again as soon as it has spent them, and
        /// the node would turn it away).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_ask_ms: Option<u64>,
    },
    /// Over the limit; enough tokens exist again after `retry_after_ms`.
    Deny {
        retry_after_ms: u64,
        #[serde(default, skip_serializing_if = "is_false")]
        local: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<AnsweredFrom>,
    },
    /// The agent could not decide (store failed, shed, unknown rule): the rule's
    /// failure policy applies.
    Unavailable { reason: String },
}

/// Where the agent found a lease answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnsweredFrom {
    /// The node pool's tokens (or its hold after a drained grant).
    Pool,
    /// A call to the store made for this ask.
    Store,
}

/// `POST /v1/sync`: sent by each filter every second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    pub v: u32,
    /// A stable name for the filter (its Envoy node and VM), a metric label.
    pub filter_id: String,
    /// The rules version the filter runs, if it has rules.
    #[serde(default)]
    pub rules_version: Option<String>,
    /// Decisions taken since the last successful sync.
    #[serde(default)]
    pub decisions: Vec<DecisionCount>,
    /// The filter fetches new rules itself (`GET /v1/rules` as lines) and needs
    /// only the version in the answer. Filters of earlier releases leave it out
    /// and get the rules inside the answer.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fetches_rules: bool,
}

/// A count of decisions of one outcome for one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionCount {
    pub rule: String,
    pub outcome: Outcome,
    pub count: u64,
}

/// Where a decision was made, as the decision log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSource {
    /// The filter's leased tokens in Envoy's shared data.
    FilterLease,
    /// The filter's cached denial in Envoy's shared data.
    DenialCache,
    /// The agent answered from its node pool.
    AgentPool,
    /// The agent answered from a store call (Redis or the embedded store).
    Store,
    /// The agent answered, from where it did not say (an earlier agent).
    Agent,
    /// The agent's fail-local bucket (its store unreachable).
    AgentLocal,
    /// The rule's failure policy in the filter (`open`, `closed`, or the
    /// filter's fail-local bucket).
    FailurePolicy,
    /// A key's first request at an Envoy that held nothing for it, admitted
    /// while its lease was asked (the rule's `cold_start: admit`).
    ColdStart,
}

impl DecisionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionSource::FilterLease => "filter_lease",
            DecisionSource::DenialCache => "denial_cache",
            DecisionSource::AgentPool => "agent_pool",
            DecisionSource::Store => "store",
            DecisionSource::Agent => "agent",
            DecisionSource::AgentLocal => "agent_local",
            DecisionSource::FailurePolicy => "failure_policy",
            DecisionSource::ColdStart => "cold_start",
        }
    }
}

/// One decision as a filter hands it to its agent's decision log (the agent's
/// log line adds to it, so unknown fields are not refused here; the request
/// around it refuses them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// When it was decided, ms since the Unix epoch (the filter's clock).
    pub at_ms: u64,
    pub rule: String,
    /// The rules version the filter decided by.
    pub rules_version: String,
    pub decision: Outcome,
    /// The key's id (the keyed hash metrics and Redis use).
    pub key_id: String,
    /// The key in clear: only for a rule with `log_key: clear`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub source: DecisionSource,
    /// Tokens left in the bucket as the filter saw them (allowed decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
    /// When to retry, for a rejection (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The rate the record was kept at: 1 for a rejection, the rule's
    /// `log_sample` for an allowed decision (a count of records ÷ this
    /// estimates the decisions).
    pub sample_rate: f64,
    /// The request's `x-request-id`, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/decisions`: a filter VM's buffered decision records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionsRequest {
    pub v: u32,
    pub filter_id: String,
    pub records: Vec<DecisionRecord>,
    /// Records this VM dropped since its last report (its buffer was full).
    #[serde(default)]
    pub dropped: u64,
}

/// The agent's rules version, and the rules when the filter's version differs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncResponse {
    pub v: u32,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<RulesConfig>,
    /// Agents alive in the region (from their heartbeats in the store), when the
    /// agent knows: the filter sizes its fail-local bucket by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_nodes: Option<u32>,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// The body of every 4xx/5xx from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub detail: String,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_decision_source_is_named_as_it_is_serialized() {
        for source in [
            DecisionSource::FilterLease,
            DecisionSource::DenialCache,
            DecisionSource::AgentPool,
            DecisionSource::Store,
            DecisionSource::Agent,
            DecisionSource::AgentLocal,
            DecisionSource::FailurePolicy,
        ] {
            assert_eq!(
                serde_json::to_value(source).unwrap(),
                serde_json::Value::from(source.as_str())
            );
        }
    }

    fn item(key: DescriptorKey) -> LeaseItem {
        LeaseItem {
            rule: key.rule().to_string(),
            key,
            cost: u32::MAX,
            plan: Some("p".repeat(64)),
            want: Some(u32::MAX),
        }
    }

    #[test]
    fn a_batch_of_short_keys_is_cut_at_the_item_limit() {
        let items: Vec<LeaseItem> = (0..200)
            .map(|i| item(DescriptorKey::new("r", [format!("k{i}")])))
            .collect();
        assert_eq!(lease_batch_len("v1", &items), MAX_LEASE_ITEMS);
        assert_eq!(lease_batch_len("v1", &items[..3]), 3);
        assert_eq!(lease_batch_len("v1", &items[..1]), 1);
        assert_eq!(lease_batch_len::<LeaseItem>("v1", &[]), 0);
    }

    #[test]
    fn a_batch_of_the_longest_keys_fits_the_body_limit() {
        // Keys at the agent's limit, of the characters JSON escapes most.
        let worst = ["\"", "\\"];
        for ch in worst {
            let name = "r".repeat(crate::rules::MAX_RULE_NAME);
            let part = ch.repeat(crate::key::MAX_PART_LEN);
            let items: Vec<LeaseItem> = (0..MAX_LEASE_ITEMS)
                .map(|i| {
                    let mut parts = vec![part.clone(); 7];
                    parts.push(format!("{i}"));
                    item(DescriptorKey::new(&name, &parts))
                })
                .collect();
            assert!(items[0].key.as_str().len() <= MAX_KEY_BYTES);
            let mut rest = &items[..];
            let mut batches = 0;
            while !rest.is_empty() {
                let n = lease_batch_len("v".repeat(64).as_str(), rest);
                assert!(n >= 1);
                let body = lease_request_json(&"v".repeat(64), &rest[..n]);
                assert!(body.len() <= MAX_BODY_BYTES, "{} bytes", body.len());
                rest = &rest[n..];
                batches += 1;
            }
            assert!(batches > 1, "keys of {ch}: the body limit cut no batch");
        }
    }

    /// One answer of each kind, a grant with and without its optional fields.
    pub(crate) fn answers() -> Vec<LeaseAnswer> {
        vec![
            LeaseAnswer::Grant {
                tokens: 5,
                ttl_ms: 100,
                remaining: 3,
                reset_ms: 10,
                local: false,
                from: None,
                next_ask_ms: None,
            },
            LeaseAnswer::Grant {
                tokens: 9,
                ttl_ms: 300,
                remaining: 0,
                reset_ms: 900,
                local: false,
                from: Some(AnsweredFrom::Pool),
                next_ask_ms: Some(240),
            },
            LeaseAnswer::Deny {
                retry_after_ms: 250,
                local: true,
                from: None,
            },
            LeaseAnswer::Unavailable {
                reason: "store".into(),
            },
        ]
    }

    #[test]
    fn lease_round_trip_keeps_the_version() {
        let req = LeaseRequest {
            v: WIRE_VERSION,
            rules_version: "abc".into(),
            items: vec![LeaseItem {
                rule: "r".into(),
                key: DescriptorKey::new("r", ["k"]),
                cost: 1,
                plan: None,
                want: None,
            }],
        };
        let text = serde_json::to_string(&req).unwrap_or_default();
        assert_eq!(serde_json::from_str::<LeaseRequest>(&text).ok(), Some(req));

        let resp = LeaseResponse {
            v: WIRE_VERSION,
            items: answers(),
        };
        let text = serde_json::to_string(&resp).unwrap_or_default();
        assert!(text.contains(r#""result":"deny""#), "{text}");
        // `local` is written only when set, and read as false when absent.
        assert_eq!(text.matches("local").count(), 1, "{text}");
        // So is a grant's turn (an agent of an earlier release sends none).
        assert_eq!(text.matches("next_ask_ms").count(), 1, "{text}");
        assert_eq!(
            serde_json::from_str::<LeaseResponse>(&text).ok(),
            Some(resp)
        );
    }

    #[test]
    fn sync_round_trip() {
        let req = SyncRequest {
            v: WIRE_VERSION,
            fetches_rules: false,
            filter_id: "node-1/vm".into(),
            rules_version: Some("v".into()),
            decisions: vec![DecisionCount {
                rule: "r".into(),
                outcome: Outcome::FailedOpen,
                count: 3,
            }],
        };
        let text = serde_json::to_string(&req).unwrap_or_default();
        assert!(text.contains("failed_open"));
        assert_eq!(serde_json::from_str::<SyncRequest>(&text).ok(), Some(req));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let text = r#"{"v":1,"items":[],"extra":true}"#;
        assert!(serde_json::from_str::<LeaseRequest>(text).is_err());
    }
}
