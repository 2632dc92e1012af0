//! `meshlimit-agent import --from envoy-ratelimit|limitador FILE`: a peer's
//! rate limit configuration turned into a meshlimit rules file.
//!
//! Both peers limit Envoy *descriptors*: lists of `(key, value)` entries that
//! Envoy's route `rate_limits` actions (or Kuadrant's wasm-shim) build from the
//! request. meshlimit reads the request itself, so each descriptor key must be
//! said to stand for a request part (`--map KEY=TARGET`): a key without a value
//! becomes a key part, a key with a value a `match` condition. `remote_address`
//! is the client IP unless mapped otherwise; every other key needs a `--map`.
//!
//! What cannot be said in meshlimit's rules is refused, naming the file, the
//! entry and the field; what can only be said approximately is listed, as
//! comments at the head of the output and on stderr. The output is compiled
//! before it is written, so it always passes `check-rules`.

mod envoy;
mod limitador;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;

use meshlimit_core::rules::config::{
    HeaderMatchConfig, KeyPartConfig, LimitConfig, MatchConfig, Mode, RuleConfig, RulesConfig,
};
use meshlimit_core::rules::{check_yaml_text, RuleSet, MAX_RULE_NAME, SCHEMA_VERSION};

use crate::config::{ImportArgs, ImportFormat};

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

/// The `--map` options, with the defaults under them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mapping {
    keys: BTreeMap<String, Target>,
    values: BTreeMap<(String, String), Condition>,
}

impl Mapping {
    /// The defaults (`remote_address` is the client IP), then each `--map`.
    pub(crate) fn from_options(options: &[String]) -> Result<Self, String> {
        let mut m = Mapping::default();
        m.keys.insert("remote_address".into(), Target::ClientIp);
        for option in options {
            m.add(option)?;
        }
        Ok(m)
    }

    fn add(&mut self, option: &str) -> Result<(), String> {
        let usage = || {
            format!(
                "--map `{option}`: write KEY=TARGET (TARGET: client_ip, method, path, authority, \
                 route, header:NAME, query:NAME) or KEY:VALUE=CONDITION (CONDITION: path:/P, \
                 path_prefix:/P, method:M, authority:HOST, header:NAME, header:NAME=VALUE, any)"
            )
        };
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
                        _ => return Err(usage()),
                    },
                    Some(("header", name)) if !name.is_empty() => {
                        Target::Header(name.to_ascii_lowercase())
                    }
                    Some(("query", name)) if !name.is_empty() => Target::Query(name.to_string()),
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

/// One entry a peer's limit requires of a request's descriptor.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) key: String,
    /// `None`: any value, one bucket per value.
    pub(crate) value: Option<String>,
    /// The value is a pattern (`*` matches any text: envoyproxy/ratelimit).
    pub(crate) pattern: bool,
    /// Every value the pattern matches shares one bucket.
    pub(crate) shared: bool,
    /// Where it is written (`descriptors[0]`, `limits[2]`) and in which field
    /// (`key`, `conditions[1]`), for errors.
    pub(crate) at: String,
    pub(crate) field: String,
}

/// A peer's limit, read: what it requires, its rate, and where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    /// Where it is in the peer's file (`descriptors[0].descriptors[1]`, `limits[2]`).
    pub(crate) at: String,
    /// A readable name for the rule.
    pub(crate) name: String,
    pub(crate) entries: Vec<Entry>,
    pub(crate) limit: LimitConfig,
    pub(crate) shadow: bool,
}

/// A refusal: which file, which entry, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImportError {
    pub(crate) file: String,
    pub(crate) at: String,
    pub(crate) field: String,
    pub(crate) message: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.at.is_empty(), self.field.is_empty()) {
            (true, true) => write!(f, "{}: {}", self.file, self.message),
            (true, false) => write!(f, "{}: field {}: {}", self.file, self.field, self.message),
            (false, true) => write!(f, "{}: {}: {}", self.file, self.at, self.message),
            (false, false) => write!(
                f,
                "{}: {}: field {}: {}",
                self.file, self.at, self.field, self.message
            ),
        }
    }
}

/// What an import found: the rules, the approximations made, the refusals.
#[derive(Debug, Default)]
pub(crate) struct Imported {
    pub rules: Vec<RuleConfig>,
    pub(crate) notes: BTreeSet<String>,
    pub(crate) errors: Vec<ImportError>,
}

/// Collects errors and notes while one file is read.
pub(crate) struct Report<'f> {
    pub(crate) file: &'f str,
    pub(crate) errors: Vec<ImportError>,
    pub(crate) notes: BTreeSet<String>,
}

impl<'f> Report<'f> {
    fn new(file: &'f str) -> Self {
        Self {
            file,
            errors: Vec::new(),
            notes: BTreeSet::new(),
        }
    }

    /// Records a refusal; the same one twice (a parent entry of two limits) once.
    pub(crate) fn refuse(&mut self, at: &str, field: &str, message: impl Into<String>) {
        let e = ImportError {
            file: self.file.to_string(),
            at: at.to_string(),
            field: field.to_string(),
            message: message.into(),
        };
        if !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }

    pub(crate) fn note(&mut self, text: impl Into<String>) {
        self.notes.insert(text.into());
    }
}

/// Converts `text` (the peer's file, named `file` in messages).
pub(crate) fn convert(format: ImportFormat, file: &str, text: &str, mapping: &Mapping) -> Imported {
    let mut report = Report::new(file);
    if let Err(e) = check_yaml_text(file, text) {
        report.refuse(
            "",
            "",
            e.to_string().trim_start_matches(&format!("{file}: ")),
        );
        return finish(report, Vec::new());
    }
    let drafts = match format {
        ImportFormat::EnvoyRatelimit => envoy::read(text, &mut report),
        ImportFormat::Limitador => limitador::read(text, &mut report),
    };
    if !drafts.is_empty() {
        report.note(
            "the peer counts fixed windows (up to twice the limit across a window's end); \
             meshlimit's token bucket admits `requests` at once (the burst) and refills them \
             evenly over `per`",
        );
    }
    let mut names = BTreeSet::new();
    let rules = drafts
        .iter()
        .filter_map(|d| rule_of(d, mapping, &mut names, &mut report))
        .collect();
    finish(report, rules)
}

fn finish(report: Report<'_>, rules: Vec<RuleConfig>) -> Imported {
    Imported {
        rules,
        notes: report.notes,
        errors: report.errors,
    }
}

/// What a rule is being built from: its conditions and key so far.
#[derive(Default)]
struct Builder {
    matches: MatchConfig,
    key: Vec<KeyPartConfig>,
    /// A key part every request the conditions admit has the same value of:
    /// the key of a limit the peer counts in one bucket.
    constant: Option<KeyPartConfig>,
}

fn rule_of(
    d: &Draft,
    mapping: &Mapping,
    names: &mut BTreeSet<String>,
    report: &mut Report<'_>,
) -> Option<RuleConfig> {
    let before = report.errors.len();
    let mut b = Builder::default();
    for e in &d.entries {
        let value_field = e.field.replace("key", "value");
        let by_value = e
            .value
            .as_ref()
            .and_then(|v| mapping.values.get(&(e.key.clone(), v.clone())));
        match (&e.value, by_value, mapping.keys.get(&e.key)) {
            (_, Some(c), _) => b.condition(c, &e.at, &value_field, report),
            (None, None, Some(target)) => b.key.push(key_part(target)),
            (None, None, None) => report.refuse(
                &e.at,
                &e.field,
                format!(
                    "descriptor key `{}` names no request part: say which with --map {}=TARGET \
                     (client_ip, method, path, authority, route, header:NAME, query:NAME)",
                    e.key, e.key
                ),
            ),
            (Some(v), None, Some(target)) => b.value(target, v, e, &e.at, &value_field, report),
            (Some(v), None, None) => report.refuse(
                &e.at,
                &value_field,
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
    if b.key.is_empty() {
        match b.constant.take() {
            Some(part) => b.key.push(part),
            None if report.errors.len() == before => report.refuse(
                &d.at,
                "",
                "the peer counts every matching request in one bucket, and a meshlimit rule \
                 keys on a request part: give one of its entries an exact value condition \
                 (header:NAME=VALUE, method:M, path:/P, authority:HOST) or a key without a value",
            ),
            None => {}
        }
    }
    if report.errors.len() != before {
        return None;
    }
    let name = unique_name(&d.name, names);
    let rule = RuleConfig {
        name,
        matches: (b.matches != MatchConfig::default()).then_some(b.matches),
        key: b.key,
        limit: Some(d.limit.clone()),
        plans: None,
        cost: None,
        mode: d.shadow.then_some(Mode::Shadow),
        on_failure: None,
        accuracy: None,
        scope: None,
        owner: None,
        expires: None,
    };
    // What the peer wrote may still be no valid rule (a method `G3T`, a host
    // with a port): refused here, at the peer's entry, not in the output.
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
                    &d.at,
                    "",
                    format!("gives rule field `{}`: {}", err.field, err.message),
                );
            }
            None
        }
    }
}

fn key_part(t: &Target) -> KeyPartConfig {
    match t {
        Target::ClientIp => KeyPartConfig::ClientIp,
        Target::Method => KeyPartConfig::Method,
        Target::Path => KeyPartConfig::Path,
        Target::Authority => KeyPartConfig::Authority,
        Target::Route => KeyPartConfig::Route,
        Target::Header(h) => KeyPartConfig::Header(h.clone()),
        Target::Query(q) => KeyPartConfig::Query(q.clone()),
    }
}

impl Builder {
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
            Target::ClientIp | Target::Route | Target::Query(_) => report.refuse(
                at,
                field,
                format!(
                    "meshlimit cannot match a request on a value of its {} (`{v}`): only headers, \
                     method, path and host are conditions",
                    match target {
                        Target::ClientIp => "client IP".to_string(),
                        Target::Route => "route".to_string(),
                        Target::Query(q) => format!("query parameter `{q}`"),
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
                if v.is_some() {
                    self.constant = Some(KeyPartConfig::Header(name.to_string()));
                }
            }
        }
    }

    fn set_method(&mut self, m: &str, at: &str, field: &str, report: &mut Report<'_>) {
        let m = m.to_ascii_uppercase();
        match &self.matches.methods {
            Some(old) if *old != [m.clone()] => {
                report.refuse(at, field, format!("a second, different method `{m}`"))
            }
            _ => {
                self.matches.methods = Some(vec![m]);
                self.constant = Some(KeyPartConfig::Method);
            }
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
        if exact.is_some() {
            self.constant = Some(KeyPartConfig::Path);
        }
    }

    fn set_authority(&mut self, h: &str, at: &str, field: &str, report: &mut Report<'_>) {
        if self.matches.authority.is_some() {
            report.refuse(at, field, "a second host condition");
            return;
        }
        self.matches.authority = Some(h.to_string());
        if !h.starts_with("*.") {
            self.constant = Some(KeyPartConfig::Authority);
        }
    }
}

/// A rule name from a peer's: lower case, `[a-z0-9._-]`, at most 64
/// characters, unique in the file (`-2`, `-3`… when taken).
fn unique_name(hint: &str, taken: &mut BTreeSet<String>) -> String {
    let mut base: String = hint
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '_' | '-') => c,
            _ => '-',
        })
        .collect();
    while base.contains("--") {
        base = base.replace("--", "-");
    }
    let base = base.trim_matches('-').to_string();
    let base = if base.is_empty() {
        "rule".to_string()
    } else {
        base
    };
    let fit = |s: &str, room: usize| s.chars().take(room).collect::<String>();
    let mut name = fit(&base, MAX_RULE_NAME);
    let mut n = 2;
    while taken.contains(&name) {
        let suffix = format!("-{n}");
        name = format!("{}{suffix}", fit(&base, MAX_RULE_NAME - suffix.len()));
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// The period text for `seconds`: the largest whole unit (`90s`, `2m`, `1h`, `7d`).
pub(crate) fn period(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The rules file text: the approximations as comments, then the rules.
pub(crate) fn render(imported: &Imported, from: &str) -> Result<String, String> {
    let config = RulesConfig {
        version: SCHEMA_VERSION,
        defaults: Default::default(),
        rules: imported.rules.clone(),
        changes: Default::default(),
    };
    // The output must be a valid rules file: compiled here, as the agent will.
    RuleSet::compile(&config).map_err(|e| e.to_string())?;
    let yaml = serde_saphyr::to_string(&config).map_err(|e| e.to_string())?;
    let mut out = format!("# Imported by `meshlimit-agent import` from {from}.\n");
    if imported.notes.is_empty() {
        out.push_str("# No approximations.\n");
    } else {
        out.push_str("# Approximations (read each before enforcing these rules):\n");
        for note in &imported.notes {
            out.push_str(&format!("# - {note}\n"));
        }
    }
    out.push_str(&yaml.replace("defaults: {}\n", ""));
    Ok(out)
}

/// The command: 0 written, 1 refused (every reason on `err`), 64 a bad `--map`.
pub fn import(args: &ImportArgs, out: &mut impl Write, err: &mut impl Write) -> u8 {
    let mapping = match Mapping::from_options(&args.map) {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(err, "meshlimit-agent: {e}");
            return crate::config::EXIT_USAGE;
        }
    };
    let file = args.file.display().to_string();
    let text = match crate::rules_watch::read_rules_file(&args.file) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "{file}: cannot read: {e}");
            return 1;
        }
    };
    let imported = convert(args.from, &file, &text, &mapping);
    if !imported.errors.is_empty() {
        for e in &imported.errors {
            let _ = writeln!(err, "{e}");
        }
        let n = counted(imported.errors.len(), "refusal");
        let _ = writeln!(err, "{file}: not imported ({n}); nothing written");
        return 1;
    }
    if imported.rules.is_empty() {
        let _ = writeln!(err, "{file}: no limit to import");
        return 1;
    }
    let from = format!("{} `{}`", args.from.as_str(), file);
    let text = match render(&imported, &from) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(
                err,
                "{file}: the converted rules do not compile (a bug): {e}"
            );
            return 1;
        }
    };
    for note in &imported.notes {
        let _ = writeln!(err, "{file}: approximation: {note}");
    }
    match &args.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                let _ = writeln!(err, "{}: cannot write: {e}", path.display());
                return 1;
            }
        }
        None => {
            let _ = write!(out, "{text}");
        }
    }
    let n = counted(imported.rules.len(), "rule");
    let _ = writeln!(err, "{file}: {n} imported");
    0
}

/// `1 rule`, `2 rules`.
fn counted(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests;
