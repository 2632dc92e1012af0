//! A rule's `schedule` compiled: each window's span, days and limit, each
//! problem named by its field.

use super::check_name;
use super::limits::compile_limit;
use crate::rules::config::{Algorithm, LimitConfig, RuleConfig};
use crate::rules::schedule::{day_bit, Schedule, Span, SpanKind, Window, MAX_WINDOWS};

/// The rule's `schedule`: each window's span, days and limit (the rule's
/// `limit` with the window's fields written over it), every problem named by
/// its field (`schedule[1].minutes`).
pub(super) fn compile_schedule(
    rule: &RuleConfig,
    cost: u32,
    algorithm: Algorithm,
    err: &mut impl FnMut(&str, String),
) -> Schedule {
    if rule.schedule.is_empty() {
        return Schedule::default();
    }
    let Some(base) = &rule.limit else {
        if rule.plans.is_some() {
            err(
                "schedule",
                "a rule with `plans` cannot have a schedule: give it `limit`, or write the windowed limit as a rule of its own".into(),
            );
        }
        return Schedule::default();
    };
    if rule.schedule.len() > MAX_WINDOWS {
        err(
            "schedule",
            format!("{} windows; at most {MAX_WINDOWS}", rule.schedule.len()),
        );
        return Schedule::default();
    }
    let mut windows = Vec::with_capacity(rule.schedule.len());
    for (i, w) in rule.schedule.iter().enumerate() {
        let field = format!("schedule[{i}]");
        if let Some(name) = &w.name {
            check_name(name, &format!("{field}.name"), err);
        }
        let mut days = 0u8;
        if let Some(list) = &w.days {
            if list.is_empty() {
                err(
                    &format!("{field}.days"),
                    "an empty list opens on no day; leave `days` out for every day".into(),
                );
            }
            for (j, d) in list.iter().enumerate() {
                match day_bit(d) {
                    Some(bit) => days |= bit,
                    None => err(
                        &format!("{field}.days[{j}]"),
                        format!("`{d}` is not a day: write mon, tue, wed, thu, fri, sat or sun"),
                    ),
                }
            }
        }
        let span = match (&w.minutes, &w.hours) {
            (Some(m), None) => Span::parse(m, SpanKind::Minutes)
                .map_err(|e| err(&format!("{field}.minutes"), e.to_string()))
                .ok(),
            (None, Some(h)) => Span::parse(h, SpanKind::Hours)
                .map_err(|e| err(&format!("{field}.hours"), e.to_string()))
                .ok(),
            (Some(_), Some(_)) => {
                err(
                    &field,
                    "give either `minutes` (a span within every hour) or `hours` (within every day), not both".into(),
                );
                None
            }
            (None, None) => {
                err(
                    &field,
                    "a window needs `minutes: \"MM-MM\"` (within every hour) or `hours: \"HH:MM-HH:MM\"` (within every day)".into(),
                );
                None
            }
        };
        if w.requests.is_none() && w.per.is_none() && w.burst.is_none() {
            err(
                &field,
                "a window changes nothing without `requests`, `per` or `burst`".into(),
            );
            continue;
        }
        let merged = LimitConfig {
            requests: w.requests.unwrap_or(base.requests),
            per: w.per.clone().unwrap_or_else(|| base.per.clone()),
            burst: w.burst.or(base.burst),
        };
        let limit = compile_limit(&merged, &field, cost, algorithm, err);
        if let (Some(span), Some(limit)) = (span, limit) {
            windows.push(Window::new(w.name.clone(), days, span, limit));
        }
    }
    Schedule::new(windows)
}
