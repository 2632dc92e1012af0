//! One meshlimit rule from a peer's limit: its conditions, its key and a
//! unique name, or the reasons it cannot be said in meshlimit's rules.

use std::collections::{HashMap, HashSet};

use meshlimit_core::rules::config::{
    Algorithm, HeaderMatchConfig, KeyPartConfig, MatchConfig, Mode, RuleConfig, RulesConfig,
};
use meshlimit_core::rules::{RuleSet, MAX_RULE_NAME, SCHEMA_VERSION};

use super::{Condition, Draft, Entry, Mapping, Report, Target};
use meshlimit_core::printable::hidden;

/// What a rule is being built from: its conditions and key so far.
#[derive(Default)]
struct Builder {
    matches: MatchConfig,
    key: Vec<KeyPartConfig>,
}

/// The rule of a draft, or `None` with every reason on `report`: an entry
/// `--map` does not say, or a rule that does not compile.
pub(super) fn rule_of(
    d: &Draft,
    mapping: &Mapping,
    names: &mut Names,
    report: &mut Report<'_>,
) -> Option<RuleConfig> {
    let before = report.errors.len();
    let mut b = Builder::default();
    for e in &d.entries {
        b.entry(e, mapping, report);
    }
    if report.errors.len() != before {
        return None;
    }
    let rule = RuleConfig {
        name: names.unique(&d.name),
        matches: (b.matches != MatchConfig::default()).then_some(b.matches),
        key: b.key,
        limit: Some(d.limit.clone()),
        plans: None,
        cost: None,
        mode: d.shadow.then_some(Mode::Shadow),
        on_failure: None,
        accuracy: None,
        scope: None,
        // Both peers count fixed windows.
        algorithm: Some(Algorithm::FixedWindow),
        owner: None,
        expires: None,
        log_sample: None,
        log_key: None,
        cold_start: None,
        schedule: Vec::new(),
    };
    compiled(rule, &d.at, report)
}

/// `rule`, if it compiles on its own. What the peer wrote may still be no
/// valid rule (a method `G3T`, a host with a port): refused here, at the
/// peer's entry `at`, not in the output.
fn compiled(rule: RuleConfig, at: &str, report: &mut Report<'_>) -> Option<RuleConfig> {
    let alone = RulesConfig {
        version: SCHEMA_VERSION,
        defaults: Default::default(),
        rules: vec![rule.clone()],
        changes: Default::default(),
    };
    match RuleSet::compile(&alone) {
        Ok(_) => Some(rule),
        Err(e) => {
            for err in e.errors {
                report.refuse(
                    at,
                    "",
                    format!("gives rule field `{}`: {}", err.field, err.message),
                );
            }
            None
        }
    }
}

/// Whether `e`'s value holds a character that does not print (refused as
/// `value_field`).
fn refuses_hidden(e: &Entry, value_field: &str, report: &mut Report<'_>) -> bool {
    let Some(c) = e
        .value
        .as_deref()
        .and_then(|v| v.chars().find(|c| hidden(*c)))
    else {
        return false;
    };
    report.refuse(
        &e.at,
        value_field,
        format!(
            "holds U+{:04X}, a character that does not print: a rules file does not \
             carry it, and no request's header, method, path or host has it",
            u32::from(c)
        ),
    );
    true
}

/// Refuses an entry no `--map` names, saying which `--map` would.
fn unmapped(e: &Entry, value_field: &str, report: &mut Report<'_>) {
    match &e.value {
        None => report.refuse(
            &e.at,
            &e.field,
            format!(
                "descriptor key `{}` names no request part: say which with --map {}=TARGET \
                 (client_ip, method, path, authority, route, cluster, header:NAME, query:NAME, \
                 claim:NAME)",
                e.key, e.key
            ),
        ),
        Some(v) => report.refuse(
            &e.at,
            value_field,
            format!(
                "descriptor `{key}: {v}` names no request condition: say which requests carry \
                 it with --map {key}=TARGET (the request part it is a value of) or \
                 --map {key}:{v}=CONDITION (path:/P, path_prefix:/P, method:M, authority:HOST, \
                 header:NAME=VALUE, any)",
                key = e.key
            ),
        ),
    }
}

/// The key part a target is, if meshlimit keys on it.
fn key_part(t: &Target) -> Option<KeyPartConfig> {
    Some(match t {
        Target::ClientIp => KeyPartConfig::ClientIp,
        Target::Method => KeyPartConfig::Method,
        Target::Path => KeyPartConfig::Path,
        Target::Authority => KeyPartConfig::Authority,
        Target::Route => KeyPartConfig::Route,
        Target::Header(h) => KeyPartConfig::Header(h.clone()),
        Target::Query(q) => KeyPartConfig::Query(q.clone()),
        Target::Claim(c) => {
            KeyPartConfig::Metadata(meshlimit_core::metadata::MetadataPath::claim(c))
        }
        Target::Cluster => return None,
    })
}

impl Builder {
    /// One entry of a draft, as `mapping` says: a condition or a key part, or
    /// refused on `report`.
    fn entry(&mut self, e: &Entry, mapping: &Mapping, report: &mut Report<'_>) {
        let value_field = e.field.replace("key", "value");
        if refuses_hidden(e, &value_field, report) {
            return;
        }
        let by_value = e
            .value
            .as_ref()
            .and_then(|v| mapping.values.get(&(e.key.clone(), v.clone())));
        match (&e.value, by_value, mapping.keys.get(&e.key)) {
            (_, Some(c), _) => self.condition(c, &e.at, &value_field, report),
            (None, None, Some(target)) => match key_part(target) {
                Some(part) => self.key.push(part),
                None => report.refuse(
                    &e.at,
                    &e.field,
                    format!(
                        "descriptor key `{}` (the upstream cluster) has no value: meshlimit scopes \
                         a rule to a cluster (`match.cluster`) but does not key on it",
                        e.key
                    ),
                ),
            },
            (Some(v), None, Some(target)) => self.value(target, v, e, &e.at, &value_field, report),
            (_, None, None) => unmapped(e, &value_field, report),
        }
    }

    /// A descriptor entry with a value, of a key mapped to a request part.
    fn value(
        &mut self,
        target: &Target,
        v: &str,
        e: &Entry,
        at: &str,
        field: &str,
        report: &mut Report<'_>,
    ) {
        if e.pattern && v.contains('*') {
            // Only a trailing `*` on a path is a prefix meshlimit can match.
            let prefix = v.strip_suffix('*').filter(|p| !p.contains('*'));
            match (target, prefix) {
                (Target::Path, Some(p)) if p.starts_with('/') => {
                    self.set_path(None, Some(p), at, field, report);
                    report.note(format!(
                        "path pattern `{v}`: a prefix of the normalised path (meshlimit matches \
                         `/a/../b` as `/b`, the peer matched the text Envoy sent)"
                    ));
                    if !e.shared {
                        // The peer kept a counter per matching value.
                        self.key.push(KeyPartConfig::Path);
                    }
                }
                _ => report.refuse(
                    at,
                    field,
                    format!(
                        "`{v}` is a pattern; meshlimit matches a pattern only as a path prefix \
                         (`/api/*` with --map {}=path)",
                        e.key
                    ),
                ),
            }
            return;
        }
        match target {
            Target::Header(name) => self.set_header(name, Some(v), at, field, report),
            Target::Method => self.set_method(v, at, field, report),
            Target::Path => self.set_path(Some(v), None, at, field, report),
            Target::Authority => self.set_authority(v, at, field, report),
            Target::Cluster => self.set_cluster(v, at, field, report),
            Target::Route => self.set_route(v, at, field, report),
            Target::ClientIp | Target::Query(_) | Target::Claim(_) => report.refuse(
                at,
                field,
                format!(
                    "meshlimit cannot match a request on a value of its {} (`{v}`): only headers, \
                     method, path, host, route and cluster are conditions",
                    match target {
                        Target::ClientIp => "client IP".to_string(),
                        Target::Query(q) => format!("query parameter `{q}`"),
                        Target::Claim(c) => format!("JWT claim `{c}`"),
                        _ => String::new(),
                    }
                ),
            ),
        }
    }

    /// A constant descriptor value mapped to the requests that carry it.
    fn condition(&mut self, c: &Condition, at: &str, field: &str, report: &mut Report<'_>) {
        match c {
            Condition::Path(p) => self.set_path(Some(p), None, at, field, report),
            Condition::PathPrefix(p) => self.set_path(None, Some(p), at, field, report),
            Condition::Method(m) => self.set_method(m, at, field, report),
            Condition::Authority(h) => self.set_authority(h, at, field, report),
            Condition::Header(name, v) => self.set_header(name, v.as_deref(), at, field, report),
            Condition::Any => {}
        }
    }

    fn set_header(
        &mut self,
        name: &str,
        v: Option<&str>,
        at: &str,
        field: &str,
        report: &mut Report<'_>,
    ) {
        let hm = HeaderMatchConfig {
            present: v.is_none().then_some(true),
            equals: v.map(str::to_string),
        };
        match self.matches.headers.get(name) {
            Some(old) if *old != hm => report.refuse(
                at,
                field,
                format!("a second, different condition on header `{name}`"),
            ),
            _ => {
                self.matches.headers.insert(name.to_string(), hm);
            }
        }
    }

    fn set_method(&mut self, m: &str, at: &str, field: &str, report: &mut Report<'_>) {
        let m = m.to_ascii_uppercase();
        match &self.matches.methods {
            Some(old) if *old != [m.clone()] => {
                report.refuse(at, field, format!("a second, different method `{m}`"))
            }
            _ => self.matches.methods = Some(vec![m]),
        }
    }

    fn set_path(
        &mut self,
        exact: Option<&str>,
        prefix: Option<&str>,
        at: &str,
        field: &str,
        report: &mut Report<'_>,
    ) {
        if self.matches.path.is_some() || self.matches.path_prefix.is_some() {
            report.refuse(at, field, "a second path condition");
            return;
        }
        if !exact.or(prefix).unwrap_or_default().starts_with('/') {
            report.refuse(
                at,
                field,
                format!("`{}` is not a path", exact.or(prefix).unwrap_or_default()),
            );
            return;
        }
        self.matches.path = exact.map(str::to_string);
        self.matches.path_prefix = prefix.map(str::to_string);
    }

    fn set_cluster(&mut self, c: &str, at: &str, field: &str, report: &mut Report<'_>) {
        if self.matches.cluster.is_some() {
            report.refuse(at, field, "a second cluster condition");
            return;
        }
        self.matches.cluster = Some(c.to_string());
    }

    fn set_route(&mut self, r: &str, at: &str, field: &str, report: &mut Report<'_>) {
        if self.matches.route.is_some() {
            report.refuse(at, field, "a second route condition");
            return;
        }
        self.matches.route = Some(r.to_string());
    }

    fn set_authority(&mut self, h: &str, at: &str, field: &str, report: &mut Report<'_>) {
        if self.matches.authority.is_some() {
            report.refuse(at, field, "a second host condition");
            return;
        }
        self.matches.authority = Some(h.to_string());
    }
}

/// The rule names given so far: each name taken, and per stem and suffix
/// width the next number to try, so that a name is never tried twice and
/// naming N rules takes O(N) tries however many share a stem.
#[derive(Default)]
pub(super) struct Names {
    taken: HashSet<String>,
    /// `(stem, digits)`: the next `n` of `stem-n` with `n` of that many digits.
    next: HashMap<(String, u32), u64>,
}

impl Names {
    /// A rule name from a peer's: lower case, `[a-z0-9._-]`, at most 64
    /// characters, unique in the file (`-2`, `-3`… when taken; the stem is cut
    /// to leave room for the suffix).
    pub(super) fn unique(&mut self, hint: &str) -> String {
        let base = sanitised(hint);
        let fit = |room: usize| base.chars().take(room).collect::<String>();
        let first = fit(MAX_RULE_NAME);
        super::step();
        if self.taken.insert(first.clone()) {
            return first;
        }
        let mut digits = 1u32;
        loop {
            let low = if digits == 1 {
                2
            } else {
                10u64.pow(digits - 1)
            };
            let high = 10u64.saturating_pow(digits) - 1;
            let room = MAX_RULE_NAME.saturating_sub(1 + digits as usize);
            let stem = fit(room);
            let next = self.next.entry((stem.clone(), digits)).or_insert(low);
            while *next <= high {
                let name = format!("{stem}-{next}");
                *next += 1;
                super::step();
                if self.taken.insert(name.clone()) {
                    return name;
                }
            }
            digits += 1;
        }
    }
}

/// A peer's name in `[a-z0-9._-]`, no `--`, no `-` at either end; `rule` when
/// nothing is left.
fn sanitised(hint: &str) -> String {
    let mut base = String::with_capacity(hint.len());
    for c in hint.chars() {
        let c = match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '_' | '-') => c,
            _ => '-',
        };
        if !(c == '-' && base.ends_with('-')) {
            base.push(c);
        }
    }
    match base.trim_matches('-') {
        "" => "rule".to_string(),
        trimmed => trimmed.to_string(),
    }
}
