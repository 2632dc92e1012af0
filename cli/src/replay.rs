//! `meshlimit replay --rules NEW [--baseline OLD] LOG`: a recorded stretch
//! of traffic replayed offline through core's own rules matching and token
//! buckets, to see what a rules change would do before it ships: per rule, how
//! many requests NEW (and OLD) would reject, and the keys NEW would newly limit.
//!
//! The log is JSON lines, one request each, as Envoy's access log writes them
//! with a `json_format` (docs/guide/replay.md): `start_time`
//! (`2026-12-01T14:02:00.123Z`), `method`, `path`, optionally `client_ip`,
//! `route`, and any other string field is a request header of that name. Envoy
//! writes `-` for what a request did not have; it counts as absent.
//!
//! It may also be the agent's decision log (docs/guide/why-limited.md), a line
//! of which is one rule's decision for one key, named by its id: each line
//! spends from that key's bucket under the same rule of NEW (a rule NEW does
//! not have is counted as skipped), on its own, with no other rule in play.
//! Rejections are always logged, allowed decisions at the rule's `log_sample`:
//! a log written with `log_sample: 1` replays every decision; a sampled one
//! replays fewer requests than ran (the report says how many lines were
//! sampled).
//!
//! What it models: each key's bucket as if one store held it exactly (no lease
//! or region split), and the filter's order over it: the rules that apply,
//! strictest first, shadow ones too (marked as such); a key whose bucket
//! denied keeps denying until its retry-after (the filter's denial cache), and
//! once such a cached denial of an enforcing rule rejects a request, the other
//! rules spend nothing on it. Otherwise every rule that applies takes from its
//! key's bucket, as the store would. So it answers "would this change reject
//! more of real traffic, and whose", and for rules checked exactly it gives the
//! live run's rejections; not the last request of a lease race.
//!
//! Bounded input: a line is at most [`MAX_LINE_BYTES`] and a log at most
//! [`MAX_LINES`] lines; past either the replay stops with an error naming the
//! line, and no line is held longer than the cap while it is read.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, Read, Write};

use meshlimit_core::rules::{Mode, RequestInfo, Rule, RuleSet};
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{Counter, DescriptorKey, Limit, Take, NANOS_PER_MS, NANOS_PER_SEC};
use serde_json::{json, Value};

use meshlimit_agent::decision_log::LogLine;

/// How the replay names a key: by the key itself (access log), or by its rule
/// and id (decision log, where no key is in clear).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum KeyName {
    Clear(DescriptorKey),
    Id { rule: String, key_id: String },
}

/// One line of either log.
enum Entry {
    Request(RequestInfo),
    Decided { rule: String, key_id: String },
}

/// Rejections of one rules set over the log.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Per rule: (requests it applied to, requests it would reject).
    pub(crate) by_rule: BTreeMap<String, (u64, u64)>,
    /// Per key: requests it would reject.
    pub(crate) by_key: HashMap<KeyName, u64>,
    /// Requests the filter would answer 400 (a key header sent twice).
    pub(crate) ambiguous: u64,
}

/// What a replay read.
#[derive(Debug, Default)]
pub struct Replay {
    pub(crate) requests: u64,
    /// Lines that are not a request (counted, not fatal: logs have noise).
    pub(crate) skipped: u64,
    /// Decision log lines kept at a sample rate below 1.
    pub(crate) sampled: u64,
    pub(crate) new: Outcome,
    pub baseline: Option<Outcome>,
}

/// The longest line read, in bytes: an access log line with its headers or a
/// decision log line is a few KiB.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The most lines read from one log. The replay keeps a bucket for each key it
/// meets (a few hundred bytes), so this bounds its memory to a few GiB on a
/// log of distinct keys; a longer stretch of traffic is replayed in parts.
pub const MAX_LINES: u64 = 10_000_000;

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("line {line}: longer than {MAX_LINE_BYTES} bytes, the longest line replay reads")]
    LineTooLong { line: u64 },
    #[error("more than {max} lines, the most replay reads: replay the log in parts")]
    TooManyLines { max: u64 },
    #[error("line {line}: cannot read: {source}")]
    Read { line: u64, source: io::Error },
}

/// The next line of `log` into `buf`, without its line end (`\n` or
/// `\r\n`): `false` at the end. At most [`MAX_LINE_BYTES`] and a line end
/// are read into `buf`.
fn next_line(log: &mut impl BufRead, buf: &mut Vec<u8>, line: u64) -> Result<bool, ReplayError> {
    buf.clear();
    let cap = u64::try_from(MAX_LINE_BYTES).unwrap_or(u64::MAX) + 2;
    let n = log
        .take(cap)
        .read_until(b'\n', buf)
        .map_err(|source| ReplayError::Read { line, source })?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    if buf.len() > MAX_LINE_BYTES {
        return Err(ReplayError::LineTooLong { line });
    }
    Ok(true)
}

/// Replays every line of `log` through `new` (and `baseline`).
pub fn replay(
    log: impl BufRead,
    new: &RuleSet,
    baseline: Option<&RuleSet>,
) -> Result<Replay, ReplayError> {
    replay_at_most(log, MAX_LINES, new, baseline)
}

/// [`replay`] of at most `max_lines` lines.
fn replay_at_most(
    mut log: impl BufRead,
    max_lines: u64,
    new: &RuleSet,
    baseline: Option<&RuleSet>,
) -> Result<Replay, ReplayError> {
    let mut r = Replay {
        baseline: baseline.map(|_| Outcome::default()),
        ..Replay::default()
    };
    let mut keys_new = HashMap::new();
    let mut keys_old = HashMap::new();
    let mut buf = Vec::new();
    let mut number = 0u64;
    while next_line(&mut log, &mut buf, number + 1)? {
        number += 1;
        if number > max_lines {
            return Err(ReplayError::TooManyLines { max: max_lines });
        }
        let line = std::str::from_utf8(&buf).ok();
        let Some((now, entry, sampled)) = line.and_then(entry) else {
            r.skipped += 1;
            continue;
        };
        match &entry {
            Entry::Request(req) => {
                r.requests += 1;
                judge(new, req, now, &mut keys_new, &mut r.new);
                if let (Some(set), Some(out)) = (baseline, r.baseline.as_mut()) {
                    judge(set, req, now, &mut keys_old, out);
                }
            }
            Entry::Decided { rule, key_id } => {
                if new.rule(rule).is_none() {
                    r.skipped += 1;
                    continue;
                }
                r.requests += 1;
                r.sampled += u64::from(sampled);
                judge_decided(new, rule, key_id, now, &mut keys_new, &mut r.new);
                if let (Some(set), Some(out)) = (baseline, r.baseline.as_mut()) {
                    judge_decided(set, rule, key_id, now, &mut keys_old, out);
                }
            }
        }
    }
    Ok(r)
}

/// A line of either format: its time (ns since the epoch), what it says, and
/// whether it was sampled (a decision log line kept at a rate below 1).
fn entry(line: &str) -> Option<(u64, Entry, bool)> {
    if let Some((now, req)) = request(line) {
        return Some((now, Entry::Request(req), false));
    }
    let l = decision(line)?;
    let now = l.record.at_ms.checked_mul(NANOS_PER_MS)?;
    let sampled = l.record.sample_rate < 1.0;
    Some((
        now,
        Entry::Decided {
            rule: l.record.rule,
            key_id: l.record.key_id,
        },
        sampled,
    ))
}

/// One decision log line.
fn decision(line: &str) -> Option<LogLine> {
    serde_json::from_str(line).ok()
}

/// One decision log line under `set`: the key's bucket under its rule (a plan
/// rule's default plan: the id does not say the plan), the filter's cached
/// denial as in [`judge`].
fn judge_decided(
    set: &RuleSet,
    rule: &str,
    key_id: &str,
    now: u64,
    keys: &mut HashMap<KeyName, KeyState>,
    out: &mut Outcome,
) {
    let Some(r) = set.rule(rule) else {
        return;
    };
    // A decision log names no plan: the default plan's limit, in force at the
    // record's time.
    let limit = r.limit_in_force(None, now).limit;
    out.by_rule.entry(rule.to_string()).or_default().0 += 1;
    let name = KeyName::Id {
        rule: rule.to_string(),
        key_id: key_id.to_string(),
    };
    let key = KeyState::of(keys, &name, &limit, now);
    if key.denying(now) || key.take(r, &limit, now) {
        reject(out, rule, name);
    }
}

/// One key's state: its bucket and the denial the filter would hold for it.
#[derive(Debug)]
pub(crate) struct KeyState {
    /// The key's bucket, or window (the log's times are Unix time, so windows
    /// are aligned to the epoch as the store's are).
    bucket: Counter,
    /// Until when (ns) the key's last denial holds, as the filter caches it.
    denied_until_ns: u64,
}

impl KeyState {
    /// `name`'s state, a fresh bucket under `limit` the first time.
    fn of<'k>(
        keys: &'k mut HashMap<KeyName, KeyState>,
        name: &KeyName,
        limit: &Limit,
        now: u64,
    ) -> &'k mut KeyState {
        keys.entry(name.clone()).or_insert_with(|| KeyState {
            bucket: Counter::fresh(limit, now),
            denied_until_ns: 0,
        })
    }

    /// Whether the filter would still answer from its cached denial.
    fn denying(&self, now: u64) -> bool {
        self.denied_until_ns > now
    }

    /// Takes the rule's cost as the store would; a denial is cached as the
    /// filter caches it (no longer than the rule's next schedule edge).
    /// `true` when denied.
    fn take(&mut self, rule: &Rule, limit: &Limit, now: u64) -> bool {
        let cost = rule.cost.get();
        let Take::Denied { retry_after_ns } = self.bucket.take(limit, now, cost, cost) else {
            return false;
        };
        let held = retry_after_ns.min(rule.until_change_ns(now));
        self.denied_until_ns = now.saturating_add(held);
        true
    }
}

fn judge(
    set: &RuleSet,
    req: &RequestInfo,
    now: u64,
    keys: &mut HashMap<KeyName, KeyState>,
    out: &mut Outcome,
) {
    let Ok(applicable) = set.applicable(req) else {
        out.ambiguous += 1;
        return;
    };
    for a in &applicable {
        out.by_rule.entry(a.rule.name.clone()).or_default().0 += 1;
    }
    // First what the filter decides locally: a cached denial, strictest rule
    // first. An enforcing one rejects the request before any token is spent.
    let mut to_take = Vec::with_capacity(applicable.len());
    for a in applicable {
        let name = KeyName::Clear(a.key.clone());
        if keys.get(&name).is_some_and(|k| k.denying(now)) {
            let enforcing = a.rule.mode == Mode::Enforce;
            reject(out, &a.rule.name, name);
            if enforcing {
                return;
            }
        } else {
            to_take.push(a);
        }
    }
    // The rest go to the store together; each is granted or denied on its own.
    for a in to_take {
        let name = KeyName::Clear(a.key);
        if KeyState::of(keys, &name, &a.limit, now).take(a.rule, &a.limit, now) {
            reject(out, &a.rule.name, name);
        }
    }
}

fn reject(out: &mut Outcome, rule: &str, key: KeyName) {
    out.by_rule.entry(rule.to_string()).or_default().1 += 1;
    *out.by_key.entry(key).or_default() += 1;
}

/// One log line as a request and its time (ns since the epoch).
fn request(line: &str) -> Option<(u64, RequestInfo)> {
    let v: Value = serde_json::from_str(line).ok()?;
    let obj = v.as_object()?;
    let field = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| *s != "-");
    let now = instant_ns(field("start_time")?)?;
    let headers: Vec<(String, String)> = obj
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "start_time" | "method" | "path" | "client_ip" | "route"
            )
        })
        .filter_map(|(k, v)| {
            Some((
                k.to_ascii_lowercase(),
                v.as_str().filter(|s| *s != "-")?.to_string(),
            ))
        })
        .collect();
    let mut req = RequestInfo::new(field("path")?, field("method").unwrap_or("GET"), headers);
    req.client_ip = field("client_ip").map(str::to_string);
    req.route = field("route").map(str::to_string);
    req.now_ns = now;
    Some((now, req))
}

/// `2026-12-01T14:02:00.123Z` (fraction optional) as ns since the epoch.
fn instant_ns(text: &str) -> Option<u64> {
    let (whole, frac) = match text.strip_suffix('Z')?.split_once('.') {
        Some((w, f)) => (format!("{w}Z"), f),
        None => (text.to_string(), ""),
    };
    let secs = meshlimit_core::rules::expiry::parse_instant(&whole)?;
    let digits: String = frac.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let frac_ns = if digits.is_empty() {
        0
    } else {
        digits.parse::<u64>().ok()? * 10u64.pow(9 - u32::try_from(digits.len()).ok()?)
    };
    secs.checked_mul(NANOS_PER_SEC)?.checked_add(frac_ns)
}

/// The report: per rule, then the keys NEW would newly limit (by id), as text
/// or JSON.
pub fn report(r: &Replay, new: &RuleSet, ids: &KeyIds, json_out: bool, out: &mut impl Write) {
    let newly = newly_limited(r, ids);
    let rules = rule_rows(r, new);
    if json_out {
        write_json(r, rules, &newly, out);
    } else {
        write_text(r, &rules, &newly, out);
    }
}

/// The keys shown as newly limited: at most this many.
const NEWLY_SHOWN: usize = 20;

/// A key NEW rejects more often than the baseline.
struct Newly {
    rule: String,
    key_id: String,
    /// Requests NEW would reject.
    rejected: u64,
    /// Requests the baseline would reject (0 without one).
    before: u64,
}

/// The keys NEW rejects more often than the baseline, the largest rise
/// first (then by id), at most [`NEWLY_SHOWN`].
fn newly_limited(r: &Replay, ids: &KeyIds) -> Vec<Newly> {
    let mut newly: Vec<Newly> = r
        .new
        .by_key
        .iter()
        .map(|(k, n)| {
            let before = r
                .baseline
                .as_ref()
                .map_or(0, |b| b.by_key.get(k).copied().unwrap_or(0));
            let (rule, key_id) = match k {
                KeyName::Clear(key) => (key.rule().to_string(), ids.id(key).to_string()),
                KeyName::Id { rule, key_id } => (rule.clone(), key_id.clone()),
            };
            Newly {
                rule,
                key_id,
                rejected: *n,
                before,
            }
        })
        .filter(|k| k.rejected > k.before)
        .collect();
    newly.sort_by(|a, b| {
        (b.rejected - b.before)
            .cmp(&(a.rejected - a.before))
            .then(a.key_id.cmp(&b.key_id))
    });
    newly.truncate(NEWLY_SHOWN);
    newly
}

/// One row a rule of NEW: whether in shadow, the requests it applied to and
/// would reject, and what the baseline would reject (null without one).
fn rule_rows(r: &Replay, new: &RuleSet) -> Vec<Value> {
    new.rules()
        .iter()
        .map(|rule| {
            let (applied, rejected) = r.new.by_rule.get(&rule.name).copied().unwrap_or_default();
            let before = r
                .baseline
                .as_ref()
                .map(|b| b.by_rule.get(&rule.name).map_or(0, |x| x.1));
            json!({
                "rule": rule.name,
                "shadow": rule.mode == Mode::Shadow,
                "applied": applied,
                "would_reject": rejected,
                "baseline_would_reject": before,
            })
        })
        .collect()
}

/// The report as one JSON object.
fn write_json(r: &Replay, rules: Vec<Value>, newly: &[Newly], out: &mut impl Write) {
    let keys: Vec<Value> = newly
        .iter()
        .map(|k| json!({"rule": k.rule, "key_id": k.key_id, "would_reject": k.rejected, "baseline_would_reject": k.before}))
        .collect();
    let report = json!({
        "requests": r.requests,
        "skipped_lines": r.skipped,
        "sampled_lines": r.sampled,
        "ambiguous": r.new.ambiguous,
        "rules": rules,
        "newly_limited_keys": keys,
    });
    let _ = writeln!(out, "{report}");
}

/// The report as lines: the totals, a line a rule, a line a newly limited key.
fn write_text(r: &Replay, rules: &[Value], newly: &[Newly], out: &mut impl Write) {
    let _ = writeln!(
        out,
        "{} requests replayed ({} lines skipped, {} ambiguous)",
        r.requests, r.skipped, r.new.ambiguous
    );
    if r.sampled > 0 {
        let _ = writeln!(
            out,
            "{} decision log lines were sampled (log_sample below 1): fewer requests replayed than ran",
            r.sampled
        );
    }
    for row in rules {
        let before = match row["baseline_would_reject"].as_u64() {
            Some(b) => format!(" (baseline {b})"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "rule {}{}: applied to {}, would reject {}{before}",
            row["rule"].as_str().unwrap_or_default(),
            if row["shadow"] == json!(true) {
                " (shadow)"
            } else {
                ""
            },
            row["applied"],
            row["would_reject"],
        );
    }
    for k in newly {
        let _ = writeln!(
            out,
            "newly limited: rule {} key {}: {} rejected (baseline {})",
            k.rule, k.key_id, k.rejected, k.before
        );
    }
}

mod command;

pub use command::{command, ReplayCommandError};

#[cfg(test)]
mod tests;
