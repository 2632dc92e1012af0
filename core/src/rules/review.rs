//! Every rules change is a diff. A new rules set is compared with the one it
//! replaces, rule by rule: added, removed, limit changed by a factor, mode, match
//! widened or narrowed. An enforced limit cut below `changes.max_tightening` × its
//! running value is refused unless the new file approves that rule against the
//! running version: a limit set ten times too low is the most common way a rate
//! limiter takes an API down, so it takes a second pair of eyes.
//!
//! The maximum is the running rules' (the guard in force before the change),
//! never the new file's: a change that loosens its own guard is held to the
//! old one, and the looser guard applies from the next change on. Only the
//! approval comes with the change, pinned to the running version it replaces.

use super::config::{ApprovalConfig, Mode};
use super::{HeaderMatch, Limits, Matcher, NamePattern, PathMatch, Rule, RuleSet};
use crate::authority::HostPattern;
use crate::limit::Limit;

/// What changed for one rule.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleChange {
    pub rule: String,
    pub change: Change,
    /// Refused: an enforced limit tightened beyond the maximum without approval.
    pub refused: bool,
}

/// The kinds of change.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Added {
        mode: Mode,
    },
    Removed,
    /// The limit (of `plan`, for rules with plans) went from `old` to `new`;
    /// `factor` is the smaller of the rate's and the burst's ratio (new ÷ old).
    Limit {
        plan: Option<String>,
        old: Limit,
        new: Limit,
        factor: f64,
    },
    Mode {
        old: Mode,
        new: Mode,
    },
    /// The schedule changed (its windows, or a window's limit): each window as
    /// it was and as it is, and the instant of the week (`Mon 00:00:00 UTC`)
    /// where, with a window of either in force, the new limit is tightest
    /// against the old: `factor` there (new ÷ old, as for `Limit`).
    Schedule {
        old: Vec<String>,
        new: Vec<String>,
        factor: f64,
        at: String,
        before: Limit,
        after: Limit,
    },
    /// The new match covers every request the old one did, and more.
    MatchWidened,
    /// The new match covers only some of the requests the old one did.
    MatchNarrowed,
    /// Neither covers the other.
    MatchChanged,
}

/// What one rule's change is held to: the tightening maximum in force, and the
/// approvals that came with the change.
#[derive(Debug, Clone, Copy)]
pub struct Guard<'a> {
    pub max_tightening: f64,
    pub approve: &'a [ApprovalConfig],
}

/// The rule-by-rule difference from `old` (the running set) to `new`, in `new`'s
/// evaluation order, then the removed rules; held to `old`'s maximum and
/// `new`'s approvals.
pub fn review(old: &RuleSet, new: &RuleSet) -> Vec<RuleChange> {
    let guard = Guard {
        max_tightening: old.changes.max_tightening,
        approve: &new.changes.approve,
    };
    review_guarded(old, new, |_| guard)
}

/// [`review`], each rule held to `guard(rule name)`: a rules directory holds
/// each rule to the guard of the file that owns it.
pub fn review_guarded<'g>(
    old: &RuleSet,
    new: &RuleSet,
    guard: impl Fn(&str) -> Guard<'g>,
) -> Vec<RuleChange> {
    let approved = |g: &Guard<'_>, rule: &str| {
        g.approve
            .iter()
            .any(|a| a.rule == rule && a.against == old.version())
    };
    let mut out = Vec::new();
    for rule in new.rules() {
        let g = guard(&rule.name);
        let max = g.max_tightening;
        let Some(was) = old.rule(&rule.name) else {
            out.push(change(rule, Change::Added { mode: rule.mode }, false));
            continue;
        };
        let enforced_both = was.mode == Mode::Enforce && rule.mode == Mode::Enforce;
        for (plan, before, after) in limit_pairs(was, rule) {
            if before == after {
                continue;
            }
            let factor = ratio(&after, &before);
            let refused = enforced_both && factor < max && !approved(&g, &rule.name);
            out.push(change(
                rule,
                Change::Limit {
                    plan,
                    old: before,
                    new: after,
                    factor,
                },
                refused,
            ));
        }
        if was.schedule != rule.schedule {
            let c = schedule_change(was, rule);
            let refused = enforced_both
                && matches!(c, Change::Schedule { factor, .. } if factor < max)
                && !approved(&g, &rule.name);
            out.push(change(rule, c, refused));
        }
        if was.mode != rule.mode {
            let c = Change::Mode {
                old: was.mode,
                new: rule.mode,
            };
            out.push(change(rule, c, false));
        }
        let (wider, narrower) = (
            covers(&rule.matcher, &was.matcher),
            covers(&was.matcher, &rule.matcher),
        );
        let m = match (wider, narrower) {
            (true, true) => None,
            (true, false) => Some(Change::MatchWidened),
            (false, true) => Some(Change::MatchNarrowed),
            (false, false) => Some(Change::MatchChanged),
        };
        if let Some(m) = m {
            out.push(change(rule, m, false));
        }
    }
    for rule in old.rules() {
        if new.rule(&rule.name).is_none() {
            out.push(change(rule, Change::Removed, false));
        }
    }
    out
}

impl std::fmt::Display for RuleChange {
    /// One line a reviewer reads: `~ rule api: limit 100 per 1s (burst 100) →
    /// 10 per 1s (burst 10), ×0.10 — REFUSED: …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rule = &self.rule;
        match &self.change {
            Change::Added { mode } => write!(f, "+ rule {rule}: added ({})", mode_name(*mode)),
            Change::Removed => write!(f, "- rule {rule}: removed"),
            Change::Limit {
                plan,
                old,
                new,
                factor,
            } => {
                let plan = plan
                    .as_deref()
                    .map(|p| format!(" (plan {p})"))
                    .unwrap_or_default();
                write!(
                    f,
                    "~ rule {rule}: limit{plan} {} → {}, ×{factor:.2}",
                    show(old),
                    show(new)
                )?;
                refusal(f, self.refused, rule)
            }
            Change::Schedule {
                old,
                new,
                factor,
                at,
                before,
                after,
            } => {
                let list = |w: &[String]| {
                    if w.is_empty() {
                        "none".to_string()
                    } else {
                        w.join("; ")
                    }
                };
                write!(
                    f,
                    "~ rule {rule}: schedule [{}] → [{}]; tightest at {at}: {} → {}, ×{factor:.2}",
                    list(old),
                    list(new),
                    show(before),
                    show(after)
                )?;
                refusal(f, self.refused, rule)
            }
            Change::Mode { old, new } => write!(
                f,
                "~ rule {rule}: mode {} → {}",
                mode_name(*old),
                mode_name(*new)
            ),
            Change::MatchWidened => {
                write!(f, "~ rule {rule}: match widened (applies to more requests)")
            }
            Change::MatchNarrowed => write!(f, "~ rule {rule}: match narrowed"),
            Change::MatchChanged => write!(f, "~ rule {rule}: match changed"),
        }
    }
}

/// What a refused tightening needs, after its line.
fn refusal(f: &mut std::fmt::Formatter<'_>, refused: bool, rule: &str) -> std::fmt::Result {
    if refused {
        write!(
            f,
            " — refused: an enforced limit cut beyond the allowed maximum \
             (changes.max_tightening) needs `changes: {{approve: [{{rule: {rule}, against: <the running version>}}]}}`"
        )?;
    }
    Ok(())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
    }
}

fn show(l: &Limit) -> String {
    let per = l.per_ns() as f64 / crate::NANOS_PER_SEC as f64;
    if l.algorithm().is_window() {
        format!("{} per {per} s ({})", l.requests(), l.algorithm().name())
    } else {
        format!("{} per {per} s (burst {})", l.requests(), l.burst())
    }
}

/// The windows of a rule as one line each: `top: minutes 00m00s-00m30s UTC: 100
/// per 1 s (burst 1000)`.
fn windows(rule: &Rule) -> Vec<String> {
    rule.schedule
        .windows()
        .iter()
        .map(|w| format!("{}: {}", w.describe(), show(&w.limit)))
        .collect()
}

/// How `new`'s schedule compares with `old`'s: at every instant of the week
/// where the window in force may change (either schedule's edges) and a window
/// of either is in force, the limit in force before and after; the tightest.
fn schedule_change(old: &Rule, new: &Rule) -> Change {
    let mut edges: Vec<u64> = old
        .schedule
        .week_edges()
        .chain(new.schedule.week_edges())
        .collect();
    edges.sort_unstable();
    edges.dedup();
    let mut tightest: Option<(f64, u64, Limit, Limit)> = None;
    for t in edges {
        let (a, b) = (old.limit_in_force(None, t), new.limit_in_force(None, t));
        if a.window.is_none() && b.window.is_none() {
            continue;
        }
        let factor = ratio(&b.limit, &a.limit);
        if tightest.is_none_or(|(f, ..)| factor < f) {
            tightest = Some((factor, t, a.limit, b.limit));
        }
    }
    let (base_old, base_new) = (old.limit_for_plan(None).0, new.limit_for_plan(None).0);
    let (factor, t, before, after) =
        tightest.unwrap_or((ratio(&base_new, &base_old), 0, base_old, base_new));
    Change::Schedule {
        old: windows(old),
        new: windows(new),
        factor,
        at: super::schedule::week_time(t),
        before,
        after,
    }
}

fn change(rule: &Rule, change: Change, refused: bool) -> RuleChange {
    RuleChange {
        rule: rule.name.clone(),
        change,
        refused,
    }
}

/// The limits to compare: the one limit, or each plan the old rule had (a plan
/// that went away is now served the default plan's limit).
pub(super) fn limit_pairs(old: &Rule, new: &Rule) -> Vec<(Option<String>, Limit, Limit)> {
    match &old.limits {
        Limits::Single(l) => vec![(None, *l, new.limit_for_plan(None).0)],
        Limits::Plans {
            default_plan,
            default,
            limits,
            ..
        } => {
            let mut pairs: Vec<(Option<String>, Limit, Limit)> = limits
                .iter()
                .map(|(name, l)| (Some(name.clone()), *l, new.limit_for_plan(Some(name)).0))
                .collect();
            if !limits.contains_key(default_plan) {
                pairs.push((
                    Some(default_plan.clone()),
                    *default,
                    new.limit_for_plan(None).0,
                ));
            }
            pairs
        }
    }
}

/// How much of the old limit the new one leaves: the smaller of the rates' and
/// the bursts' ratios.
pub(super) fn ratio(new: &Limit, old: &Limit) -> f64 {
    let rate = new.rate_per_sec() / old.rate_per_sec();
    let burst = f64::from(new.burst()) / f64::from(old.burst());
    rate.min(burst)
}

/// Whether matcher `a` matches every request `b` matches.
fn covers(a: &Matcher, b: &Matcher) -> bool {
    let methods = match (&a.methods, &b.methods) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => b.iter().all(|m| a.contains(m)),
    };
    // Fewer header conditions match more requests.
    let headers = a.headers.iter().all(|(name, hm)| {
        b.headers
            .iter()
            .any(|(n, other)| n == name && same_condition(hm, other))
    });
    path_covers(&a.path, &b.path)
        && methods
        && headers
        && authority_covers(&a.authority, &b.authority)
        && name_covers(&a.cluster, &b.cluster)
        && name_covers(&a.route, &b.route)
}

/// Whether cluster or route condition `a` holds for every name `b` admits.
fn name_covers(a: &Option<NamePattern>, b: &Option<NamePattern>) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a.covers(b),
    }
}

/// Whether host condition `a` holds for every host `b` admits.
fn authority_covers(a: &Option<HostPattern>, b: &Option<HostPattern>) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(HostPattern::Exact(h))) => a.matches(h),
        (Some(HostPattern::Exact(_)), Some(HostPattern::Suffix(_))) => false,
        (Some(HostPattern::Suffix(x)), Some(HostPattern::Suffix(y))) => y.ends_with(x.as_str()),
    }
}

fn same_condition(a: &HeaderMatch, b: &HeaderMatch) -> bool {
    match (a, b) {
        (HeaderMatch::Present(x), HeaderMatch::Present(y)) => x == y,
        (HeaderMatch::Equals(x), HeaderMatch::Equals(y)) => x == y,
        // `equals: v` implies `present: true`.
        (HeaderMatch::Present(true), HeaderMatch::Equals(_)) => true,
        _ => false,
    }
}

/// Whether path condition `a` holds for every path `b` admits.
fn path_covers(a: &PathMatch, b: &PathMatch) -> bool {
    let under =
        |dir: &str, p: &str| p == dir || p.starts_with(&format!("{}/", dir.trim_end_matches('/')));
    match (a, b) {
        (PathMatch::Any, _) => true,
        (_, PathMatch::Any) => false,
        (PathMatch::Exact(x), PathMatch::Exact(y)) => x == y,
        (PathMatch::Exact(_), _) => false,
        (
            PathMatch::Prefix(x),
            PathMatch::Exact(y) | PathMatch::Prefix(y) | PathMatch::Directory(y),
        ) => y.starts_with(x.as_str()),
        (PathMatch::Directory(x), PathMatch::Exact(y) | PathMatch::Directory(y)) => under(x, y),
        (PathMatch::Directory(x), PathMatch::Prefix(y)) => {
            y.starts_with(&format!("{}/", x.trim_end_matches('/')))
        }
    }
}

#[cfg(test)]
mod tests;
