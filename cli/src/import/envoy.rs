//! envoyproxy/ratelimit's service configuration: one `domain` and a tree of
//! `descriptors`, each with a `key`, an optional `value` (a pattern where it
//! holds `*`), an optional `rate_limit` (`unit`, `requests_per_unit`, or
//! `unlimited`) and nested `descriptors`. A limit applies to a descriptor whose
//! entries are the path from the root to it.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use meshlimit_core::rules::config::LimitConfig;

use super::{Draft, Entry, Report};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    domain: String,
    #[serde(default)]
    descriptors: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Descriptor {
    key: String,
    #[serde(default)]
    value: Option<Value>,
    #[serde(default)]
    rate_limit: Option<RateLimit>,
    #[serde(default)]
    descriptors: Vec<Descriptor>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    metadata: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimit {
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: Option<u64>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<Value>,
}

/// The peer's units, as it counts them (a month is 30 days, a year 365).
fn unit_seconds(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "second" => 1,
        "minute" => 60,
        "hour" => 3_600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        "month" => 30 * 86_400,
        "year" => 365 * 86_400,
        _ => return None,
    })
}

pub(super) fn read(text: &str, report: &mut Report<'_>) -> Vec<Draft> {
    let config: Config = match meshlimit_core::rules::read_yaml(text) {
        Ok(c) => c,
        Err(e) => {
            report.refuse(
                "",
                "",
                format!("not an envoyproxy/ratelimit configuration: {e}"),
            );
            return Vec::new();
        }
    };
    if config.descriptors.is_empty() {
        report.refuse("", "descriptors", "no descriptors: nothing to import");
        return Vec::new();
    }
    let count = counted(&config.descriptors);
    if count > super::MAX_LIMITS {
        report.refuse(
            "",
            "descriptors",
            format!(
                "{count} descriptors, more than the {} one import reads: split the file",
                super::MAX_LIMITS
            ),
        );
        return Vec::new();
    }
    report.note(format!(
        "domain `{}` is dropped: the rules apply to every request the filter sees, whichever \
         domain its Envoy would have named",
        config.domain
    ));
    report.note(
        "every rule applies to each request it matches; the peer applied a limit only when \
         Envoy sent a descriptor of exactly its entries (one route `rate_limits` entry), and \
         only its most specific match",
    );
    let mut drafts = Vec::new();
    walk(
        &config.descriptors,
        "descriptors",
        &[],
        &config.domain,
        report,
        &mut drafts,
    );
    drafts
}

/// The descriptors of `list` at every depth.
fn counted(list: &[Descriptor]) -> usize {
    list.iter().map(|d| 1 + counted(&d.descriptors)).sum()
}

/// The rate (requests, seconds) of a value-less descriptor's limit: the limit
/// of every value of its key.
type Generic = Option<(u64, u64)>;

/// Each key of `list` and the rate of its first value-less descriptor, if it
/// has a limit: looked up once per sibling, not by a scan of the list.
fn generic_limits(list: &[Descriptor]) -> HashMap<&str, Generic> {
    let mut by_key = HashMap::new();
    for s in list.iter().filter(|s| s.value.is_none()) {
        super::step();
        by_key.entry(s.key.as_str()).or_insert_with(|| {
            s.rate_limit
                .as_ref()
                .filter(|g| !g.unlimited)
                .and_then(|g| Some((g.requests_per_unit?, unit_seconds(g.unit.as_deref()?)?)))
        });
    }
    by_key
}

/// A descriptor's value as text: the peer reads scalars as strings.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Every descriptor of `list` (found at `prefix`, below the entries `chain`),
/// and those below it: their limits as drafts named under `name`.
fn walk(
    list: &[Descriptor],
    prefix: &str,
    chain: &[Entry],
    name: &str,
    report: &mut Report<'_>,
    drafts: &mut Vec<Draft>,
) {
    let generic = generic_limits(list);
    for (i, d) in list.iter().enumerate() {
        let at = format!("{prefix}[{i}]");
        let Some(value) = value_of(d, &at, report) else {
            continue;
        };
        let pattern = value.as_deref().is_some_and(|v| v.contains('*'));
        check_options(d, pattern, &at, report);
        let rule_name = format!("{name}.{}", step_name(&d.key, value.as_deref()));
        let mut here = chain.to_vec();
        here.push(Entry {
            key: d.key.clone(),
            value,
            pattern,
            shared: d.share_threshold,
            at: at.clone(),
            field: "key".into(),
        });
        if let Some(rl) = &d.rate_limit {
            let generic = generic.get(d.key.as_str()).copied().flatten();
            if let Some(draft) = limit_of(d, rl, generic, &at, &here, &rule_name, report) {
                drafts.push(draft);
            }
        } else if d.shadow_mode {
            report.refuse(
                &at,
                "shadow_mode",
                "shadow mode on a descriptor without `rate_limit`",
            );
        }
        walk(
            &d.descriptors,
            &format!("{at}.descriptors"),
            &here,
            &rule_name,
            report,
            drafts,
        );
    }
}

/// The descriptor's value (`Some(None)` for none, or an empty one), or `None`
/// when it is refused: not a scalar.
fn value_of(d: &Descriptor, at: &str, report: &mut Report<'_>) -> Option<Option<String>> {
    match &d.value {
        None => Some(None),
        Some(v) => match scalar(v) {
            Some(s) if s.is_empty() => Some(None),
            Some(s) => Some(Some(s)),
            None => {
                report.refuse(at, "value", "a descriptor value is a string");
                None
            }
        },
    }
}

/// The options meshlimit drops (noted) or cannot honour (refused): metrics
/// detail, and a shared threshold on a value without `*`.
fn check_options(d: &Descriptor, pattern: bool, at: &str, report: &mut Report<'_>) {
    if d.detailed_metric || d.value_to_metric || d.metadata.is_some() {
        report.note(
            "`detailed_metric`, `value_to_metric` and `metadata` are dropped: meshlimit's \
             metrics are per rule, keys appear by id in `meshlimit_top_rejected_keys`",
        );
    }
    if d.share_threshold && !pattern {
        report.refuse(
            at,
            "share_threshold",
            "only a value with `*` shares a threshold",
        );
    }
}

/// A descriptor's part of a rule name: `KEY`, or `KEY_VALUE` with the
/// value's characters other than ASCII letters and digits as `-`.
fn step_name(key: &str, value: Option<&str>) -> String {
    match value {
        Some(v) => {
            let v: String = v
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            format!("{key}_{}", v.trim_matches('-'))
        }
        None => key.to_string(),
    }
}

/// The draft of one descriptor's `rate_limit`, or `None` (refused, or no limit).
fn limit_of(
    d: &Descriptor,
    rl: &RateLimit,
    generic: Generic,
    at: &str,
    entries: &[Entry],
    rule_name: &str,
    report: &mut Report<'_>,
) -> Option<Draft> {
    if refuses_modes(d, rl, at, report) {
        return None;
    }
    // `generic`: the value-less sibling of the same key, whose limit covers
    // this value too.
    let is_value = entries.last().is_some_and(|e| e.value.is_some());
    if rl.unlimited {
        unlimited(d, rl, generic.filter(|_| is_value), at, report);
        return None;
    }
    let (unit, seconds) = unit_of(rl, at, report)?;
    let requests = requests_of(rl, at, report)?;
    if let (true, Some(generic)) = (is_value, generic) {
        if !under_generic(d, (requests, seconds), generic, at, report) {
            return None;
        }
    }
    if unit.eq_ignore_ascii_case("month") || unit.eq_ignore_ascii_case("year") {
        report.note(format!(
            "{at}: a {unit} is {} days, as the peer counts it",
            seconds / 86_400
        ));
    }
    Some(Draft {
        at: at.to_string(),
        name: rl.name.clone().unwrap_or_else(|| rule_name.to_string()),
        entries: entries.to_vec(),
        limit: LimitConfig {
            requests,
            per: super::period(seconds),
            burst: None,
        },
        shadow: d.shadow_mode,
    })
}

/// Whether the limit is refused for what meshlimit has no counterpart of:
/// one limit replacing another, quota mode (each refused on `report`).
fn refuses_modes(d: &Descriptor, rl: &RateLimit, at: &str, report: &mut Report<'_>) -> bool {
    if !rl.replaces.is_empty() {
        report.refuse(
            at,
            "rate_limit.replaces",
            "meshlimit applies every rule a request meets; one limit cannot replace another",
        );
    }
    if d.quota_mode {
        report.refuse(at, "quota_mode", "meshlimit has no quota mode");
    }
    !rl.replaces.is_empty() || d.quota_mode
}

/// An `unlimited` limit gives no rule: refused where it exempts a value from
/// the limit of its key (`generic`, that value-less sibling's rate), else noted.
fn unlimited(d: &Descriptor, rl: &RateLimit, generic: Generic, at: &str, report: &mut Report<'_>) {
    if rl.unit.is_some() || rl.requests_per_unit.is_some() {
        report.refuse(
            at,
            "rate_limit.unlimited",
            "`unlimited` with a unit or a rate",
        );
    }
    match generic {
        Some(_) => report.refuse(
            at,
            "rate_limit.unlimited",
            format!(
                "exempts one value from the limit of every `{}`; meshlimit applies every \
                 rule a request meets and has no exemption",
                d.key
            ),
        ),
        None => report.note(format!(
            "{at} (`unlimited`) gives no rule: meshlimit limits only what a rule names"
        )),
    }
}

/// The limit's unit as written and in seconds, or `None` (refused).
fn unit_of<'r>(rl: &'r RateLimit, at: &str, report: &mut Report<'_>) -> Option<(&'r str, u64)> {
    let Some(unit) = rl.unit.as_deref() else {
        report.refuse(
            at,
            "rate_limit.unit",
            "required: second, minute, hour, day, week, month or year",
        );
        return None;
    };
    let Some(seconds) = unit_seconds(unit) else {
        report.refuse(
            at,
            "rate_limit.unit",
            format!("`{unit}` is not one of second, minute, hour, day, week, month, year"),
        );
        return None;
    };
    Some((unit, seconds))
}

/// The limit's requests per unit, or `None` (refused): missing, 0, or above
/// meshlimit's largest limit.
fn requests_of(rl: &RateLimit, at: &str, report: &mut Report<'_>) -> Option<u32> {
    let field = "rate_limit.requests_per_unit";
    match rl.requests_per_unit {
        None => {
            report.refuse(at, field, "required");
            None
        }
        Some(0) => {
            report.refuse(
                at,
                field,
                "0 refuses every request; meshlimit limits, it does not deny: block these \
                 requests in Envoy (an RBAC filter)",
            );
            None
        }
        Some(n) => u32::try_from(n).ok().or_else(|| {
            report.refuse(
                at,
                field,
                format!("{n} is above meshlimit's largest limit, {}", u32::MAX),
            );
            None
        }),
    }
}

/// Whether a value's `rate` (requests, seconds) is at most the `generic`
/// rate of every value of its key, which meshlimit applies as well; refused
/// if above, noted if not.
fn under_generic(
    d: &Descriptor,
    (requests, seconds): (u32, u64),
    (g_requests, g_seconds): (u64, u64),
    at: &str,
    report: &mut Report<'_>,
) -> bool {
    // Rates compared exactly: requests ÷ seconds, cross-multiplied.
    if u128::from(requests) * u128::from(g_seconds) > u128::from(g_requests) * u128::from(seconds) {
        report.refuse(
            at,
            "rate_limit",
            format!(
                "raises one value above the limit of every `{}` ({g_requests} per {}); \
                 meshlimit applies both rules, so the lower one would hold",
                d.key,
                super::period(g_seconds)
            ),
        );
        return false;
    }
    report.note(format!(
        "{at}: requests with this `{}` also count against the rule for every `{}` (the \
         peer counted them only here)",
        d.key, d.key
    ));
    true
}
